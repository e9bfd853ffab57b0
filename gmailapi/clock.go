package gmailapi

import (
	"net/http"
	"sync"
	"time"
)

// Gmail dates what it stores on its own clock (internalDate, which its
// after:/before: operators search), while the relay's windows are built from
// its own. Every answer of Gmail's carries a Date header (RFC 9110, 6.6.1:
// an origin server with a clock must send one), to the second, which bounds
// how far Gmail's clock stands from the relay's: an answer dated D (Gmail's
// time, truncated to the second) to a request sent at local S and answered
// at local R was made at a local instant in [S, R], at a Gmail instant in
// [D, D+1s), so offset = Gmail − local lies in [D−R, D+1s−S]. Each answer
// narrows the interval; an answer outside it means a clock stepped, and
// the interval starts again from that answer.

// clockKeep is how long an interval stands without an answer that
// narrows or confirms it: a clock that drifts (or stepped by less than the
// interval's width) is measured again within it.
const clockKeep = 10 * time.Minute

// gmailClock is the interval Gmail's clock offset lies in.
type gmailClock struct {
	mu     sync.Mutex
	lo, hi time.Duration
	since  time.Time // local time of the answer the interval started from
	known  bool
}

// observe narrows the interval with an answer dated date, to a request
// sent at sent and answered at got (both local).
func (c *gmailClock) observe(date string, sent, got time.Time) {
	if date == "" {
		return
	}
	d, err := http.ParseTime(date)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	lo, hi := d.Sub(got), d.Add(time.Second).Sub(sent)
	if !c.known || lo > c.hi || hi < c.lo || got.Sub(c.since) > clockKeep {
		c.lo, c.hi, c.since, c.known = lo, hi, got, true
		return
	}
	c.lo, c.hi = max(c.lo, lo), min(c.hi, hi)
}

// offset returns the interval; ok is false before any dated answer.
func (c *gmailClock) offset() (lo, hi time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lo, c.hi, c.known
}

// ClockOffset implements relay.GmailClock: Gmail's clock reads the relay's
// plus an offset in [lo, hi], as the Date headers of its answers bound it;
// ok is false before the first answer.
func (g *Client) ClockOffset() (lo, hi time.Duration, ok bool) { return g.clock.offset() }

// datedTransport reads the Date header of every answer into the client's
// clock interval.
type datedTransport struct {
	base http.RoundTripper
	g    *Client
}

func (t *datedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := t.g.now()
	resp, err := t.base.RoundTrip(req)
	if err == nil {
		t.g.clock.observe(resp.Header.Get("Date"), sent, t.g.now())
	}
	return resp, err
}
