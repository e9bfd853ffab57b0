package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog/hlog"

	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/retention"
)

// resolve answers POST /v1/jobs/{id}/resolve (admin): an operator's
// mark-sent, retry or abandon of a job.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	id, err := s.idParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var body struct {
		Action string `json:"action"`
		Note   string `json:"note"`
		Actor  string `json:"actor"`
		// ExpectAttempts, when given, is the job's attempts as the
		// caller saw them: a job that has made another attempt since
		// is 409, so a stale decision never resends.
		ExpectAttempts *int `json:"expect_attempts"`
	}
	if err := decodeStrict(r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	actor := body.Actor
	if actor == "" {
		actor = "admin"
	}
	seen := relay.AnyAttempts
	if body.ExpectAttempts != nil {
		if *body.ExpectAttempts < 0 {
			writeError(w, r, relay.Invalid("expect_attempts", "expect_attempts must be a count of attempts (0 or more), not %d", *body.ExpectAttempts))
			return
		}
		seen = *body.ExpectAttempts
	}
	res, err := s.svc.Resolve(r.Context(), relay.ResolveRequest{ID: id, Action: body.Action, Note: body.Note, Actor: actor, Seen: seen})
	if err != nil {
		writeErrorFor(w, r, err, id, res.Job.State)
		return
	}
	lines, _ := s.cfg.Log.JobLines(r.Context(), id)
	res.Job.Mailbox = s.viewMailbox(res.Job)
	writeJSON(w, http.StatusOK, jobView{Job: res.Job, URL: jobURL(id), Lines: lines})
}

func decodeStrict(r *http.Request, v any) error {
	body, err := readBody(r, 1<<20)
	if err != nil {
		return err
	}
	if err := CheckJSON(body); err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field := ""
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(f, `"`)
			return relay.Invalid(field, "unknown field %q", field)
		}
		return jsonError(body, err)
	}
	return nil
}

func (s *Server) faultSet() (*faultmodes.Set, error) {
	if f := s.cfg.Faults; f != nil {
		return f, nil
	}
	return nil, relay.Errorf(relay.CodeUnavailable, "fault modes are disabled on this relay")
}

func (s *Server) listFaults(w http.ResponseWriter, r *http.Request) {
	f, err := s.faultSet()
	if err != nil {
		writeError(w, r, err)
		return
	}
	rules := f.List()
	if rules == nil {
		rules = []faultmodes.Rule{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"rules": rules, "seed": f.Seed(), "injected": f.Injected()})
}

func (s *Server) addFault(w http.ResponseWriter, r *http.Request) {
	f, err := s.faultSet()
	if err != nil {
		writeError(w, r, err)
		return
	}
	body, err := readBody(r, 1<<20)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := CheckJSON(body); err != nil {
		writeError(w, r, err)
		return
	}
	spec, err := faultmodes.ParseSpec(body)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if spec.Channel != "" {
		if _, err := s.cfg.Policy.Channel(spec.Channel); err != nil {
			writeError(w, r, relay.Invalid("channel", "%v", err))
			return
		}
	}
	rule, err := f.Add(spec)
	if err != nil {
		writeError(w, r, err)
		return
	}
	hlog.FromRequest(r).Warn().Str("rule", rule.ID).Str("mode", string(rule.Mode)).Msg("fault rule added")
	writeJSON(w, http.StatusCreated, rule)
}

func (s *Server) deleteFault(w http.ResponseWriter, r *http.Request) {
	f, err := s.faultSet()
	if err != nil {
		writeError(w, r, err)
		return
	}
	id, err := pathParam(r, "id")
	if err != nil {
		writeError(w, r, relay.Invalid("id", "bad path escape in fault rule id"))
		return
	}
	if !f.Remove(id) {
		writeError(w, r, relay.Errorf(relay.CodeNotFound, "no fault rule %q", id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) clearFaults(w http.ResponseWriter, r *http.Request) {
	f, err := s.faultSet()
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"removed": f.Clear()})
}

func (s *Server) sweep(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Sweeper == nil {
		writeError(w, r, relay.Errorf(relay.CodeUnavailable, "the sweeper is not running"))
		return
	}
	res, err := s.cfg.Sweeper.RunOnce(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := sweepAnswer{SweepCounts: sweepCounts(res), Retention: &retention.Result{}} // zero counts without a retention policy
	if s.cfg.Retention != nil && s.cfg.Retention.Enabled() {
		rr, err := s.cfg.Retention.RunOnce(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		out.Retention = &rr
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) advanceClock(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Advance string `json:"advance"`
	}
	if err := decodeStrict(r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	d, err := time.ParseDuration(body.Advance)
	if err != nil || d < 0 {
		writeError(w, r, relay.Invalid("advance", "advance must be a non-negative Go duration like 5m"))
		return
	}
	s.cfg.AdvanceClock(d)
	writeJSON(w, http.StatusOK, map[string]any{"now": s.cfg.Now()})
}
