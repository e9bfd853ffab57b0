package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gmailrelay/gmailrelay/internal/lifecycle"
)

// SendAsInterval is how often a mailbox's send-as list is read again
// after a successful read (at start and every hour).
const SendAsInterval = time.Hour

// SendAsRetry is how soon a read that failed (Gmail unreachable, an
// error answer, the quota budget spent) is tried again.
const SendAsRetry = time.Minute

// sendAsState is one read of a mailbox's send-as list.
type sendAsState struct {
	// verified holds the verified addresses, lower-case, from the last
	// successful read; nil while none succeeded.
	verified []string
	readAt   time.Time // the last successful read, by the Service's clock
	triedAt  time.Time // the last attempt
	err      error     // the last attempt's error; nil when it succeeded
}

// SendAs returns the mailbox's verified send-as addresses (lower-case)
// from the last successful read of users.settings.sendAs.list and when it
// was made; ok is false while no read has succeeded, and a send's From is
// then not checked.
func (m *Mailbox) SendAs() (verified []string, readAt time.Time, ok bool) {
	st := m.sendAs.Load()
	if st == nil || st.verified == nil {
		return nil, time.Time{}, false
	}
	return slices.Clone(st.verified), st.readAt, true
}

// MaxRecipients returns the most addresses a message sent as the mailbox
// may carry in To, Cc and Bcc together (its policy's max_recipients).
func (m *Mailbox) MaxRecipients() int { return m.maxRecipients }

// checkLimits refuses, before anything is logged or sent, a new job that
// Gmail would not send as asked: more recipients than the mailbox's
// max_recipients (CodeInvalid naming the list that passes it, or raw for
// a raw message), or a From that is not one of the mailbox's verified
// send-as addresses (checkFrom).
func (m *Mailbox) checkLimits(p *Prepared) error {
	if field, total := overRecipients(p.Recipients, m.maxRecipients); field != "" {
		if p.recipientsField != "" {
			return Invalid(p.recipientsField, "%s has %d recipients in To, Cc and Bcc; mailbox %s takes at most %d a message (max_recipients)",
				p.recipientsField, p.Recipients[0]+p.Recipients[1]+p.Recipients[2], m.name, m.maxRecipients)
		}
		return Invalid(field, "%s brings the addresses in to, cc and bcc to %d; mailbox %s takes at most %d recipients a message (max_recipients)",
			field, total, m.name, m.maxRecipients)
	}
	return m.checkFrom(p.From)
}

// checkFrom refuses a From (bare, lower-case; "" is the mailbox's default
// address, always fine) that the mailbox's last read send-as list does
// not hold as verified: Gmail would send the message as the mailbox's
// default address instead and still answer 200. While no read of the list
// has succeeded the From is not checked: a mailbox whose settings Gmail
// does not answer for keeps sending (RefreshSendAs logs every failed read
// and /metrics shows gmailrelay_mailbox_send_as_checked 0).
func (m *Mailbox) checkFrom(from string) error {
	if from == "" {
		return nil
	}
	st := m.sendAs.Load()
	if st == nil || st.verified == nil || slices.Contains(st.verified, from) {
		return nil
	}
	return &Error{Code: CodeFromNotVerified, Field: "from", Message: fmt.Sprintf(
		"from %s is not a verified send-as address of mailbox %s (verified: %s); Gmail would send the message as the mailbox's default address instead. "+
			"Send from a verified address, or add and verify %s in the mailbox's Gmail settings (Send mail as); the relay reads them again within %s",
		from, m.name, strings.Join(st.verified, ", "), from, SendAsInterval)}
}

// due reports whether the mailbox's send-as list should be read at now:
// never read, the last attempt failed SendAsRetry ago, or the last read
// is SendAsInterval old.
func (st *sendAsState) due(now time.Time) bool {
	switch {
	case st == nil:
		return true
	case st.err != nil:
		return !now.Before(st.triedAt.Add(SendAsRetry))
	}
	return !now.Before(st.readAt.Add(SendAsInterval))
}

// RefreshSendAs reads users.settings.sendAs.list for every mailbox whose
// list is due (never read, read SendAsInterval ago by the Service's clock,
// or failed SendAsRetry ago), taking UnitsSendAsList of the mailbox's
// quota for each read as background work does (it leaves the send
// reserve). It returns how many lists it read and the errors of those it
// could not, joined; a mailbox whose read failed keeps its last list (or
// none, and no From check) and is tried again SendAsRetry later. serve
// runs it at start and then every minute (WatchSendAs); tests call it
// after moving their clock.
func (s *Service) RefreshSendAs(ctx context.Context) (read int, err error) {
	var errs []error
	for _, m := range s.boxes {
		now := s.now()
		prev := m.sendAs.Load()
		if !prev.due(now) {
			continue
		}
		next := &sendAsState{triedAt: now}
		if prev != nil {
			next.verified, next.readAt = prev.verified, prev.readAt
		}
		verified, rerr := s.readSendAs(ctx, m)
		if rerr == nil {
			next.verified, next.readAt = verified, now
			read++
		} else {
			next.err = rerr
			errs = append(errs, fmt.Errorf("mailbox %s: %w", m.name, rerr))
			ev := s.logger.Warn().Err(rerr).Str("mailbox", m.name).Dur("retry_in", SendAsRetry)
			if next.verified == nil {
				ev.Msg("send-as list: read failed; From addresses are not checked until a read succeeds")
			} else {
				ev.Time("read_at", next.readAt).Msg("send-as list: read failed; From addresses are checked against the last list read")
			}
		}
		m.sendAs.Store(next)
	}
	return read, errors.Join(errs...)
}

// errNoSendAs is a send-as list without a verified address: every Gmail
// account has its primary one, so the answer is not trusted.
var errNoSendAs = errors.New("users.settings.sendAs.list named no verified address")

// readSendAs makes one read of m's send-as list and returns its verified
// addresses, lower-case and sorted.
func (s *Service) readSendAs(ctx context.Context, m *Mailbox) ([]string, error) {
	if ok, wait := m.quota.takeFor(UnitsSendAsList, takeBackground); !ok {
		return nil, fmt.Errorf("the relay's Gmail quota budget is spent for %s", wait.Round(time.Second))
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	list, err := m.provider.SendAs(ctx, m.userID)
	if err != nil {
		return nil, err
	}
	var verified []string
	for _, a := range list {
		if e := strings.ToLower(strings.TrimSpace(a.Email)); a.Verified() && e != "" && !slices.Contains(verified, e) {
			verified = append(verified, e)
		}
	}
	if len(verified) == 0 {
		return nil, errNoSendAs
	}
	slices.Sort(verified)
	return verified, nil
}

// WatchSendAs runs RefreshSendAs at once and then every tick (real time;
// which lists are due is decided on the Service's clock) until ctx ends
// or StopSendAs is called. It does nothing when already started.
func (s *Service) WatchSendAs(ctx context.Context, tick time.Duration) {
	s.sendAsLoop.Start(ctx, func(ctx context.Context) {
		lifecycle.Repeat(ctx, nil, func(ctx context.Context) time.Duration {
			_, _ = s.RefreshSendAs(ctx) // each failure is logged
			return tick
		})
	})
}

// StopSendAs ends WatchSendAs's loop and waits for a read in progress.
func (s *Service) StopSendAs() { s.sendAsLoop.Stop() }
