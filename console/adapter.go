package console

import (
	"context"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// FromService adapts the relay's send path to Relay. mode is "sandbox" or
// "gmail". Each mailbox reports its own quota.
// This file is the only place that knows the relay's own signatures.
func FromService(svc *relay.Service, mode string) Relay {
	return &service{svc: svc, mode: mode}
}

type service struct {
	svc  *relay.Service
	mode string
}

func (s *service) Now() time.Time { return s.svc.Now() }
func (s *service) Mode() string   { return s.mode }

func (s *service) Stats(ctx context.Context) (gmailrelay.Stats, error) {
	return s.svc.Log().Stats(ctx)
}

func (s *service) List(ctx context.Context, o gmailrelay.ListOptions) ([]gmailrelay.Job, string, error) {
	return s.svc.Log().List(ctx, o)
}

func (s *service) Job(ctx context.Context, id string) (gmailrelay.Job, []gmailrelay.Line, error) {
	j, err := s.svc.Log().Get(ctx, id)
	if err != nil {
		return gmailrelay.Job{}, nil, err
	}
	lines, err := s.svc.Log().JobLines(ctx, id)
	return j, lines, err
}

func (s *service) Raw(ctx context.Context, id string) ([]byte, error) {
	return s.svc.Log().Raw(ctx, id)
}

func (s *service) Lines(ctx context.Context, after uint64, limit int) ([]gmailrelay.Line, uint64, error) {
	return s.svc.Log().Lines(ctx, after, limit)
}

func (s *service) Resolve(ctx context.Context, id, action, note, actor string, seen int) (gmailrelay.Job, error) {
	res, err := s.svc.Resolve(ctx, id, action, note, actor, seen)
	return res.Job, err
}

func (s *service) Mailboxes(ctx context.Context) ([]Mailbox, error) {
	var out []Mailbox
	for _, m := range s.svc.Mailboxes() {
		mb, err := s.svc.Log().Mailbox(ctx, m.Name())
		if err != nil {
			return nil, err
		}
		var addr string
		if a := m.Addresses(); len(a) > 0 {
			addr = a[0]
		}
		out = append(out, Mailbox{Name: m.Name(), Address: addr, HandleChecked: mb.HandleChecked, HandleUntrusted: mb.HandleUntrusted,
			Rewrites: mb.Rewrites, QuotaPerMinute: m.Quota().PerMinute(), QuotaSpent: m.Quota().Spent()})
	}
	return out, nil
}

func (s *service) Channels() []string { return s.svc.Policy().Names() }

func (s *service) Faults() Faults {
	if f := s.svc.Faults(); f != nil {
		return f
	}
	return nil // not a typed nil: callers compare with nil
}
