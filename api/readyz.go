package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// probe is one Gmail readiness check (a mailbox's, or the provider's with
// one mailbox) and its cached answer.
type probe struct {
	name string // the mailbox; "" for Config.Probe
	fn   func(ctx context.Context) error

	mu      sync.Mutex
	running bool // a check is running; guarded by mu
	at      time.Time
	err     error
}

// newProbes orders the probes: Config.Probe alone, or one per mailbox of
// Config.Probes, the default mailbox first, then by name.
func newProbes(one func(context.Context) error, each map[string]func(context.Context) error) []*probe {
	var out []*probe
	if one != nil {
		out = append(out, &probe{fn: one})
	}
	for name, fn := range each {
		out = append(out, &probe{name: name, fn: fn})
	}
	slices.SortFunc(out, func(a, b *probe) int {
		switch {
		case a.name == b.name:
			return 0
		case a.name == policy.DefaultMailbox:
			return -1
		case b.name == policy.DefaultMailbox:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

// check runs the probe at most every 15 seconds. It runs on its own
// context (5 s), not the caller's, and without holding mu, so a caller that
// goes away neither cancels it nor has its context.Canceled cached as the
// provider's health, and concurrent readiness checks never queue behind a
// slow probe: while one runs, the others get the last result.
func (p *probe) check(ctx context.Context) error {
	p.mu.Lock()
	fresh := !p.at.IsZero() && time.Since(p.at) < 15*time.Second
	if fresh || p.running {
		err := p.err
		p.mu.Unlock()
		return err
	}
	p.running = true
	p.mu.Unlock()

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	err := p.fn(pctx)
	cancel()

	p.mu.Lock()
	defer p.mu.Unlock()
	p.running = false
	p.err, p.at = err, time.Now()
	return err
}

// readyz answers whether the relay can serve: its log answers and takes
// writes ("writes refused: …" while it does not), Gmail
// does, and on a shared log its clock agrees with the other replicas' (see
// clockReady). With several mailboxes, "mailboxes" says which are ready
// (each with the reason it is not); the relay is ready while the log is
// open and at least one mailbox is, since one broken credential stops
// only its mailbox's sends.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"mode": s.cfg.Mode}
	if s.cfg.Mode == "sandbox" {
		body["warning"] = "SANDBOX: sends go to the embedded Gmail emulator, not to Gmail"
	}
	if sb := s.sandbox(); sb != nil {
		body["sandbox"] = sb
	}
	ok := true
	if err := gmailrelay.WritesRefused(s.cfg.Log); err != nil {
		// Sends answer 503 until the relay's LogWatch finds the log
		// taking writes again.
		ok = false
		body["log"] = "writes refused: " + err.Error()
	} else if _, err := s.cfg.Log.Stats(r.Context()); err != nil {
		ok = false
		body["log"] = err.Error()
	} else {
		body["log"] = "open"
	}
	if !s.clockReady(r.Context(), body) {
		ok = false
	}
	var failed []string
	boxes := map[string]string{}
	for _, p := range s.probes {
		err := p.check(r.Context())
		state := "ready"
		if err != nil {
			state = "not ready: " + err.Error()
			if p.name == "" {
				failed = append(failed, err.Error())
			} else {
				failed = append(failed, "mailbox "+p.name+": "+err.Error())
			}
		}
		if p.name != "" {
			boxes[p.name] = state
		}
	}
	switch {
	case len(failed) == 0:
		body["provider"] = "reachable"
	default:
		body["provider"] = strings.Join(failed, "; ")
		if len(failed) == len(s.probes) {
			ok = false
		}
	}
	if len(boxes) > 0 {
		body["mailboxes"] = boxes
	}
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	body["ready"] = ok
	writeJSON(w, status, body)
}

// clockReady says in body["clock"] how far the replica's clock is from
// the other replicas' (the clock fence, relay.Service.RecentClock: a
// measurement younger than 10 s, or one shared with the concurrent
// callers, never one per call; it waits at most 5 s for one in progress,
// then takes the last status). It returns false when the fence is
// closed: the replica refuses sends until its clock is fixed. Without a
// fence (a log of its own, a manual clock) it adds nothing.
func (s *Server) clockReady(ctx context.Context, body map[string]any) bool {
	if s.svc == nil {
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second) // then the last status
	defer cancel()
	st := s.svc.RecentClock(wctx)
	if st.On {
		body["clock"] = st.String()
	}
	return !st.Fenced
}
