package console_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// Without a throttle, 200 wrong sign-ins take 0.4 s. After 5 wrong
// tokens from one address within a minute, that address is answered 429
// with Retry-After — even with the right token, which gets no session —
// for a block that doubles each time, up to 15 minutes. The clock is the
// console's injected one.
func TestSignInThrottlePerAddress(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client()
	wrong := func(n int) {
		t.Helper()
		for i := range n {
			if p := c.signIn("wrong-token-wrong-token"); p.status != http.StatusUnauthorized {
				t.Fatalf("wrong sign-in %d: %d, want 401", i+1, p.status)
			}
		}
	}
	wantBlocked := func(secs int) {
		t.Helper()
		p := c.signIn(adminToken)
		if p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") != strconv.Itoa(secs) {
			t.Fatalf("sign-in while blocked: %d Retry-After %q, want 429 Retry-After %d", p.status, p.header.Get("Retry-After"), secs)
		}
		if c.cookie("gmailrelay_session") != nil {
			t.Fatal("a blocked sign-in got a session")
		}
	}
	// Four wrong, a minute passes, one more: not five within a minute.
	wrong(4)
	e.Clock.Advance(61 * time.Second)
	wrong(1)
	e.Clock.Advance(61 * time.Second)
	for _, block := range []int{60, 120, 240, 480, 900, 900} {
		wrong(5)
		wantBlocked(block)
		e.Clock.Advance(time.Duration(block-1) * time.Second)
		wantBlocked(1)
		e.Clock.Advance(time.Second)
	}
	// Unblocked: the right token signs in, and the address is forgotten.
	c.mustSignIn(adminToken)
	c = e.client()
	wrong(5)
	wantBlocked(60)
}
