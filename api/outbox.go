package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/relay"
)

// HeaderWhenBusy chooses, on either send path, what a send does when the
// budget is spent: "queue" (202 queued) or "reject" (429). /v1/send queues
// by default (its body's when_busy wins); the Gmail-compatible path
// rejects unless the header says queue.
const HeaderWhenBusy = "X-Relay-When-Busy"

func whenBusyHeader(r *http.Request, def bool) (bool, error) {
	switch v := r.Header.Get(HeaderWhenBusy); v {
	case "":
		return def, nil
	case relay.WhenBusyQueue:
		return true, nil
	case relay.WhenBusyReject:
		return false, nil
	default:
		return false, relay.Invalid(HeaderWhenBusy, "%s must be queue or reject, not %q", HeaderWhenBusy, v)
	}
}

// eta is a queued job's estimated delivery time (nil when unknown).
func (s *Server) eta(ctx context.Context, id string) *time.Time {
	_, etas, err := outbox.Estimate(ctx, s.svc)
	if err != nil {
		return nil
	}
	if t, ok := etas[id]; ok {
		return &t
	}
	return nil
}

// listedJob is a job of GET /v1/jobs: its eta when queued, and the
// stored message's recipients and subject (see listedJobs).
type listedJob struct {
	gmailrelay.Job
	ETA *time.Time `json:"eta,omitempty"`
	relay.Summary
}

// withETAs adds the eta of every queued job of a listing.
func (s *Server) withETAs(ctx context.Context, jobs []gmailrelay.Job) []listedJob {
	out := make([]listedJob, len(jobs))
	var etas map[string]time.Time
	for i, j := range jobs {
		out[i].Job = j
		out[i].Mailbox = s.viewMailbox(j)
		if j.State != gmailrelay.StateQueued {
			continue
		}
		if etas == nil {
			if _, e, err := outbox.Estimate(ctx, s.svc); err == nil {
				etas = e
			}
		}
		if t, ok := etas[j.MessageID]; ok {
			out[i].ETA = &t
		}
	}
	return out
}

// cancelJob is DELETE /v1/jobs/{id}: a queued job becomes abandoned with
// a resolved line (actor, reason cancelled); any other state is 409.
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	id, err := s.idParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	res, err := s.svc.Cancel(r.Context(), id, s.actor(r))
	if err != nil {
		writeError(w, r, err)
		return
	}
	j := res.Job
	writeJSON(w, http.StatusOK, sendAnswer{MessageID: j.MessageID, State: string(j.State), Mailbox: s.viewMailbox(j), Attempts: j.Attempts,
		Channel: j.Channel, URL: jobURL(j.MessageID)})
}

// actor names who cancelled: the token's role ("api" or "admin"), then
// ":" and the actor query parameter when one is given (at most 200 bytes),
// so the line always says which token did it and a caller's own name can
// never pass for the console's or an operator's.
func (s *Server) actor(r *http.Request) string {
	who := "api"
	if roleOfRequest(r) == roleAdmin {
		who = "admin"
	}
	if a := r.URL.Query().Get("actor"); a != "" && len(a) <= 200 {
		return who + ":" + a
	}
	return who
}

// outboxPass is POST /admin/outbox: one delivery pass now, its counts in
// the answer (tests and operators; the loop runs on its own).
func (s *Server) outboxPass(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Outbox == nil {
		writeError(w, r, relay.Errorf(relay.CodeUnavailable, "the outbox is not running"))
		return
	}
	res, err := s.cfg.Outbox.RunOnce(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
