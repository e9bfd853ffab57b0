package gmailfake

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// account is one mailbox: its messages, deliveries, quota bucket, daily
// sending window, index order and counters.
type account struct {
	addr        string
	msgs        []*stored // in storage order
	deliveries  []delivery
	sends       []time.Time // accepted sends in the rolling 24 h, oldest first
	lastVisible time.Time   // FIFO index: when the latest drawn message turns visible
	tokens      float64
	refilled    time.Time
	counters    counters
	sendAs      []Alias // its send-as aliases (not reset: settings, not mail)
	history     mailboxHistory
	pending     []pendingReport // reports not yet in INBOX, due in order
	lagged      int             // sends accepted past the daily limit since it was last under it
	noticeDue   bool            // a sending-limit notice is pending
}

// delivery is one accepted send: recipients got a message whose client
// Message-ID was clientKey and whose stored one is storedKey.
type delivery struct {
	clientKey   string
	storedKey   string
	bounced     []string // recipients it bounced for
	delayed     []string // recipients it was delayed for
	undelivered bool     // accepted past the daily limit, never delivered
}

// counters is what Stats reports, for one account.
type counters struct {
	calls        map[string]int
	units        int
	rateLimited  int
	dailyLimited int
	deliveries   int
	undelivered  int
	reports      int
}

func (c *counters) call(method string) {
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[method]++
}

func (c counters) stats() Stats {
	calls := make(map[string]int, len(c.calls))
	for k, v := range c.calls {
		calls[k] = v
	}
	return Stats{Calls: calls, QuotaUnits: c.units, RateLimited: c.rateLimited, DailyLimited: c.dailyLimited, Deliveries: c.deliveries,
		Undelivered: c.undelivered, Reports: c.reports}
}

func (st *Stats) add(o Stats) {
	for k, v := range o.Calls {
		st.Calls[k] += v
	}
	st.QuotaUnits += o.QuotaUnits
	st.RateLimited += o.RateLimited
	st.DailyLimited += o.DailyLimited
	st.Deliveries += o.Deliveries
	st.Undelivered += o.Undelivered
	st.Reports += o.Reports
}

func (a *account) resetLocked() {
	a.msgs = nil
	a.deliveries = nil
	a.sends = nil
	a.lastVisible = time.Time{}
	a.counters = counters{}
	a.pending = nil
	a.lagged = 0
	a.noticeDue = false
}

func (s *Server) setQuotaLocked(n int) {
	if n <= 0 {
		n = DefaultQuotaPerMinute
	}
	s.quota = n
	now := s.now()
	for _, a := range s.accounts {
		a.tokens = float64(n)
		a.refilled = now
	}
}

// takeQuotaLocked charges cost units to a's bucket if it holds them. The
// bucket holds at most one minute's budget and refills at quota/60 units per
// second of the injected clock. When it cannot pay, it returns how long
// until it can.
func (s *Server) takeQuotaLocked(a *account, cost int) (ok bool, wait time.Duration) {
	now := s.now()
	rate := float64(s.quota) / 60
	if el := now.Sub(a.refilled); el > 0 {
		a.tokens = math.Min(float64(s.quota), a.tokens+el.Seconds()*rate)
		a.refilled = now
	}
	if a.tokens >= float64(cost) {
		a.tokens -= float64(cost)
		return true, 0
	}
	secs := (float64(cost) - a.tokens) / rate
	return false, min(time.Duration(secs*float64(time.Second)), time.Minute)
}

// dailyWaitLocked prunes a's 24 h window and, when the daily limit is
// spent, returns how long until the oldest send in it leaves.
func (s *Server) dailyWaitLocked(a *account, now time.Time) (time.Duration, bool) {
	cut := now.Add(-24 * time.Hour)
	i := 0
	for i < len(a.sends) && !a.sends[i].After(cut) {
		i++
	}
	a.sends = a.sends[i:]
	if s.dailyLimit == 0 || len(a.sends) < s.dailyLimit {
		return 0, false
	}
	return a.sends[len(a.sends)-s.dailyLimit].Add(24 * time.Hour).Sub(now), true
}

// resolveAccount applies Gmail's authentication and userId rules: with
// tokens configured, the bearer token must be known and userId must be "me"
// or the token's own address; without, "me" is the primary account and any
// served address is accepted.
func (s *Server) resolveAccount(r *http.Request, userID string) (*account, *apiError) {
	var own *account
	if s.authOn {
		scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		a, ok := s.tokens[strings.TrimSpace(tok)]
		if !strings.EqualFold(scheme, "Bearer") || !ok {
			return nil, &apiError{code: http.StatusUnauthorized, reason: "authError", domain: "global",
				message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."}
		}
		own = a
	}
	if userID == "me" {
		if own != nil {
			return own, nil
		}
		return s.accounts[0], nil
	}
	if a, ok := s.byAddr[strings.ToLower(userID)]; ok && (own == nil || own == a) {
		return a, nil
	}
	if own == nil {
		own = s.accounts[0]
	}
	return nil, &apiError{code: http.StatusForbidden, reason: "forbidden", domain: "global",
		message: "Delegation denied for " + own.addr}
}

// retryTime is how Gmail writes the retry instant in a quota message.
func retryTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// rateLimited is Gmail's per-minute quota answer: the retry time in the
// message text (two spaces after the period, as Gmail writes it), and a
// Retry-After header only when header is set.
func rateLimited(status int, now time.Time, wait time.Duration, header bool) *apiError {
	e := &apiError{code: http.StatusTooManyRequests, reason: "rateLimitExceeded", domain: "usageLimits",
		message: "User-rate limit exceeded.  Retry after " + retryTime(now.Add(wait))}
	if status == http.StatusForbidden {
		e.code, e.reason = http.StatusForbidden, "userRateLimitExceeded"
	}
	if header {
		e.retryAfter = max(int(math.Ceil(wait.Seconds())), 1)
	}
	return e
}

// dailyLimited is the answer to a send past the daily sending limit.
func dailyLimited(now time.Time, wait time.Duration, header bool) *apiError {
	e := &apiError{code: http.StatusTooManyRequests, reason: "rateLimitExceeded", domain: "usageLimits",
		message: "Daily user sending limit exceeded. Retry after " + retryTime(now.Add(wait))}
	if header {
		e.retryAfter = max(int(math.Ceil(wait.Seconds())), 1)
	}
	return e
}
