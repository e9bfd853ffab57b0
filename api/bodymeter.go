package api

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gmailrelay/gmailrelay/relay"
)

// The body meter: what a request body costs while it is read. The in-flight
// budget (--max-inflight-bytes) is charged for the bytes a body has actually
// delivered, as it delivers them, never for the Content-Length it declares:
// a client that declares 16 MiB and sends nothing holds nothing. A body must
// also keep pace: after its first MinBodyGrace it must have delivered
// MinBodyRate bytes for every second past the grace, or its read is cut and
// the request answered 408 (so a slow sender cannot hold a connection, or
// its share of the budget, for the server's whole read timeout).
//
// When a body's bytes no longer fit, the oldest body still being read goes
// on and the younger ones give way: a younger body is answered 503 +
// Retry-After, and when the oldest is the one that does not fit, the
// youngest bodies still being read are cut (503) to make room for it; the
// younger bodies together may hold at most a quarter of the budget, so the
// oldest keeps room to finish and bodies that are likely to be cut hold
// little. So bodies that arrive together finish one after another instead
// of each being cut part-way, and memory follows the budget.

// DefaultMinBodyRate is Config.MinBodyRate when it is zero: 16 KiB/s.
const DefaultMinBodyRate = 16 << 10

// DefaultMinBodyGrace is Config.MinBodyGrace when it is zero.
const DefaultMinBodyGrace = 10 * time.Second

// codeBodyTimeout answers 408: a request body slower than --min-body-rate.
const codeBodyTimeout relay.Code = "request_timeout"

// errInflightFull is the answer to a body that does not fit the relay's
// in-flight budget.
var errInflightFull = &relay.Error{Code: relay.CodeUnavailable, RetryAfter: 2,
	Message: "the relay is handling as many request bytes as it allows (--max-inflight-bytes); nothing was sent, retry shortly"}

// inflight is the budget of request bytes received and not yet let go
// (their handlers have not returned). It never waits: a body that does not
// fit is refused.
type inflight struct {
	mu   sync.Mutex
	max  int64
	used int64
	// reading are the bodies still being read, oldest admitted first.
	reading []*meteredBody
}

// fits reports whether n more bytes (at most the whole budget, so a request
// larger than the budget runs alone) fit now, taking nothing.
func (b *inflight) fits(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used+min(n, b.max) <= b.max
}

func (b *inflight) admit(m *meteredBody) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reading = append(b.reading, m)
}

// charge takes n more bytes for m (m holds at most the whole budget). When
// they do not fit and m is the oldest body being read, the youngest others
// being read are evicted until they do (their bytes leave the budget now,
// their reads end with 503); otherwise it reports false.
func (b *inflight) charge(m *meteredBody, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(m.held+n, b.max) - m.held
	var younger int64 // held by the bodies being read after the oldest
	if len(b.reading) > 1 {
		for _, v := range b.reading[1:] {
			younger += v.held
		}
	}
	oldest := len(b.reading) > 0 && b.reading[0] == m
	if !oldest && younger+n > b.max/4 {
		return false // the oldest body keeps room to finish in (see above)
	}
	if b.used+n <= b.max {
		b.used += n
		m.held += n
		return true
	}
	if !oldest {
		return false
	}
	if b.used-younger+n > b.max {
		return false // the room is held by bodies already read, whose requests are being handled
	}
	for i := len(b.reading) - 1; i > 0 && b.used+n > b.max; i-- {
		v := b.reading[i]
		b.used -= v.held
		v.held = 0
		v.evicted.Store(true)
		v.interrupt()
		b.reading = slices.Delete(b.reading, i, i+1)
	}
	b.used += n
	m.held += n
	return true
}

// oldest reports whether m is the oldest body being read.
func (b *inflight) oldest(m *meteredBody) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.reading) > 0 && b.reading[0] == m
}

// done takes m off the bodies being read.
func (b *inflight) done(m *meteredBody) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.reading, m); i >= 0 {
		b.reading = slices.Delete(b.reading, i, i+1)
	}
}

// release gives m's bytes back and takes it off the bodies being read.
func (b *inflight) release(m *meteredBody) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= m.held
	m.held = 0
	if i := slices.Index(b.reading, m); i >= 0 {
		b.reading = slices.Delete(b.reading, i, i+1)
	}
}

// meteredBody is a request body that charges the in-flight budget for the
// bytes it delivers and is cut when it falls behind the minimum rate or is
// evicted for an older body.
type meteredBody struct {
	rc     io.ReadCloser
	budget *inflight
	held   int64 // charged to the budget; guarded by budget.mu
	got    int64 // every byte delivered
	err    error // sticky: the body was refused
	// evicted: an older body needed the room (set under budget.mu).
	evicted atomic.Bool

	rate  int64 // bytes per second; <= 0: no minimum
	grace time.Duration
	start time.Time
	// onRead, when set, sees the running total after each read (tests).
	onRead func(int64)

	mu    sync.Mutex
	timer *time.Timer // nil without a minimum rate
	dueAt time.Time   // when the body falls behind with what it has delivered
	cut   bool        // the timer fired: the body fell behind
	ended bool        // read to the end, refused or finished: hands off the connection
	w     http.ResponseWriter
}

// meterKey is the context key of a request's metered body, which the
// handler that reads the body asks whether it is the oldest reading.
type meterKey struct{}

// meterBody wraps r's body for the in-flight budget and the minimum rate;
// the caller must call finish when the handler is done.
func (s *Server) meterBody(w http.ResponseWriter, r *http.Request) *meteredBody {
	m := &meteredBody{rc: r.Body, budget: &s.inflight, rate: s.minBodyRate, grace: s.minBodyGrace,
		start: time.Now(), onRead: s.onBodyRead, w: w}
	if m.rate > 0 {
		m.dueAt = m.start.Add(m.grace)
		m.timer = time.AfterFunc(m.grace, m.behind)
	}
	s.inflight.admit(m)
	return m
}

// due is when the body falls behind the rate with what it has delivered:
// the grace, then one second per rate bytes.
func (m *meteredBody) due() time.Time {
	return m.start.Add(m.grace + time.Duration(float64(m.got)/float64(m.rate)*float64(time.Second)))
}

// behind runs when the body's due time came: it is cut.
func (m *meteredBody) behind() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended || time.Now().Before(m.dueAt) {
		return // done, or data came and moved the due time while the timer fired
	}
	m.cut = true
	m.interruptLocked()
}

// interrupt ends the connection's reads, so a Read blocked on a silent
// client returns at once.
func (m *meteredBody) interrupt() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.interruptLocked()
}

func (m *meteredBody) interruptLocked() {
	if !m.ended {
		_ = http.NewResponseController(m.w).SetReadDeadline(time.Now())
	}
}

// Read implements io.Reader.
func (m *meteredBody) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	n, err := m.rc.Read(p)
	m.got += int64(n)
	if m.evicted.Load() || (n > 0 && !m.budget.charge(m, int64(n))) {
		return m.fail(errInflightFull)
	}
	if m.timer != nil {
		m.mu.Lock()
		cut := m.cut
		if !cut && err == nil {
			m.dueAt = m.due()
			m.timer.Reset(time.Until(m.dueAt))
		}
		m.mu.Unlock()
		if cut {
			return m.fail(m.tooSlow())
		}
	}
	if err != nil { // the end, or a read error: no longer being read
		m.stop()
		m.budget.done(m)
	}
	if m.onRead != nil {
		m.onRead(m.got)
	}
	return n, err
}

// fail refuses the body with err from now on. Its bytes leave the budget
// now, as an evicted body's do: its handler is about to drop them, and an
// older body must not be refused for room that is already let go.
func (m *meteredBody) fail(err error) (int, error) {
	m.err = err
	m.stop()
	m.budget.release(m)
	return 0, err
}

// tooSlow is the 408 of a body that fell behind the rate.
func (m *meteredBody) tooSlow() error {
	return &relay.Error{Code: codeBodyTimeout, Field: fieldRequest,
		Message: "request body arrived slower than --min-body-rate (" + strconv.FormatInt(m.rate, 10) + " bytes/s after the first " +
			m.grace.String() + "): cut after " + strconv.FormatInt(m.got, 10) + " bytes in " +
			time.Since(m.start).Round(time.Millisecond).String() + "; nothing was sent"}
}

// stop ends the watch on the connection: after it returns, neither the
// rate's timer nor an eviction touches it.
func (m *meteredBody) stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ended = true
	if m.timer != nil {
		m.timer.Stop()
	}
}

// oldest reports whether m is the oldest body being read: the one the
// budget lets finish.
func (m *meteredBody) oldest() bool { return m.budget.oldest(m) }

// Close implements io.Closer.
func (m *meteredBody) Close() error { return m.rc.Close() }

// finish gives the body's bytes back to the budget; after it returns the
// meter never touches the connection again.
func (m *meteredBody) finish() {
	m.stop()
	m.budget.release(m)
}
