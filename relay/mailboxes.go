package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// Mailbox is one mailbox the relay sends as (docs/design.md#several-mailboxes): its own Gmail client, quota, daily budget, rate-limit pause
// and handle trust. Jobs carry its name (gmailrelay.Job.Mailbox); every
// Gmail call for a job goes through its job's mailbox.
type Mailbox struct {
	name     string
	userID   string
	addrs    []string
	provider Provider
	// faults is provider as a FaultInjector, nil when it injects none.
	faults FaultInjector
	quota  *Quota
	budget *Budget
	health func() error
	// maxRecipients is the policy's max_recipients (checkLimits).
	maxRecipients int
	// sendAs is the last read of the mailbox's send-as list (sendas.go).
	sendAs atomic.Pointer[sendAsState]
	// recent are the sends this process recorded (recent.go).
	recent recentSends

	// handleChecked: the mailbox's Message-ID was read back since this
	// Service started (verify_handle: first checks once per mailbox per
	// start, as the policy documents, not once ever).
	handleChecked atomic.Bool
}

// MailboxConfig overrides, for one mailbox of the policy, what New would
// otherwise use (Config.Mailboxes).
type MailboxConfig struct {
	// UserID is the Gmail userId of every call; "" means the mailbox's
	// address, or Config.UserID for the default mailbox.
	UserID string
	// Provider is the mailbox's Gmail client (its own token source); nil
	// means Config.Provider.
	Provider Provider
	// Quota is the mailbox's Gmail quota budget; nil means one of the
	// policy's quota_per_minute (else Config.QuotaPerMinute).
	Quota *Quota
	// Budget is the mailbox's daily sending budget; nil means one counted
	// from the log with the policy's daily_send_limit.
	Budget *Budget
	// Health, when set, says why the mailbox cannot reach Gmail now (its
	// credentials fail to refresh), or nil when it can. /readyz reports it.
	Health func() error
}

// Name returns the mailbox's policy name.
func (m *Mailbox) Name() string { return m.name }

// UserID returns the Gmail userId the mailbox's calls use.
func (m *Mailbox) UserID() string { return m.userID }

// Addresses returns the From addresses that pick the mailbox (none: it is
// the default mailbox with no known address).
func (m *Mailbox) Addresses() []string { return m.addrs }

// Provider returns the mailbox's Gmail client.
func (m *Mailbox) Provider() Provider { return m.provider }

// Quota returns the mailbox's Gmail quota budget.
func (m *Mailbox) Quota() *Quota { return m.quota }

// Budget returns the mailbox's daily sending budget.
func (m *Mailbox) Budget() *Budget { return m.budget }

// Health returns why the mailbox cannot reach Gmail now, or nil.
func (m *Mailbox) Health() error {
	if m.health == nil {
		return nil
	}
	return m.health()
}

// buildMailboxes makes one Mailbox per mailbox of the policy.
func (s *Service) buildMailboxes(ctx context.Context, cfg Config) error {
	perMinute := cmp.Or(cfg.QuotaPerMinute, 6000)
	for name := range cfg.Mailboxes {
		if _, ok := s.policy.Mailboxes[name]; !ok && (name != policy.DefaultMailbox || len(s.policy.Mailboxes) > 0) {
			return fmt.Errorf("relay: Config.Mailboxes names %q, which is not a mailbox of the policy", name)
		}
	}
	for _, pm := range s.policy.MailboxList() {
		mc := cfg.Mailboxes[pm.Name]
		m := &Mailbox{name: pm.Name, userID: mc.UserID, addrs: pm.Addresses(), provider: mc.Provider,
			quota: mc.Quota, budget: mc.Budget, health: mc.Health,
			maxRecipients: cmp.Or(pm.MaxRecipients, DefaultMaxRecipients)}
		def := pm.Name == policy.DefaultMailbox
		if m.userID == "" {
			m.userID = pm.Address
		}
		if m.userID == "" && def {
			m.userID = cfg.UserID
		}
		if m.userID == "" {
			m.userID = "me"
		}
		if m.provider == nil {
			m.provider = cfg.Provider
		}
		if m.quota == nil && def {
			m.quota = cfg.Quota
		}
		if m.quota == nil {
			m.quota = NewQuota(cmp.Or(pm.QuotaPerMinute, perMinute), s.now)
		}
		if m.budget == nil && def {
			m.budget = cfg.Budget
		}
		if def {
			if err := s.adoptLegacyRecord(ctx, m); err != nil {
				return fmt.Errorf("mailbox %s: %w", m.name, err)
			}
		}
		if err := s.initMailbox(ctx, m); err != nil {
			return fmt.Errorf("mailbox %s: %w", m.name, err)
		}
		s.boxes = append(s.boxes, m)
	}
	return nil
}

// Mailboxes returns the relay's mailboxes, the default one first.
func (s *Service) Mailboxes() []*Mailbox { return s.boxes }

// MailboxOf returns the mailbox a job's Mailbox names. A name no mailbox
// has is the default mailbox's when it is that mailbox's Gmail userId or
// "me" (jobs logged before mailboxes had names), and an error otherwise
// (a mailbox that has left the policy).
func (s *Service) MailboxOf(name string) (*Mailbox, error) {
	for _, m := range s.boxes {
		if m.name == name {
			return m, nil
		}
	}
	if d := s.boxes[0]; d.name == policy.DefaultMailbox && (name == "" || name == "me" || name == d.userID) {
		return d, nil
	}
	return nil, fmt.Errorf("mailbox %q is not in the policy (mailboxes: %s)", name, s.mailboxNames())
}

func (s *Service) mailboxNames() string {
	names := make([]string, len(s.boxes))
	for i, m := range s.boxes {
		names[i] = m.name
	}
	return strings.Join(names, ", ")
}

// pick chooses the mailbox of a new send: the one the caller named, else
// the one whose address or send_as is the From address, else the default
// mailbox when it has no address of its own (it takes any From), else the
// only mailbox. Every refusal is a CodeInvalid *Error naming the mailbox or
// from field and what is wrong.
func (s *Service) pick(p Prepared) (*Mailbox, error) {
	if p.Mailbox != "" {
		for _, m := range s.boxes {
			if m.name != p.Mailbox {
				continue
			}
			if p.From != "" && len(m.addrs) > 0 && !slices.Contains(m.addrs, p.From) {
				return nil, Invalid("from", "from %s is not an address mailbox %s sends as (%s)", p.From, m.name, strings.Join(m.addrs, ", "))
			}
			return m, nil
		}
		return nil, Invalid("mailbox", "no mailbox %q in the policy (mailboxes: %s)", fieldName(p.Mailbox), s.mailboxNames())
	}
	var open *Mailbox // the default mailbox without an address
	for _, m := range s.boxes {
		if p.From != "" && slices.Contains(m.addrs, p.From) {
			return m, nil
		}
		if len(m.addrs) == 0 {
			open = m
		}
	}
	switch {
	case open != nil:
		return open, nil
	case p.From != "":
		return nil, Invalid("from", "no mailbox sends as %s (the policy's mailboxes: %s)", p.From, s.addressList())
	case len(s.boxes) == 1:
		return s.boxes[0], nil
	}
	return nil, Invalid("from", "give from or mailbox: this relay sends as several mailboxes (%s)", s.mailboxNames())
}

func (s *Service) addressList() string {
	var parts []string
	for _, m := range s.boxes {
		parts = append(parts, m.name+": "+strings.Join(m.addrs, ", "))
	}
	return strings.Join(parts, "; ")
}

// errNoMailbox wraps a job's mailbox that is not in the policy.
var errNoMailbox = errors.New("job's mailbox is not in the policy")

// jobMailbox is MailboxOf for a job about to be attempted: a mailbox that
// left the policy refuses the attempt (CodeConflict) rather than sending
// through another mailbox.
func (s *Service) jobMailbox(j gmailrelay.Job) (*Mailbox, error) {
	m, err := s.MailboxOf(j.Mailbox)
	if err != nil {
		return nil, &Error{Code: CodeConflict, Message: fmt.Sprintf("%v: %v", errNoMailbox, err)}
	}
	return m, nil
}

// legacyRecordKey is the Message-ID the record move of adoptLegacyRecord
// runs under: no job ever has it (its domain is reserved), so the move
// writes the mailbox record alone.
const legacyRecordKey = "<mailbox-record-move@gmailrelay.invalid>"

// adoptLegacyRecord carries the default mailbox's record over from the
// name jobs carried before mailboxes had names (its Gmail userId, "me" by
// default): a log whose mailbox Gmail was found to rewrite stays
// untrusted, and its last confirmed send stays a witness, after the
// upgrade. It does nothing once the default mailbox has a record of its
// own.
func (s *Service) adoptLegacyRecord(ctx context.Context, m *Mailbox) error {
	cur, err := s.log.Mailbox(ctx, m.name)
	if err != nil {
		return err
	}
	if cur != (gmailrelay.Mailbox{Name: m.name}) {
		return nil
	}
	for _, old := range []string{m.userID, "me"} {
		if old == m.name || old == "" {
			continue
		}
		rec, err := s.log.Mailbox(ctx, old)
		if err != nil {
			return err
		}
		if rec == (gmailrelay.Mailbox{Name: old}) {
			continue
		}
		rec.Name = m.name
		_, _, err = s.log.Mutate(ctx, legacyRecordKey, func(*gmailrelay.Job) (gmailrelay.Change, error) {
			return gmailrelay.Change{Mailbox: &rec}, nil
		})
		return err
	}
	return nil
}
