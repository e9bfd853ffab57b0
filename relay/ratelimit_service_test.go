package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// gmailCalls is every Gmail call the emulator received (its own count).
func gmailCalls(emu *gmailfake.Server) int {
	n := 0
	for _, c := range emu.Stats().Calls {
		n += c
	}
	return n
}

// unknownFastJob turns handle verification off, adds a channel "fast" that
// retries an unknown outcome after 1 s, and sends one job through a fault
// that forwards it and drops Gmail's answer, so the job is unknown and the
// sweeper returned will want to search for it in 1 s.
func (e *env) unknownFastJob(ctx context.Context) *sweeper.Sweeper {
	e.t.Helper()
	e.policy.VerifyHandle = policy.VerifyNever
	e.policy.Channels["fast"] = policy.Channel{Name: "fast", OnUnknown: policy.Retry, Grace: time.Second, Checks: 1, MaxAttempts: 3}
	sw := sweeper.New(e.te.SweeperConfig())
	pu, err := relay.Prepare(relay.SendRequest{Key: "k-unknown", Channel: "fast", To: relay.AddressList{"customer@example.org"},
		Subject: "Dropped", Text: "x"}, "", svcDomain, e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	drop := faultmodes.WithForced(ctx, faultmodes.Decision{Mode: faultmodes.ForwardThenDropResponse})
	res, err := e.svc.Send(drop, pu, relay.SendOptions{})
	if err != nil || res.Job.State != gmailrelay.StateUnknown {
		e.t.Fatalf("dropped send: state %s, err %v; want unknown", res.Job.State, err)
	}
	return sw
}

// Issue 13 (g), emulator results: the emulator answers a send over its
// per-minute quota the Gmail way — 429 rateLimitExceeded, or 403
// userRateLimitExceeded — with the retry time only in the message text
// ("User-rate limit exceeded.  Retry after <RFC 3339>", no Retry-After
// header). The relay then makes no Gmail call at all before that time:
// not the caller's retry, not a new send, not the sweeper's search of an
// unknown job, not the sweeper's retry — counted by the emulator's own
// stats. At that time the send goes out once (emulator deliveries).
func TestEmulatorRateLimitTextOnlyPausesEveryGmailCall(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusForbidden} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			// 150 units a minute: one send (100), not two.
			e := newEnv(t, gmailfake.Options{QuotaPerMinute: 150, QuotaStatus: status})
			ctx := context.Background()
			sw := e.unknownFastJob(ctx)

			// The next send meets Gmail's quota.
			p := e.prepare("k-limited", "hello")
			res, err := e.svc.Send(ctx, p, relay.SendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Job.State != gmailrelay.StateFailed || res.Job.LastReason != gmailrelay.ReasonRateLimited || !res.Job.Retryable {
				t.Fatalf("over Gmail's quota: %s %s retryable=%v, want failed rate_limited retryable", res.Job.State, res.Job.LastReason, res.Job.Retryable)
			}
			if res.Job.LastStatus != status {
				t.Fatalf("status %d, want %d", res.Job.LastStatus, status)
			}
			if st := e.emu.Stats(); st.RateLimited != 1 {
				t.Fatalf("emulator rate-limit answers = %d, want 1", st.RateLimited)
			}
			retryAt, ok := relay.RetryAtFromMessage(res.Job.LastError)
			if !ok {
				t.Fatalf("the recorded error %q has no \"Retry after <RFC 3339>\"", res.Job.LastError)
			}
			wait := retryAt.Sub(e.clock.Now())
			if wait < 10*time.Second {
				t.Fatalf("Gmail's retry time is only %v away; the test needs a longer one", wait)
			}
			if got := e.te.Quota.PausedFor(); got != wait {
				t.Fatalf("the mailbox is paused for %v, want %v (Gmail's retry time from the text)", got, wait)
			}
			if res.RetryIn < wait || res.RetryIn > wait+time.Second {
				t.Errorf("the caller's retry time %v, want %v", res.RetryIn, wait)
			}

			before := gmailCalls(e.emu)
			for e.clock.Now().Add(5 * time.Second).Before(retryAt) {
				e.clock.Advance(5 * time.Second)
				left := retryAt.Sub(e.clock.Now())
				// The caller retries the same key, and a new send arrives.
				for _, q := range []relay.Prepared{p, e.prepare(fmt.Sprintf("k-new-%d", e.clock.Now().Unix()), "other")} {
					_, err := e.svc.Send(ctx, q, relay.SendOptions{})
					var rerr *relay.Error
					if !errors.As(err, &rerr) || rerr.Code != relay.CodeRateLimited {
						t.Fatalf("send %s %v before Gmail's retry time: err %v, want rate_limited", q.Key, left, err)
					}
					if want := int((left + time.Second - 1) / time.Second); rerr.RetryAfter != want {
						t.Fatalf("Retry-After %d s, want %d s", rerr.RetryAfter, want)
					}
				}
				if _, err := sw.RunOnce(ctx); err != nil {
					t.Fatal(err)
				}
				if got := gmailCalls(e.emu); got != before {
					t.Fatalf("%v before Gmail's retry time the emulator got %d more calls (%v)", left, got-before, e.emu.Stats().Calls)
				}
			}

			// At Gmail's retry time the send goes out, once.
			e.clock.Advance(retryAt.Sub(e.clock.Now()))
			res, err = e.svc.Send(ctx, p, relay.SendOptions{})
			if err != nil || res.Job.State != gmailrelay.StateSent {
				t.Fatalf("at Gmail's retry time: state %s, err %v; want sent", res.Job.State, err)
			}
			if got := e.emu.Deliveries(p.MessageID); got != 1 {
				t.Errorf("emulator deliveries of the rate-limited message = %d, want 1", got)
			}
			if got := count(e.lines(p.MessageID), gmailrelay.KindNotSent); got != 1 {
				t.Errorf("not_sent lines = %d, want 1 (the one rate limit)", got)
			}
			// The sweeper's searches run again too.
			if _, err := sw.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if st := e.emu.Stats(); st.Calls["list"] == 0 {
				t.Errorf("after the pause the sweeper made no search (emulator calls %v)", st.Calls)
			}
		})
	}
}

// A rate limit without any retry time (a fault answer: 429, no header, no
// text) pauses for the backoff's first step, and a send Gmail answers
// resets it.
func TestEmulatorRateLimitWithoutRetryTimeBacksOff(t *testing.T) {
	e := newEnv(t, gmailfake.Options{})
	e.policy.VerifyHandle = policy.VerifyNever
	ctx := context.Background()
	if _, err := e.emu.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 429, Count: 2}); err != nil {
		t.Fatal(err)
	}
	p := e.prepare("k-backoff", "hello")
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		res, err := e.svc.Send(ctx, p, relay.SendOptions{})
		if err != nil || res.Job.LastReason != gmailrelay.ReasonRateLimited {
			t.Fatalf("send %d: %v %v, want rate_limited", i+1, res.Job.LastReason, err)
		}
		d := e.te.Quota.PausedFor()
		if d < want || d > want+want/4 {
			t.Fatalf("send %d: pause %v, want in [%v, %v]", i+1, d, want, want+want/4)
		}
		calls := gmailCalls(e.emu)
		e.clock.Advance(d - time.Millisecond)
		if _, err := e.svc.Send(ctx, p, relay.SendOptions{}); relay.ErrorCode(err) != relay.CodeRateLimited {
			t.Fatalf("send %d: inside the backoff: err %v, want rate_limited", i+1, err)
		}
		if gmailCalls(e.emu) != calls {
			t.Fatalf("send %d: Gmail called inside the backoff", i+1)
		}
		e.clock.Advance(time.Millisecond)
	}
	res, err := e.svc.Send(ctx, p, relay.SendOptions{})
	if err != nil || res.Job.State != gmailrelay.StateSent {
		t.Fatalf("third send: %s %v, want sent", res.Job.State, err)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator deliveries = %d, want 1", got)
	}
	// Reset: the next rate limit pauses 1 s again, not 4 s.
	if _, err := e.emu.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 429}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Send(ctx, e.prepare("k-after", "x"), relay.SendOptions{}); err != nil {
		t.Fatal(err)
	}
	if d := e.te.Quota.PausedFor(); d < time.Second || d > time.Second+time.Second/4 {
		t.Errorf("after a send Gmail answered, the next pause is %v, want in [1s, 1.25s]", d)
	}
}

// The other way round, emulator results: Gmail rate-limits the sweeper's
// search, the retry time only in the text; until then the send path makes
// no Gmail call either (the pause is the mailbox's, in the shared Quota).
func TestEmulatorRateLimitedSearchPausesSends(t *testing.T) {
	// 100 units a minute, a search costing 100 like a send: after the
	// send, Gmail's retry time for the search is about a minute away.
	e := newEnv(t, gmailfake.Options{QuotaPerMinute: 100, Costs: map[string]int{gmailfake.MethodList: 100}})
	ctx := context.Background()
	sw := e.unknownFastJob(ctx)
	e.clock.Advance(time.Second)
	if _, err := sw.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if st := e.emu.Stats(); st.RateLimited != 1 || st.Calls["list"] != 1 {
		t.Fatalf("emulator: %d rate-limit answers, %d searches; want the search rate-limited once", st.RateLimited, st.Calls["list"])
	}
	// Gmail's retry time (the text only): the bucket refills 100 units a
	// minute, so about 59 s from now, far past the sweeper's first 1 s
	// backoff step.
	if paused := e.te.Quota.PausedFor(); paused < 55*time.Second {
		t.Fatalf("the mailbox is paused for %v, want at least Gmail's retry time (~59s)", paused)
	}
	before := gmailCalls(e.emu)
	for i := 0; e.te.Quota.PausedFor() > 0; i++ {
		if _, err := e.svc.Send(ctx, e.prepare(fmt.Sprintf("k-during-%d", i), "x"), relay.SendOptions{}); relay.ErrorCode(err) != relay.CodeRateLimited {
			t.Fatalf("send %v into the search's pause: err %v, want rate_limited", time.Duration(i)*5*time.Second, err)
		}
		e.clock.Advance(5 * time.Second)
	}
	if got := gmailCalls(e.emu); got != before {
		t.Fatalf("Gmail got %d calls during the pause (%v)", got-before, e.emu.Stats().Calls)
	}
	// Once the pause is over a send goes out.
	p := e.prepare("k-after", "x")
	if res, err := e.svc.Send(ctx, p, relay.SendOptions{}); err != nil || res.Job.State != gmailrelay.StateSent {
		t.Fatalf("after the pause: %s %v, want sent", res.Job.State, err)
	}
	if got := e.emu.Deliveries(p.MessageID); got != 1 {
		t.Errorf("emulator deliveries = %d, want 1", got)
	}
}
