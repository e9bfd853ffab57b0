package console

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"net/mail"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if s := c.sessions.get(cookieValue(r, sessionCookie)); s != nil {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	c.showLogin(w, r, http.StatusOK, "")
}

// showLogin renders the sign-in form with a fresh double-submit token: the
// same random value in a cookie scoped to /ui/login and in the form.
func (c *Console) showLogin(w http.ResponseWriter, r *http.Request, status int, problem string) {
	tok := randomToken()
	setCookie(w, r, loginCookie, tok, "/ui/login", 3600)
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, nil, status, "login", map[string]any{"CSRF": tok, "Open": c.tokens.open(), "Problem": problem})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	addr := clientAddr(r)
	if wait := c.throttle.blocked(addr); wait > 0 {
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.logger.Warn().Str("remote", r.RemoteAddr).Int("retry_after", secs).Msg("console sign-in throttled: too many wrong tokens")
		c.showLogin(w, r, http.StatusTooManyRequests, "Too many wrong sign-ins from your address: try again in "+
			(time.Duration(secs)*time.Second).String()+". Nothing was checked.")
		return
	}
	if err := parseForm(w, r); err != nil {
		c.fail(w, r, nil, err)
		return
	}
	if !sameToken(r.PostForm.Get(csrfField), cookieValue(r, loginCookie)) {
		c.fail(w, r, nil, errForbidden("The sign-in form's security token is missing or wrong. Open the sign-in page again."))
		return
	}
	ro := c.tokens.roleOf(r.PostForm.Get("token"))
	if ro == roleNone {
		c.throttle.failed(addr)
		c.logger.Warn().Str("remote", r.RemoteAddr).Msg("console sign-in refused: wrong token")
		c.showLogin(w, r, http.StatusUnauthorized, "That token is neither the relay's API token nor its admin token.")
		return
	}
	c.throttle.succeeded(addr)
	id, _ := c.sessions.create(ro)
	setCookie(w, r, loginCookie, "", "/ui/login", -1)
	setCookie(w, r, sessionCookie, id, "/ui/", int(c.sessions.ttl/time.Second))
	c.logger.Info().Str("role", ro.String()).Str("remote", r.RemoteAddr).Msg("console sign-in")
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) error {
	c.sessions.end(cookieValue(r, sessionCookie))
	setCookie(w, r, sessionCookie, "", "/ui/", -1)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
	return nil
}

// stateCount is one state's count on the overview.
type stateCount struct {
	State gmailrelay.State
	Count int
}

// displayStates are the states the overview counts: the log's own, plus
// queued (the outbox's state) when the log does not list it yet.
func displayStates() []gmailrelay.State {
	states := slices.Clone(gmailrelay.States)
	if !slices.Contains(states, "queued") {
		states = append(states, "queued")
	}
	return states
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	st, err := c.relay.Stats(ctx)
	if err != nil {
		return err
	}
	now := c.relay.Now()
	states := displayStates()
	var counts []stateCount
	for _, state := range states {
		counts = append(counts, stateCount{state, st.ByState[state]})
	}
	type chanRow struct {
		Name   string
		Counts []int
	}
	var chans []chanRow
	for _, name := range sortedKeys(st.ByChannel) {
		row := chanRow{Name: name}
		for _, state := range states {
			row.Counts = append(row.Counts, st.ByChannel[name][state])
		}
		chans = append(chans, row)
	}
	mbs, err := c.relay.Mailboxes(ctx)
	if err != nil {
		return err
	}
	ch, err := c.chart.build(ctx, c.relay, now, st.Lines)
	if err != nil {
		return err
	}
	oldest := ""
	if !st.OldestUnknown.IsZero() {
		oldest = ago(now.Sub(st.OldestUnknown))
	}
	c.render(w, r, s, http.StatusOK, "overview", map[string]any{
		"Counts": counts, "States": states, "Channels": chans, "ChannelCols": len(states) + 1, "Jobs": st.Jobs, "Lines": st.Lines,
		"Queued": st.ByState["queued"], "Review": st.ByState[gmailrelay.StateReview],
		"OldestUnknown": oldest, "OldestUnknownAt": st.OldestUnknown,
		"Mailboxes": mbs, "Chart": ch, "Now": now,
	})
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// reviewPageSize is how many jobs a review or jobs page shows.
const reviewPageSize = 50

// reviewRow is one job of the review queue with its evidence.
type reviewRow struct {
	Job gmailrelay.Job
	// Msg is the stored message's recipients and subject; Stored is
	// false (and Msg empty) when retention dropped the message.
	Msg      relay.Summary
	Stored   bool
	Reason   string // the review line's reason, as written
	Why      string // the same in words
	Note     string
	Search   *gmailrelay.Line // the search that led here, if any
	Searches int
	Age      string // since the job was accepted
	InReview string // since it entered review
	since    time.Time
}

func (c *Console) review(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	after := r.URL.Query().Get("after")
	jobs, next, err := c.relay.List(ctx, gmailrelay.ListOptions{State: gmailrelay.StateReview, After: after, Limit: reviewPageSize})
	if err != nil {
		return err
	}
	now := c.relay.Now()
	rows := make([]reviewRow, 0, len(jobs))
	for _, j := range jobs {
		_, lines, err := c.relay.Job(ctx, j.MessageID)
		if errors.Is(err, gmailrelay.ErrNotFound) {
			continue // resolved meanwhile
		}
		if err != nil {
			return err
		}
		row := reviewRowOf(j, lines, now)
		if row.Msg, row.Stored, err = c.summary(ctx, j.MessageID); err != nil {
			return err
		}
		rows = append(rows, row)
	}
	// Oldest in review first within the page (pages follow the state index).
	slices.SortStableFunc(rows, func(a, b reviewRow) int { return a.since.Compare(b.since) })
	st, err := c.relay.Stats(ctx)
	if err != nil {
		return err
	}
	c.render(w, r, s, http.StatusOK, "review", map[string]any{"Rows": rows, "Next": next, "After": after,
		"Total": st.ByState[gmailrelay.StateReview]})
	return nil
}

// summary is the recipients and subject of a job's stored message, and
// whether one is stored.
func (c *Console) summary(ctx context.Context, id string) (relay.Summary, bool, error) {
	raw, err := c.relay.Raw(ctx, id)
	switch {
	case err == nil:
		return relay.Summarize(raw), true, nil
	case errors.Is(err, gmailrelay.ErrNotFound):
		return relay.Summary{}, false, nil
	default:
		return relay.Summary{}, false, err
	}
}

func reviewRowOf(j gmailrelay.Job, lines []gmailrelay.Line, now time.Time) reviewRow {
	row := reviewRow{Job: j, Age: ago(now.Sub(j.CreatedAt)), since: j.UpdatedAt}
	for i := range lines {
		l := &lines[i]
		switch {
		case l.Kind == gmailrelay.KindSearch:
			row.Search = l
			row.Searches++
		case l.State == gmailrelay.StateReview:
			row.Reason, row.Note, row.since = string(l.Reason), l.Note, l.Time
			if l.Query != "" {
				row.Search = l
			}
		}
	}
	row.Why = reasonText(row.Reason)
	row.InReview = ago(now.Sub(row.since))
	return row
}

func (c *Console) jobs(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query()
	state := gmailrelay.State(q.Get("state"))
	if state != "" && !state.Valid() {
		if slices.Contains(displayStates(), state) { // queued before the log knows it
			c.render(w, r, s, http.StatusOK, "jobs", map[string]any{"State": state, "States": displayStates()})
			return nil
		}
		return errBadInput("Unknown state " + strconv.Quote(string(state)) + ".")
	}
	jobs, next, err := c.relay.List(r.Context(), gmailrelay.ListOptions{State: state, After: q.Get("after"), Limit: reviewPageSize})
	if err != nil {
		return err
	}
	c.render(w, r, s, http.StatusOK, "jobs", map[string]any{"State": state, "States": displayStates(), "Jobs": jobs, "Next": next, "Now": c.relay.Now()})
	return nil
}

// idParam reads the path's Message-ID, with or without angle brackets.
func idParam(r *http.Request) (string, error) {
	id, err := relay.NormalizeMessageID(r.PathValue("id"))
	if err != nil {
		return "", errBadInput("That is not a Message-ID: " + errText(err))
	}
	return id, nil
}

// message is what the job page shows of the stored message.
type message struct {
	Stored                  bool
	From, To, Subject, Date string
	// Recipients counts the addresses in To, Cc and Bcc.
	Recipients int
}

func (c *Console) job(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	j, lines, err := c.relay.Job(ctx, id)
	if err != nil {
		return err
	}
	var msg message
	if raw, err := c.relay.Raw(ctx, id); err == nil {
		msg = headersOf(raw)
		msg.Recipients = relay.Recipients(raw)
	} else if !errors.Is(err, gmailrelay.ErrNotFound) {
		return err
	}
	type lineView struct {
		Line    gmailrelay.Line
		Details []detail
	}
	views := make([]lineView, len(lines))
	var searches []gmailrelay.Line
	for i, l := range lines {
		views[i] = lineView{l, lineDetails(l)}
		if l.Kind == gmailrelay.KindSearch {
			searches = append(searches, l)
		}
	}
	now := c.relay.Now()
	resolvable := j.State == gmailrelay.StateReview || j.State == gmailrelay.StateUnknown || j.State == gmailrelay.StateFailed
	data := map[string]any{"Job": j, "Lines": views, "Searches": searches,
		"Msg": msg, "Review": reviewRowOf(j, lines, now), "Resolvable": resolvable,
		"Done": doneText(r.URL.Query().Get("done")), "Age": ago(now.Sub(j.CreatedAt))}
	if by, after, ok := gmailrelay.Resolution(j, lines); ok {
		data["ResolvedBy"] = by
		if !j.AmbiguousAt.IsZero() {
			data["TruthAfter"] = ago(after)
		}
	}
	if j.State == gmailrelay.StateSent || j.Bounced > 0 || j.Delayed > 0 {
		d := gmailrelay.DeliveryOf(lines, msg.Recipients)
		data["Delivery"] = d
	}
	c.render(w, r, s, http.StatusOK, "job", data)
	return nil
}

// doneText is the banner after a decision; only known actions are shown.
func doneText(action string) string {
	switch action {
	case relay.ActionMarkSent:
		return "Marked sent. The resolved line (actor ui) is at the end of the timeline."
	case relay.ActionRetry:
		return "Retried: one new attempt with the same Message-ID was made; its outcome is in the timeline."
	case relay.ActionAbandon:
		return "Abandoned: the relay will not send this message."
	}
	return ""
}

// headersOf reads the headers a reviewer needs from a stored message.
func headersOf(raw []byte) message {
	m, err := mail.ReadMessage(strings.NewReader(string(raw)))
	if err != nil {
		return message{Stored: true, Subject: "(the stored message could not be parsed)"}
	}
	dec := new(mime.WordDecoder)
	text := func(name string) string {
		v := m.Header.Get(name)
		if d, err := dec.DecodeHeader(v); err == nil {
			return d
		}
		return v
	}
	return message{Stored: true, From: text("From"), To: text("To"), Subject: text("Subject"), Date: text("Date")}
}

// errText is the message of a *relay.Error (safe to show), else err's text.
func errText(err error) string {
	var re *relay.Error
	if errors.As(err, &re) {
		return re.Message
	}
	return err.Error()
}

// maxNote bounds a decision's note (in characters).
const maxNote = 2000

func (c *Console) resolve(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := idParam(r)
	if err != nil {
		return err
	}
	action := r.PostForm.Get("action")
	switch action {
	case relay.ActionMarkSent, relay.ActionRetry, relay.ActionAbandon:
	default:
		return errBadInput("Choose one of the three decisions: mark sent, retry or abandon.")
	}
	note := strings.TrimSpace(r.PostForm.Get("note"))
	switch {
	case note == "":
		return errBadInput("Write a note saying why: it is kept with the decision in the acceptance log. Nothing was changed.")
	case !utf8.ValidString(note) || utf8.RuneCountInString(note) > maxNote:
		return errBadInput("The note must be text of at most 2000 characters. Nothing was changed.")
	}
	seen := relay.AnyAttempts
	if v := r.PostForm.Get("expect_attempts"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errBadInput("The form is damaged (expect_attempts is not a count). Reload the job's page. Nothing was changed.")
		}
		seen = n
	}
	if _, err := c.relay.Resolve(r.Context(), id, action, note, Actor, seen); err != nil {
		return err
	}
	c.logger.Info().Str("message_id", id).Str("action", action).Str("actor", Actor).Msg("job resolved in the console")
	http.Redirect(w, r, "/ui/jobs/"+url.PathEscape(id)+"?done="+url.QueryEscape(action), http.StatusSeeOther)
	return nil
}
