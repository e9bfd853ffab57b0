package pglog

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay"
)

var _ gmailrelay.MailboxEditor = (*Log)(nil)

// EditMailbox implements gmailrelay.MailboxEditor: the record's row is
// locked (lockMailbox), edited and written back in one transaction, so
// two replicas' edits of one mailbox queue and neither is lost.
func (l *Log) EditMailbox(ctx context.Context, name string, fn func(m *gmailrelay.Mailbox)) (gmailrelay.Mailbox, error) {
	if err := gmailrelay.CheckEditMailbox(ctx, name); err != nil {
		return gmailrelay.Mailbox{}, err
	}
	if l.closed.Load() {
		return gmailrelay.Mailbox{}, fmt.Errorf("edit mailbox %s: %w", name, gmailrelay.ErrClosed)
	}
	ctx = context.WithoutCancel(ctx)
	for try := 0; ; try++ {
		var mb gmailrelay.Mailbox
		err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			m, err := lockMailbox(ctx, tx, name)
			if err != nil {
				return err
			}
			fn(&m)
			m.Name = name
			v, err := json.Marshal(m)
			if err != nil {
				return fmt.Errorf("encode mailbox: %w", err)
			}
			if _, err := tx.Exec(ctx, "UPDATE mailboxes SET data = $2 WHERE name = $1", name, v); err != nil {
				return fmt.Errorf("put mailbox %s: %w", name, err)
			}
			mb = m
			return nil
		})
		if err != nil && retryable(err) && try < maxRetries {
			continue
		}
		if err != nil {
			return gmailrelay.Mailbox{}, l.wrapErr("edit mailbox "+name, err)
		}
		return mb, nil
	}
}
