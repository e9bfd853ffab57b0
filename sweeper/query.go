package sweeper

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Reasons of the review lines written when a Message-ID cannot be searched.
const (
	ReasonUnsearchable  = gmailrelay.ReasonUnsearchable
	ReasonQueryRefused  = gmailrelay.ReasonQueryRefused
	maxProviderNoteText = 300
)

// searchQuery is the one builder of the sweeper's Gmail queries: the
// search for the given Message-IDs (in angle brackets), OR-ed.
//
// Each value is quoted, rfc822msgid:"left@right", so Gmail takes it as one
// literal. A quoted string cannot carry a double quote, and the rest of
// Gmail's syntax is no safer, so every id must first be of the strict shape
// (relay.CheckMessageIDShape: no quote, brace, parenthesis, bar, colon or
// blank inside). One id gives one term; several give Gmail's OR group
// {a b ...}. An id that is not of that shape, or no id at all, is an error
// and no query is built.
func searchQuery(ids []string) (string, error) {
	if len(ids) == 0 {
		return "", errors.New("search query: no Message-ID")
	}
	terms := make([]string, len(ids))
	for i, id := range ids {
		if err := relay.CheckMessageIDShape(id); err != nil {
			return "", fmt.Errorf("search query for %q: %w", id, err)
		}
		terms[i] = `rfc822msgid:"` + id[1:len(id)-1] + `"`
	}
	if len(terms) == 1 {
		return terms[0], nil
	}
	return "{" + strings.Join(terms, " ") + "}", nil
}

// jobsQuery builds the query for jobs' Message-IDs.
func jobsQuery(jobs []gmailrelay.Job) (string, error) {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.MessageID
	}
	return searchQuery(ids)
}

// searchable hands the jobs whose Message-ID cannot be searched safely to a
// human (a query carrying them could match what it should not; only a log
// written before intake refused such ids holds one) and returns the others
// and how many it handed over.
func (p *pass) searchable(ctx context.Context, jobs []gmailrelay.Job) ([]gmailrelay.Job, int, error) {
	out := jobs[:0:0]
	handled := 0
	for _, j := range jobs {
		_, err := searchQuery([]string{j.MessageID})
		if err == nil {
			out = append(out, j)
			continue
		}
		line := gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts,
			Reason: ReasonUnsearchable,
			Note:   "this Message-ID cannot be searched safely (" + errMessage(err) + "); nothing was searched, a human decides"}
		if _, err := p.apply(ctx, j, review(j, line)); err != nil {
			return nil, handled, err
		}
		handled++
	}
	return out, handled, nil
}

// queryRefused reports whether Gmail refused the query itself (400): the
// same query will never work, so waiting does not help.
func queryRefused(err error) bool {
	var perr *relay.ProviderError
	return errors.As(err, &perr) && perr.Status == http.StatusBadRequest
}

// refused deals with a batch whose query Gmail refused: it is split in two
// and each half searched on its own, so that one id Gmail cannot search
// never holds back the others; an id refused on its own goes to review with
// the query and Gmail's answer as evidence. It returns how many jobs it
// dealt with.
func (p *pass) refused(ctx context.Context, b *boxPass, jobs []gmailrelay.Job, q string, gerr error) (int, error) {
	if len(jobs) > 1 {
		half := len(jobs) / 2
		n, err := p.search(ctx, b, jobs[:half])
		if err != nil || b.halted() {
			return n, err
		}
		m, err := p.search(ctx, b, jobs[half:])
		return n + m, err
	}
	j := jobs[0]
	p.s.deps.Logger.Warn().Str("message_id", j.MessageID).Err(gerr).
		Msg("Gmail refused the search for this Message-ID; handed to a human")
	line := gmailrelay.Line{Kind: gmailrelay.KindReview, Attempt: j.Attempts,
		Reason: ReasonQueryRefused, Query: q,
		Note: "Gmail refused the search for this Message-ID: " + clipNote(gerr.Error()) + "; nothing is known about the send, a human decides"}
	if _, err := p.apply(ctx, j, review(j, line)); err != nil {
		return 0, err
	}
	return 1, nil
}

// errMessage is the message of a *relay.Error, or err's text.
func errMessage(err error) string {
	var re *relay.Error
	if errors.As(err, &re) {
		return re.Message
	}
	return err.Error()
}

// clipNote bounds provider text written into the log.
func clipNote(s string) string {
	if len(s) > maxProviderNoteText {
		return s[:maxProviderNoteText] + "…"
	}
	return s
}

// searchBatch searches one batch of jobs of a mailbox: the jobs whose
// Message-ID cannot be searched go to review first, the others are searched
// together (see search). It returns how many jobs it dealt with.
func (p *pass) searchBatch(ctx context.Context, b *boxPass, jobs []gmailrelay.Job) (int, error) {
	ok, handled, err := p.searchable(ctx, jobs)
	if err != nil || len(ok) == 0 {
		return handled, err
	}
	n, err := p.search(ctx, b, ok)
	return handled + n, err
}
