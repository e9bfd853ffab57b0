package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/retention"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// sweepAnswer is the body of POST /admin/sweep: the sweep's counts, and the
// retention pass's when retention is on.
type sweepAnswer struct {
	SweepCounts
	Retention *retention.Result `json:"retention,omitempty"`
}

// SweepCounts is what sweeper passes did, as POST /admin/sweep (one pass)
// and GET /v1/stats (every pass since start) answer it; docs/api.md
// defines the fields.
type SweepCounts struct {
	Due         int           `json:"due"`
	Checked     int           `json:"checked"`
	Found       int           `json:"found"`
	Duplicates  int           `json:"duplicates"`
	Missed      int           `json:"missed"`
	Resent      int           `json:"resent"`
	Retried     int           `json:"retried"`
	Reviewed    int           `json:"reviewed"`
	Deferred    int           `json:"deferred"`
	Verified    int           `json:"verified"`
	Unwitnessed int           `json:"unwitnessed"`
	Errors      int           `json:"errors"`
	Wait        time.Duration `json:"wait"`
}

// sweepCounts is r as the API answers it.
func sweepCounts(r sweeper.Result) SweepCounts {
	return SweepCounts{Due: r.Due, Checked: r.Checked, Found: r.Found, Duplicates: r.Duplicates, Missed: r.Missed,
		Resent: r.Resent, Retried: r.Retried, Reviewed: r.Reviewed, Deferred: r.Deferred, Verified: r.Verified,
		Unwitnessed: r.Unwitnessed, Errors: r.Errors, Wait: r.Wait}
}

// backup serves GET /admin/backup: a consistent copy of the bbolt log from
// one read transaction, streamed while the relay goes on serving. The
// Content-Length is the copy's exact size, so a client can tell a cut
// stream from a whole one.
func (s *Server) backup(w http.ResponseWriter, r *http.Request) {
	// The copy may take longer than the server's write timeout, which is
	// sized for sends.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	name := "gmailrelay-" + s.cfg.Now().UTC().Format("20060102T150405Z") + ".db"
	started := false
	n, err := s.cfg.Log.Backup(r.Context(), w, func(size int64) {
		started = true
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.FormatInt(size, 10))
		h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
	})
	logger := zerolog.Ctx(r.Context())
	switch {
	case errors.Is(err, gmailrelay.ErrUnsupported) && !started:
		// The log is in PostgreSQL: its backups are pg_dump's.
		writeJSON(w, http.StatusNotImplemented, errorBody{Error: errorDetail{Code: "unsupported", Message: err.Error()}})
	case err != nil && !started:
		writeError(w, r, err)
	case err != nil:
		// The status is gone; the short body tells the client.
		logger.Error().Err(err).Int64("bytes", n).Msg("backup cut short")
	default:
		logger.Info().Int64("bytes", n).Msg("backup served")
	}
}
