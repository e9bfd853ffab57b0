package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/relay"
)

// listJobs answers GET /v1/jobs: the jobs of a state or channel, a page
// at a time in Message-ID order (after, limit; see acceptlog.Log.List).
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o := gmailrelay.ListOptions{State: gmailrelay.State(q.Get("state")), Channel: q.Get("channel"), After: q.Get("after")}
	if o.State != "" && !o.State.Valid() {
		writeError(w, r, relay.Invalid("state", "unknown state %q", o.State))
		return
	}
	limit, mailbox, err := s.pageParams(r, 0, "")
	if err != nil {
		writeError(w, r, err)
		return
	}
	o.Limit = limit
	keep, err := s.jobFilter(mailbox, q.Get("delivery"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	var jobs []gmailrelay.Job
	var next string
	if keep == nil {
		jobs, next, err = s.cfg.Log.List(r.Context(), o)
	} else {
		jobs, next, err = s.listKept(r.Context(), o, keep)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if jobs == nil {
		jobs = []gmailrelay.Job{}
	}
	items, err := s.listedJobs(r.Context(), jobs)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": items, "next": next})
}

// jobFilter is what ?mailbox= and ?delivery= keep of a listing (nil:
// every job). delivery is bounced (a report said some recipient failed)
// or delayed (some recipient delayed, none failed).
func (s *Server) jobFilter(mailbox, delivery string) (func(gmailrelay.Job) bool, error) {
	var byDelivery func(gmailrelay.Job) bool
	switch delivery {
	case "":
	case gmailrelay.DeliveryBounced:
		byDelivery = func(j gmailrelay.Job) bool { return j.Bounced > 0 }
	case gmailrelay.DeliveryDelayed:
		byDelivery = func(j gmailrelay.Job) bool { return j.Bounced == 0 && j.Delayed > 0 }
	default:
		return nil, relay.Invalid("delivery", "unknown delivery %q; want bounced or delayed", clipText(delivery))
	}
	switch {
	case mailbox == "" && byDelivery == nil:
		return nil, nil
	case mailbox == "":
		return byDelivery, nil
	}
	return func(j gmailrelay.Job) bool {
		return s.mailboxName(j) == mailbox && (byDelivery == nil || byDelivery(j))
	}, nil
}

// listedJobs is a listing's jobs with their etas and, so a reviewer knows
// each job without opening it, the To addresses and subject read from the
// stored message (empty when retention dropped it). One stored message is
// read at a time.
func (s *Server) listedJobs(ctx context.Context, jobs []gmailrelay.Job) ([]listedJob, error) {
	out := s.withETAs(ctx, jobs)
	for i := range out {
		raw, err := s.cfg.Log.Raw(ctx, out[i].MessageID)
		switch {
		case err == nil:
			out[i].Summary = relay.Summarize(raw)
		case errors.Is(err, gmailrelay.ErrNotFound):
			out[i].Summary = relay.Summary{To: []string{}}
		default:
			return nil, err
		}
	}
	return out, nil
}

var statesForMetrics = gmailrelay.States

// jobView is a job with its lines, oldest first.
type jobView struct {
	gmailrelay.Job
	URL   string            `json:"url"`
	Lines []gmailrelay.Line `json:"lines"`
	// ResolvedBy and TruthAfterS say how the outcome became known and how
	// long after the ambiguous attempt (gmailrelay.Resolution); absent
	// while it is not known.
	ResolvedBy  string   `json:"resolved_by,omitempty"`
	TruthAfterS *float64 `json:"truth_after_s,omitempty"`
	// Delivery is what delivery reports said of a sent job's recipients
	// (gmailrelay.DeliveryOf).
	Delivery *gmailrelay.Delivery `json:"delivery,omitempty"`
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	id, err := s.idParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	j, err := s.cfg.Log.Get(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	lines, err := s.cfg.Log.JobLines(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	j.Mailbox = s.viewMailbox(j)
	v := jobView{Job: j, URL: jobURL(id), Lines: lines}
	if by, after, ok := gmailrelay.Resolution(j, lines); ok {
		secs := after.Seconds()
		v.ResolvedBy, v.TruthAfterS = by, &secs
	}
	if j.State == gmailrelay.StateSent || j.Bounced > 0 || j.Delayed > 0 {
		// The recipients tell bounced from partly_bounced: counted from the
		// stored message only when some recipient failed.
		recipients := 0
		if j.Bounced > 0 {
			if raw, err := s.cfg.Log.Raw(r.Context(), id); err == nil {
				recipients = relay.Recipients(raw)
			}
		}
		d := gmailrelay.DeliveryOf(lines, recipients)
		v.Delivery = &d
	}
	writeJSON(w, http.StatusOK, v)
}

// readLog answers GET /v1/log: the lines after the after parameter, and
// next, the cursor to continue from (see logCursor), also in X-Next.
func (s *Server) readLog(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after uint64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, r, relay.Invalid("after", "after must be a sequence number"))
			return
		}
		after = n
	}
	limit, mailbox, err := s.pageParams(r, 100, " (the log pages at most 1000 lines; follow next)")
	if err != nil {
		writeError(w, r, err)
		return
	}
	var lines []gmailrelay.Line
	var next uint64
	if mailbox == "" {
		lines, _, err = s.cfg.Log.Lines(r.Context(), after, limit)
		next = logCursor(after, lines)
	} else {
		lines, next, err = s.mailboxLines(r.Context(), after, limit, mailbox)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("X-Next", strconv.FormatUint(next, 10))
		enc := json.NewEncoder(w)
		for _, l := range lines {
			_ = enc.Encode(l)
		}
		return
	}
	if lines == nil {
		lines = []gmailrelay.Line{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"lines": lines, "next": next})
}

// logCursor is where a reader of the log continues after reading lines
// after after: the Seq of the last line read, or after itself when there
// was none. Unlike the log's own next, which is 0 once no more lines
// follow, it never goes back, so a reader polling with it sees only new
// lines; a reader has caught up when it comes back equal to after.
func logCursor(after uint64, lines []gmailrelay.Line) uint64 {
	if len(lines) == 0 {
		return after
	}
	return lines[len(lines)-1].Seq
}

// Stats is the body of GET /v1/stats.
type Stats struct {
	gmailrelay.Stats
	EffectLines      int                     `json:"effect_lines"`
	DuplicatesFound  int                     `json:"duplicates_found"`
	HandleRewrites   int                     `json:"handle_rewrites"`
	ReviewDepth      int                     `json:"review_queue_depth"`
	OldestUnknownAge float64                 `json:"oldest_unknown_age_seconds"`
	FaultsInjected   map[faultmodes.Mode]int `json:"faults_injected"`
	QuotaUnitsSpent  int64                   `json:"quota_units_spent"`
	Sweeper          *SweepCounts            `json:"sweeper,omitempty"`
	// LogBytes is the size of the acceptance log file.
	LogBytes int64 `json:"log_bytes"`
	// Pruned sums the retention passes since start (absent when retention
	// is off).
	Pruned *gmailrelay.PruneResult `json:"pruned,omitempty"`
	// Outbox is the queue and the daily budgets, over the mailboxes.
	Outbox outbox.Snapshot `json:"outbox"`
	// Mailboxes holds each mailbox's figures by name (only the one
	// ?mailbox= names, when given).
	Mailboxes map[string]MailboxStats `json:"mailboxes"`
	// Sandbox is present in sandbox mode only.
	Sandbox *Sandbox `json:"sandbox,omitempty"`
}

// Sandbox is what /readyz and /v1/stats say about sandbox mode.
type Sandbox struct {
	// Emulator is the embedded Gmail emulator's base URL
	// (http://127.0.0.1:PORT): its Gmail API and its ground truth
	// (/_emulator/messages, /_emulator/stats).
	Emulator string `json:"emulator"`
}

// sandbox is the sandbox object of /readyz and /v1/stats, nil outside
// sandbox mode.
func (s *Server) sandbox() *Sandbox {
	if s.cfg.SandboxEmulator == "" {
		return nil
	}
	return &Sandbox{Emulator: s.cfg.SandboxEmulator}
}

// CollectStats gathers /v1/stats; /metrics reads the same numbers.
func (s *Server) CollectStats(ctx context.Context) (Stats, error) { return s.collectStats(ctx, "") }

// collectStats is CollectStats narrowed to mailbox when it is not "": the
// mailboxes map holds that mailbox only, and the outbox and
// quota_units_spent are its own. The log's counters (jobs, by_state, …)
// stay the relay's totals: the log counts them per relay, not per mailbox.
func (s *Server) collectStats(ctx context.Context, mailbox string) (Stats, error) {
	st, err := s.cfg.Log.Stats(ctx)
	if err != nil {
		return Stats{}, err
	}
	out := Stats{Stats: st, EffectLines: st.ByKind[gmailrelay.KindEffect],
		DuplicatesFound: st.ByReason[gmailrelay.KindReview][string(gmailrelay.ReasonDuplicate)] +
			st.ByReason[gmailrelay.KindReview][string(gmailrelay.ReasonDuplicateDelivery)],
		HandleRewrites: st.ByReason[gmailrelay.KindHandle][string(gmailrelay.ReasonHandleRewritten)],
		ReviewDepth:    st.ByState[gmailrelay.StateReview],
		FaultsInjected: map[faultmodes.Mode]int{},
		Sandbox:        s.sandbox(),
	}
	if !st.OldestUnknown.IsZero() {
		out.OldestUnknownAge = s.cfg.Now().Sub(st.OldestUnknown).Seconds()
	}
	if f := s.cfg.Faults; f != nil {
		out.FaultsInjected = f.Injected()
	}
	if s.cfg.Sweeper != nil {
		t := sweepCounts(s.cfg.Sweeper.Totals())
		out.Sweeper = &t
	}
	if s.cfg.Retention != nil && s.cfg.Retention.Enabled() {
		t := s.cfg.Retention.Totals()
		out.Pruned = &t
	}
	if out.LogBytes, err = s.cfg.Log.Size(ctx); err != nil {
		return Stats{}, err
	}
	if out.Outbox, _, err = outbox.Estimate(ctx, s.cfg.Log, s.svc, s.cfg.Now()); err != nil {
		return Stats{}, err
	}
	if out.Mailboxes, err = s.mailboxStats(ctx, out.Outbox, mailbox); err != nil {
		return Stats{}, err
	}
	switch {
	case mailbox != "":
		out.Outbox = narrow(out.Outbox, mailbox)
		out.QuotaUnitsSpent = out.Mailboxes[mailbox].QuotaUnitsSpent
	default: // the total over the mailboxes' own quotas
		for _, m := range out.Mailboxes {
			out.QuotaUnitsSpent += m.QuotaUnitsSpent
		}
	}
	return out, nil
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	mailbox, err := s.mailboxParam(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	st, err := s.collectStats(r.Context(), mailbox)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// limitParam reads the page size in q's limit parameter, 1 to 1000, or
// def when there is none; a bad one is 400 naming limit, its message
// ending with hint.
// pageParams reads the query parameters a listing takes: limit (see
// limitParam; def and hint are its) and mailbox (see mailboxParam).
func (s *Server) pageParams(r *http.Request, def int, hint string) (limit int, mailbox string, err error) {
	if limit, err = limitParam(r.URL.Query(), def, hint); err != nil {
		return 0, "", err
	}
	mailbox, err = s.mailboxParam(r)
	return limit, mailbox, err
}

func limitParam(q url.Values, def int, hint string) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, relay.Invalid("limit", "limit must be 1..1000%s", hint)
	}
	return n, nil
}
