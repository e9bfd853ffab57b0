package acceptlog

import (
	"context"
	"fmt"

	"github.com/gmailrelay/gmailrelay"
)

var _ gmailrelay.MailboxEditor = (*Log)(nil)

// EditMailbox implements gmailrelay.MailboxEditor: one write transaction
// (batched with the writes in flight, as Mutate's) reads the record, lets
// fn edit it and stores it sealed, durable when EditMailbox returns.
func (l *Log) EditMailbox(ctx context.Context, name string, fn func(m *gmailrelay.Mailbox)) (gmailrelay.Mailbox, error) {
	if err := gmailrelay.CheckEditMailbox(ctx, name); err != nil {
		return gmailrelay.Mailbox{}, err
	}
	if l.closed.Load() {
		return gmailrelay.Mailbox{}, fmt.Errorf("edit mailbox %s: %w", name, gmailrelay.ErrClosed)
	}
	var mb gmailrelay.Mailbox
	err := l.commit(func(w *writeTx) error {
		m, err := w.getMailbox(name)
		if err != nil {
			return err
		}
		fn(&m)
		m.Name = name
		if err := w.putMailbox(&m); err != nil {
			return err
		}
		mb = m
		return nil
	})
	if err != nil {
		return gmailrelay.Mailbox{}, l.wrapErr("edit mailbox "+name, err)
	}
	return mb, nil
}
