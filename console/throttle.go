package console

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// The sign-in throttle: after throttleFails wrong tokens from one client
// address within throttleWindow, that address's sign-ins are answered 429
// with Retry-After, right token or not, for a block that starts at
// throttleFirstBlock and doubles with each block, up to throttleMaxBlock. An
// address is forgotten (its next block starts short again) after a right
// token, or once it has been quiet for throttleMaxBlock after its block.
//
// The address is the connection's (RemoteAddr): X-Forwarded-For is not
// trusted, since a client could set it to spread its guesses over made-up
// addresses or to lock another address out. Behind a reverse proxy every
// browser shares the proxy's address, and so its throttle.
const (
	throttleFails      = 5
	throttleWindow     = time.Minute
	throttleFirstBlock = time.Minute
	throttleMaxBlock   = 15 * time.Minute
	// maxThrottled bounds the addresses remembered; at the bound the ones
	// quiet longest are forgotten first.
	maxThrottled = 10000
)

// throttle is the sign-in throttle's state.
type throttle struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]*throttleRecord
}

// throttleRecord is one client address's recent wrong sign-ins.
type throttleRecord struct {
	fails []time.Time   // within the window, oldest first
	until time.Time     // blocked until
	block time.Duration // the last block's length; 0: none yet
	last  time.Time     // the last wrong sign-in
}

func newThrottle(now func() time.Time) *throttle {
	return &throttle{now: now, m: map[string]*throttleRecord{}}
}

// clientAddr is the address the throttle counts r under: its connection's
// host, without the port.
func clientAddr(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// blocked returns how long addr is still refused (0: not blocked).
func (t *throttle) blocked(addr string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	rec := t.m[addr]
	if rec == nil {
		return 0
	}
	return max(rec.until.Sub(t.now()), 0)
}

// failed counts a wrong sign-in from addr; the throttleFails-th within the
// window starts a block, twice as long as addr's last one.
func (t *throttle) failed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	rec := t.m[addr]
	if rec == nil {
		if len(t.m) >= maxThrottled {
			t.forgetLocked(now)
		}
		rec = &throttleRecord{}
		t.m[addr] = rec
	}
	rec.last = now
	i := 0
	for i < len(rec.fails) && now.Sub(rec.fails[i]) >= throttleWindow {
		i++
	}
	rec.fails = append(rec.fails[i:], now)
	if len(rec.fails) < throttleFails {
		return
	}
	rec.block = min(max(rec.block*2, throttleFirstBlock), throttleMaxBlock)
	rec.until = now.Add(rec.block)
	rec.fails = rec.fails[:0]
}

// succeeded forgets addr: a right token ends its throttle.
func (t *throttle) succeeded(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, addr)
}

// forgetLocked drops the addresses that have been quiet for
// throttleMaxBlock after their block; if none is, the one quiet longest.
func (t *throttle) forgetLocked(now time.Time) {
	var oldest string
	for addr, rec := range t.m {
		if now.Sub(rec.until) >= throttleMaxBlock && now.Sub(rec.last) >= throttleMaxBlock {
			delete(t.m, addr)
			continue
		}
		if oldest == "" || rec.last.Before(t.m[oldest].last) || (rec.last.Equal(t.m[oldest].last) && addr < oldest) {
			oldest = addr
		}
	}
	if len(t.m) >= maxThrottled && oldest != "" {
		delete(t.m, oldest)
	}
}
