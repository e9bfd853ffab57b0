package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/outbox"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// fakeClockLog is a bbolt log posing as one several replicas share, with a
// clock the test sets: the clock fence without PostgreSQL.
type fakeClockLog struct {
	*acceptlog.Log
	mu          sync.Mutex
	offset, unc time.Duration
	err         error
}

var _ relay.ClockChecker = (*fakeClockLog)(nil)

func (l *fakeClockLog) Shared() bool { return true }

func (l *fakeClockLog) ClockOffset(context.Context, func() time.Time) (time.Duration, time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.offset, l.unc, l.err
}

func (l *fakeClockLog) set(offset, unc time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.offset, l.unc, l.err = offset, unc, err
}

// countLines returns how many lines of logs at level contain text.
func countLines(logs *testenv.LockedBuffer, level, text string) int {
	n := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"`+level+`"`) && strings.Contains(l, text) {
			n++
		}
	}
	return n
}

// The clock fence, with a fake log clock. A replica whose clock is 30 s
// ahead of the shared log's: /readyz says not ready naming the offset;
// a new send is refused (503 unavailable, Retry-After, naming the skew)
// with nothing logged and nothing sent; RecoverExpired, a sweeper pass
// and an outbox pass do nothing. The ERROR is logged once per change. A
// measurement that fails, or is not conclusive, leaves the verdict; once
// the clock is back within relay.MaxClockSkew, the fence lifts and sends
// go out. A manual clock has no fence.
func TestClockFenceStopsAReplicaWhoseClockIsOff(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New()
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{Now: clock.Now})
	gm, err := gmailapi.New(ctx, gmailapi.Config{Endpoint: emuURL, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	bl, err := acceptlog.Open(filepath.Join(t.TempDir(), "relay.db"), acceptlog.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bl.Close() })
	lg := &fakeClockLog{Log: bl}
	pol := policy.Default()
	pol.VerifyHandle = policy.VerifyNever
	logs := &testenv.LockedBuffer{}
	newService := func(manual bool) *relay.Service {
		svc, err := relay.New(ctx, relay.Config{Log: lg, Provider: gm, Policy: pol, Now: clock.Now, ManualClock: manual,
			Logger: zerolog.New(logs), SendTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	svc := newService(false)
	prepare := func(key string) relay.Prepared {
		p, err := relay.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "b"},
			"", svcDomain, clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// In step: an ambiguous send leaves an unknown job for the sweeper.
	dropped, err := svc.Send(ctx, prepare("fence:dropped"), relay.SendOptions{Fault: faultmodes.Decision{Mode: faultmodes.ForwardThenDropResponse}})
	if err != nil || dropped.Job.State != acceptlog.StateUnknown {
		t.Fatalf("dropped send: %s, %v; want unknown", dropped.Job.State, err)
	}
	calls := gmailCalls(emu)

	lg.set(-30*time.Second, time.Millisecond, nil)
	for range 2 {
		if err := svc.CheckClock(ctx); !errors.Is(err, relay.ErrClockSkew) {
			t.Fatalf("CheckClock 30 s ahead: %v, want the fence's error", err)
		}
	}
	if got := countLines(logs, "error", "30s (±1ms) ahead of"); got != 1 {
		t.Errorf("fence ERROR lines naming the offset = %d, want 1 (once per change)\n%s", got, logs.String())
	}

	srv := httptest.NewServer(api.New(api.Config{Service: svc, MsgIDDomain: svcDomain, Logger: zerolog.Nop()}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rz map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&rz)
	resp.Body.Close()
	if c, _ := rz["clock"].(string); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(c, "30s (±1ms) ahead of") {
		t.Errorf("/readyz fenced: %d %v; want 503 with the clock's offset", resp.StatusCode, rz)
	}

	p := prepare("fence:new")
	_, err = svc.Send(ctx, p, relay.SendOptions{Queue: true})
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeUnavailable || re.RetryAfter <= 0 || !strings.Contains(re.Message, "30s (±1ms) ahead of") {
		t.Errorf("send while fenced: %v; want unavailable with Retry-After naming the skew", err)
	}
	if _, err := lg.Get(ctx, p.MessageID); !errors.Is(err, acceptlog.ErrNotFound) {
		t.Errorf("job of the refused send: %v; want none logged", err)
	}
	if n, err := svc.RecoverExpired(ctx); n != 0 || !errors.Is(err, relay.ErrClockSkew) {
		t.Errorf("RecoverExpired while fenced: %d, %v; want 0 and the fence's error", n, err)
	}
	clock.Advance(time.Hour) // the unknown job is due
	if _, err := sweeper.New(sweeper.ConfigFor(svc)).RunOnce(ctx); !errors.Is(err, relay.ErrClockSkew) {
		t.Errorf("sweeper pass while fenced: %v; want the fence's error", err)
	}
	ob, err := outbox.New(outbox.Config{Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.RunOnce(ctx); !errors.Is(err, relay.ErrClockSkew) {
		t.Errorf("outbox pass while fenced: %v; want the fence's error", err)
	}
	if got := gmailCalls(emu); got != calls {
		t.Errorf("Gmail calls while fenced: %d, want none", got-calls)
	}
	if j, _ := lg.Get(ctx, dropped.Job.MessageID); j.State != acceptlog.StateUnknown || j.Attempts != 1 {
		t.Errorf("unknown job after a fenced pass: %s, %d attempts; want untouched", j.State, j.Attempts)
	}

	// Neither a failed nor an inconclusive measurement lifts the fence.
	for _, m := range []struct {
		offset, unc time.Duration
		err         error
	}{{0, 0, errors.New("database unreachable")}, {relay.MaxClockSkew + time.Second, 2 * time.Second, nil}} {
		lg.set(m.offset, m.unc, m.err)
		if err := svc.CheckClock(ctx); !errors.Is(err, relay.ErrClockSkew) {
			t.Errorf("CheckClock with %v ±%v (%v): %v; want still fenced", m.offset, m.unc, m.err, err)
		}
	}

	lg.set(relay.MaxClockSkew-time.Second, time.Millisecond, nil)
	if err := svc.CheckClock(ctx); err != nil {
		t.Fatalf("CheckClock within the bound: %v, want nil", err)
	}
	if got := countLines(logs, "warn", "clock fence lifted"); got != 1 {
		t.Errorf("fence lifted lines = %d, want 1", got)
	}
	if res, err := svc.Send(ctx, p, relay.SendOptions{}); err != nil || res.Job.State != acceptlog.StateSent {
		t.Errorf("send after the fence lifted: %s, %v; want sent", res.Job.State, err)
	}
	if got := emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator results: %d deliveries, want 1", got)
	}

	// A manual clock runs apart from the log's by design: no fence.
	lg.set(-30*time.Second, 0, nil)
	if manual := newService(true); manual.CheckClock(ctx) != nil || manual.ClockStatus().On {
		t.Errorf("manual clock: fence %+v, want off", manual.ClockStatus())
	}
}
