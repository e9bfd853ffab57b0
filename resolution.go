package gmailrelay

import (
	"slices"
	"time"
)

// How a job's outcome became known (Resolution).
const (
	ResolvedByResponse = "response" // Gmail's answer to the send
	ResolvedBySearch   = "search"   // a search of the mailbox found the copy
	ResolvedByHistory  = "history"  // the mailbox's history listed the copy
	ResolvedByHuman    = "human"    // an operator (or a caller's cancel)
)

// Resolution says how the outcome of job j (with its lines, oldest first)
// became known: by is one of the ResolvedBy values, after how long past
// its ambiguous attempt the truth was known (zero for a job never
// ambiguous). ok is false while the outcome is not known: a job queued,
// in flight, unknown or in review.
func Resolution(j Job, lines []Line) (by string, after time.Duration, ok bool) {
	switch j.State {
	case StateSent, StateFailed, StateAbandoned:
	default:
		return "", 0, false
	}
	for _, l := range slices.Backward(lines) {
		if l.State != j.State {
			continue
		}
		switch {
		case l.Kind == KindResolved:
			by = ResolvedByHuman
		case l.Kind == KindEffect && l.Source == SourceHistory:
			by = ResolvedByHistory
		case l.Kind == KindEffect && l.Source == SourceSearch, l.Kind == KindState && l.Reason == ReasonFound:
			by = ResolvedBySearch
		case l.Kind == KindEffect && l.Source == SourceHuman:
			by = ResolvedByHuman
		default:
			by = ResolvedByResponse
		}
		if !j.AmbiguousAt.IsZero() && l.Time.After(j.AmbiguousAt) {
			after = l.Time.Sub(j.AmbiguousAt)
		}
		return by, after, true
	}
	return "", 0, false
}
