package pglog_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/pglog"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// skewedReplica is one relay on the shared schema as `serve --database`
// makes it, a Replica of ground on the real clock moved by skew
// (PostgreSQL's clock is the real one): its log and its quota read that
// clock, and the quota shares Gmail's pauses through the log (as
// cmd/gmailrelay wires it).
func skewedReplica(t *testing.T, ground *testenv.Env, skew time.Duration, cfg relay.Config) *pgRelay {
	t.Helper()
	now := func() time.Time { return time.Now().Add(skew) }
	return relayOf(ground.Replica(testenv.Options{Now: now, Provider: cfg.Provider, Policy: cfg.Policy, SendTimeout: cfg.SendTimeout,
		Configure: func(c *relay.Config) { c.Quota.SharePauses(c.Log.(*pglog.Log), policy.DefaultMailbox) }}))
}

// skewSite is two replicas' ground on the real clock: a fresh schema and
// the emulator with Google's client in front of it (testenv.Start on the
// host's clock).
func skewSite(t *testing.T) (ground *testenv.Env, emu *gmailfake.Server, gm *gmailapi.Client) {
	t.Helper()
	url := databaseURL(t)
	ground = testenv.Start(t, testenv.Options{HostClock: true, OpenLog: pgOpener(url, freshSchema(t, url))})
	return ground, ground.Emulator, ground.Provider.(*gmailapi.Client)
}

func prepareAt(t *testing.T, key string, pol *policy.Policy) relay.Prepared {
	t.Helper()
	p, err := relay.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "b"},
		"", pol.MsgIDDomain, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// F3: a rate limit seen by a replica whose clock is 2 h ahead must not
// stop the others for 2 h. Before the clock fence, its 429 asking for
// about a second became a pause until its now + 1 s, shared through the
// log: the replica on the right clock had its next send refused
// (rate_limited, Retry-After ~7200 s). Now the skewed replica measures its
// clock against PostgreSQL's and refuses the send at the front door (503
// unavailable naming the skew): nothing logged, nothing sent to Gmail, no
// pause published; the other replica's send goes out.
func TestEmulatorClockSkewedReplicaPausesNobody(t *testing.T) {
	const skew = 2 * time.Hour
	g, emu, gm := skewSite(t)
	ctx := context.Background()
	pol := quietPolicy()
	good := skewedReplica(t, g, 0, relay.Config{Provider: gm, Policy: pol, SendTimeout: 10 * time.Second})
	ahead := skewedReplica(t, g, skew, relay.Config{Provider: gm, Policy: pol, SendTimeout: 10 * time.Second})

	if _, err := emu.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: http.StatusTooManyRequests}); err != nil {
		t.Fatal(err)
	}
	p := prepareAt(t, "skew:ahead", pol)
	res, err := ahead.Send(ctx, p, relay.SendOptions{})
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != relay.CodeUnavailable || re.RetryAfter <= 0 || !strings.Contains(re.Message, "ahead of") {
		t.Errorf("send through the replica 2 h ahead: %s %s, %v; want refused unavailable naming the skew", res.Job.State, res.Job.LastReason, err)
	}
	if _, err := good.log.Get(ctx, p.MessageID); !errors.Is(err, gmailrelay.ErrNotFound) {
		t.Errorf("job of the refused send: %v; want none logged", err)
	}
	if st := emu.Stats(); st.Calls[gmailfake.MethodSend] != 0 {
		t.Errorf("Gmail sends through the skewed replica: %d, want 0", st.Calls[gmailfake.MethodSend])
	}
	emu.ClearFaults()

	q := prepareAt(t, "skew:good", pol)
	res, err = good.Send(ctx, q, relay.SendOptions{})
	if err != nil || res.Job.State != gmailrelay.StateSent {
		t.Fatalf("send through the replica on the right clock: %s, %v; want sent (no pause from the skewed one)", res.Job.State, err)
	}
	if d := good.quota.PausedFor(); d > 0 {
		t.Errorf("the right replica's mailbox is paused for %v, want not paused", d)
	}
	if got := emu.Deliveries(q.MessageID); got != 1 {
		t.Errorf("emulator results: %d deliveries, want 1", got)
	}
}

// F4: a replica whose clock is skew ahead of the owner's calls
// RecoverExpired (and runs a sweeper pass) while the owner's Gmail call,
// with lease 2 × sendTimeout, is in flight. It must leave the live
// attempt alone: the owner records Gmail's answer (sent, one effect) and
// its caller gets it. Before the fix the skewed replica turned the job
// unknown (lease_expired) and the owner's caller got an error although
// Gmail had accepted the mail. Two cases: 30 s ahead of a 20 s lease (the
// clock fence stops that replica) and 4.5 s ahead of a 4 s lease (within
// the fence's bound: the margin RecoverExpired adds to every lease).
func TestEmulatorClockSkewedReplicaLeavesLiveLeasesAlone(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		ownerSkew, skew, sendTimeout time.Duration
	}{
		{"beyond the bound", 0, 30 * time.Second, 10 * time.Second},
		{"within the bound", 0, 4500 * time.Millisecond, 2 * time.Second},
		// Each within the bound, on either side of the reference: 9 s
		// apart, more than the 4 s lease and one MaxClockSkew.
		{"both within the bound, 9 s apart", -4500 * time.Millisecond, 4500 * time.Millisecond, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, emu, gm := skewSite(t)
			ctx := context.Background()
			pol := quietPolicy()
			gate := &stuckProvider{Provider: gm, forwarded: make(chan struct{}), release: make(chan struct{})}
			owner := skewedReplica(t, g, tc.ownerSkew, relay.Config{Provider: gate, Policy: pol, SendTimeout: tc.sendTimeout})
			ahead := skewedReplica(t, g, tc.skew, relay.Config{Provider: gm, Policy: pol, SendTimeout: tc.sendTimeout})
			p := prepareAt(t, "skew:lease", pol)
			answered := sendInFlight(ctx, owner, p, gate)
			released := false
			defer func() {
				if !released {
					close(gate.release)
					<-answered
				}
			}()
			n, err := ahead.RecoverExpired(ctx)
			if n != 0 || (err != nil && relay.ErrorCode(err) != relay.CodeUnavailable) {
				t.Errorf("RecoverExpired on the replica %v ahead: %d jobs, %v; want 0 (at most refused by the clock fence)", tc.skew, n, err)
			}
			_, _ = sweeper.New(ahead.sweeperConfig()).RunOnce(ctx)
			if j, _ := owner.log.Get(ctx, p.MessageID); j.State != gmailrelay.StateForwarding {
				t.Errorf("owner's attempt in flight is %s %s, want still forwarding", j.State, j.LastReason)
			}
			close(gate.release)
			released = true
			got := <-answered
			if got.err != nil || got.res.Job.State != gmailrelay.StateSent {
				t.Fatalf("owner's answer: %s, %v; want sent", got.res.Job.State, got.err)
			}
			if j, err := owner.log.Get(ctx, p.MessageID); err != nil || j.State != gmailrelay.StateSent || j.Effects != 1 {
				t.Errorf("job: %s, %d effects (%v); want sent with one effect", j.State, j.Effects, err)
			}
			if got := emu.Deliveries(p.MessageID); got != 1 {
				t.Errorf("emulator results: %d deliveries, want 1", got)
			}
		})
	}
}

// MeasureClock reads PostgreSQL's clock against the caller's: a clock 3 s
// behind the real one (the server's) measures about +3 s, within a small
// uncertainty; after Close it answers gmailrelay.ErrClosed.
func TestMeasureClockMeasuresTheCallersClock(t *testing.T) {
	url := databaseURL(t)
	lg := open(t, url, freshSchema(t, url), nil)
	ctx := context.Background()
	behind := func() time.Time { return time.Now().Add(-3 * time.Second) }
	r, err := lg.MeasureClock(ctx, behind)
	if off, unc := r.Offset, r.Uncertainty; err != nil || off < 2*time.Second || off > 4*time.Second || unc < 0 || unc > time.Second {
		t.Errorf("MeasureClock of a clock 3 s behind: %v ±%v (%v), want about +3s", off, unc, err)
	}
	_ = lg.Close()
	if _, err := lg.MeasureClock(ctx, nil); !errors.Is(err, gmailrelay.ErrClosed) {
		t.Errorf("MeasureClock after Close: %v, want ErrClosed", err)
	}
}

// The clock fence's reference is the replicas, not the database's clock
// (the reviewer's reproduction): two replicas whose clocks agree, both 10 s
// ahead of PostgreSQL's, both send; before, each was compared with the
// database alone and both refused every send (503 unavailable). Their
// status names the database's clock as the one off.
func TestEmulatorReplicasThatAgreeOutvoteTheDatabasesClock(t *testing.T) {
	const skew = 10 * time.Second
	g, emu, gm := skewSite(t)
	ctx := context.Background()
	pol := quietPolicy()
	a := skewedReplica(t, g, skew, relay.Config{Provider: gm, Policy: pol, SendTimeout: 10 * time.Second})
	b := skewedReplica(t, g, skew, relay.Config{Provider: gm, Policy: pol, SendTimeout: 10 * time.Second})
	for i, svc := range []*pgRelay{a, b} {
		if err := svc.CheckClock(ctx); err != nil {
			t.Errorf("replica %d: CheckClock: %v, want in step", i, err)
		}
		p := prepareAt(t, fmt.Sprintf("skew:agree:%d", i), pol)
		res, err := svc.Send(ctx, p, relay.SendOptions{})
		if err != nil || res.Job.State != gmailrelay.StateSent {
			t.Errorf("replica %d: send: %s, %v; want sent", i, res.Job.State, err)
		}
		if got := emu.Deliveries(p.MessageID); got != 1 {
			t.Errorf("replica %d: emulator results: %d deliveries, want 1", i, got)
		}
		st := svc.ClockStatus()
		if st.Fenced || st.Peers != 1 || !st.LogOff || !strings.Contains(st.String(), "the database's clock is") ||
			!strings.Contains(st.String(), "behind the replicas'") {
			t.Errorf("replica %d: clock status %+v %q; want in step with 1 peer, the database's clock named as off", i, st, st)
		}
	}
}

// MeasureClock publishes this Log's offset and returns those the other
// replicas published: only of live replicas (a closed one's row is gone)
// and younger than 2 minutes on the database's clock.
func TestMeasureClockReturnsTheLiveReplicasRecentOffsets(t *testing.T) {
	url := databaseURL(t)
	schema := freshSchema(t, url)
	ctx := context.Background()
	ahead := open(t, url, schema, func() time.Time { return time.Now().Add(7 * time.Second) })
	other := open(t, url, schema, nil)
	peers := func() []time.Duration {
		t.Helper()
		r, err := other.MeasureClock(ctx, nil)
		if err != nil || r.Offset < -time.Second || r.Offset > time.Second {
			t.Fatalf("MeasureClock: %+v, %v; want an offset about 0", r, err)
		}
		return r.Peers
	}
	if p := peers(); len(p) != 0 {
		t.Errorf("peers before the other replica measured: %v, want none", p)
	}
	if r, err := ahead.MeasureClock(ctx, nil); err != nil || len(r.Peers) != 1 || r.Offset > -6*time.Second || r.Offset < -8*time.Second {
		t.Errorf("MeasureClock of the replica 7 s ahead: %+v, %v; want about -7s and one peer", r, err)
	}
	if p := peers(); len(p) != 1 || p[0] > -6*time.Second || p[0] < -8*time.Second {
		t.Errorf("peers: %v, want the other replica's offset, about -7s", p)
	}
	execSQL(t, url, "UPDATE "+schema+".replicas SET clock_at_ns = clock_at_ns - $1 WHERE owner = $2", int64(3*time.Minute), ahead.Owner())
	if p := peers(); len(p) != 0 {
		t.Errorf("peers with an offset 3 min old: %v, want none", p)
	}
	if _, err := ahead.MeasureClock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_ = ahead.Close()
	if p := peers(); len(p) != 0 {
		t.Errorf("peers after the other replica closed: %v, want none", p)
	}
	_ = other.Close()
	if _, err := other.MeasureClock(ctx, nil); !errors.Is(err, gmailrelay.ErrClosed) {
		t.Errorf("MeasureClock after Close: %v, want ErrClosed", err)
	}
}

var _ relay.ClockChecker = (*pglog.Log)(nil)

// A replica with no peer's clock to compare with (it starts first; its
// peers run an older version) is compared with the database's: 2 h ahead,
// it is fenced from its start and sends nothing. Before (the review's
// finding), alone meant never fenced: it sent, and the Gmail pause its 429
// published held the replica started after it for 2 h.
func TestEmulatorReplicaStartingFirstIsComparedWithTheDatabase(t *testing.T) {
	g, emu, gm := skewSite(t)
	ctx := context.Background()
	pol := quietPolicy()
	ahead := skewedReplica(t, g, 2*time.Hour, relay.Config{Provider: gm, Policy: pol, SendTimeout: 10 * time.Second})
	p := prepareAt(t, "skew:first", pol)
	if _, err := ahead.Send(ctx, p, relay.SendOptions{}); !errors.Is(err, relay.ErrClockSkew) {
		t.Errorf("send on the replica 2 h ahead, alone: %v, want the clock fence's refusal", err)
	}
	if got := emu.Deliveries(p.MessageID); got != 0 {
		t.Errorf("emulator results: %d deliveries, want 0", got)
	}
}
