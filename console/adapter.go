package console

import (
	"context"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Backend is what Adapt turns into a Relay: the parts of a relay process
// the console reads and acts on, set by whoever builds the process.
type Backend struct {
	// Log is the acceptance log the pages read.
	Log gmailrelay.Store
	// Policy names the channels.
	Policy *policy.Policy
	// Faults holds the runtime fault rules; nil: fault injection is off.
	Faults *faultmodes.Set
	// SendPath resolves jobs and gives the mailboxes (relay.Service).
	SendPath SendPath
	// Now is the relay's clock; nil means time.Now.
	Now func() time.Time
	// Mode is "sandbox" or "gmail".
	Mode string
}

// SendPath is the part of the relay's send path the console calls
// (relay.Service).
type SendPath interface {
	// Resolve applies a human decision to a job.
	Resolve(ctx context.Context, r relay.ResolveRequest) (relay.Result, error)
	// Mailboxes returns the relay's mailboxes, the default one first.
	Mailboxes() []*relay.Mailbox
}

// Adapt adapts b to Relay. Each mailbox reports its own quota.
// This file is the only place that knows the relay's own signatures.
func Adapt(b Backend) Relay {
	if b.Now == nil {
		b.Now = time.Now
	}
	return &service{b: b}
}

type service struct {
	b Backend
}

func (s *service) Now() time.Time { return s.b.Now() }
func (s *service) Mode() string   { return s.b.Mode }

func (s *service) Stats(ctx context.Context) (gmailrelay.Stats, error) {
	return s.b.Log.Stats(ctx)
}

func (s *service) List(ctx context.Context, o gmailrelay.ListOptions) ([]gmailrelay.Job, string, error) {
	return s.b.Log.List(ctx, o)
}

func (s *service) Job(ctx context.Context, id string) (gmailrelay.Job, []gmailrelay.Line, error) {
	j, err := s.b.Log.Get(ctx, id)
	if err != nil {
		return gmailrelay.Job{}, nil, err
	}
	lines, err := s.b.Log.JobLines(ctx, id)
	return j, lines, err
}

func (s *service) Raw(ctx context.Context, id string) ([]byte, error) {
	return s.b.Log.Raw(ctx, id)
}

func (s *service) Lines(ctx context.Context, after uint64, limit int) ([]gmailrelay.Line, uint64, error) {
	return s.b.Log.Lines(ctx, after, limit)
}

func (s *service) Resolve(ctx context.Context, id, action, note, actor string, seen int) (gmailrelay.Job, error) {
	res, err := s.b.SendPath.Resolve(ctx, relay.ResolveRequest{ID: id, Action: action, Note: note, Actor: actor, Seen: seen})
	return res.Job, err
}

func (s *service) Mailboxes(ctx context.Context) ([]Mailbox, error) {
	var out []Mailbox
	for _, m := range s.b.SendPath.Mailboxes() {
		mb, err := s.b.Log.Mailbox(ctx, m.Name())
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

func (s *service) Channels() []string { return s.b.Policy.Names() }

func (s *service) Faults() Faults {
	if f := s.b.Faults; f != nil {
		return f
	}
	return nil // not a typed nil: callers compare with nil
}
