package e2e_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/e2e"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// The load the soaks share (TestSoak, TestRealismSoak and the
// three-replica soak): a plan of n8n-style requests, the callers that send
// it, and the tally and report after the checker has run.

// planned is one request of a soak's plan.
type planned struct {
	req     sendRequest
	racers  int // callers sending it at the same time
	tries   int // n8n maxTries
	waitFor time.Duration
}

// soakPlan draws jobs requests from rng: keys from a pool of two thirds as
// many (so that some repeat), every fourth key on the billing channel,
// 15 % of requests raced by two or three callers.
func soakPlan(rng *rand.Rand, jobs int) []planned {
	pool := max(1, jobs*2/3)
	plan := make([]planned, jobs)
	for i := range plan {
		k := rng.IntN(pool)
		channel := "default"
		if k%4 == 0 {
			channel = "billing"
		}
		racers := 1
		if rng.IntN(100) < 15 {
			racers = 2 + rng.IntN(2)
		}
		plan[i] = planned{
			req:    request(fmt.Sprintf("cus_%d:order.shipped:ord_%d", k%17, k), channel),
			racers: racers, tries: 2 + rng.IntN(3), waitFor: time.Duration(rng.IntN(20)) * time.Millisecond,
		}
	}
	return plan
}

// sendAsN8n sends p the way n8n's HTTP Request node with Retry On Fail
// does: up to p.tries times, a fixed wait between tries, and any non-2xx
// answer or transport error counts as an error to retry. try makes one
// request (caller id, try number) and does whatever follows it.
func (p planned) sendAsN8n(id int, try func(req sendRequest, id, n int) e2e.Op) {
	for n := 1; n <= p.tries; n++ {
		if n > 1 && p.waitFor > 0 {
			time.Sleep(p.waitFor) // the client's own Retry On Fail wait, not a wait for the relay
		}
		if op := try(p.req, id, n); op.Outcome == e2e.OK || (op.Status >= 200 && op.Status < 300) {
			return
		}
	}
}

// runPlan hands plan to six workers until deadline; each request is sent
// by its racers at once, each caller with an id of its own. It returns
// when every request handed out has been answered.
func runPlan(plan []planned, deadline time.Time, try func(req sendRequest, id, n int) e2e.Op) {
	work := make(chan planned)
	var callers sync.WaitGroup
	for w := range 6 {
		callers.Go(func() {
			n := 0
			for p := range work {
				var racing sync.WaitGroup
				for i := range p.racers {
					racing.Go(func() { p.sendAsN8n(w*1_000_000+n*10+i, try) })
				}
				racing.Wait()
				n++
			}
		})
	}
	for _, p := range plan {
		if time.Now().After(deadline) {
			break
		}
		work <- p
	}
	close(work)
	callers.Wait()
}

// opLog is the callers' history, safe for concurrent use.
type opLog struct {
	mu  sync.Mutex
	ops []e2e.Op
}

func (l *opLog) add(op e2e.Op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, op)
}

// all returns a copy of the history so far.
func (l *opLog) all() []e2e.Op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]e2e.Op(nil), l.ops...)
}

// clearEmulatorFaults removes emu's fault rules and returns how often they
// fired.
func clearEmulatorFaults(emu *gmailfake.Server) int {
	hits := 0
	for _, f := range emu.Faults() {
		hits += f.Hits
	}
	emu.ClearFaults()
	return hits
}

// tally counts the relay's fault lines in obs's log and the outcomes the
// callers saw in hist.
func tally(obs e2e.Observation, hist []e2e.Op) (faultLines int, seen map[e2e.Outcome]int) {
	for _, l := range obs.Log {
		if l.Kind == gmailrelay.KindFault {
			faultLines++
		}
	}
	seen = map[e2e.Outcome]int{}
	for _, op := range hist {
		seen[op.Outcome]++
	}
	return faultLines, seen
}

// reportSoak logs and records a soak's summary line and fails t on every
// violation the checker found, naming the first 40.
func reportSoak(t *testing.T, rep e2e.Report, summary string) {
	t.Helper()
	t.Log(summary)
	recordSummary(t, summary)
	for i, v := range rep.Violations {
		if i == 40 {
			t.Errorf("… and %d more violations", len(rep.Violations)-i)
			break
		}
		t.Errorf("checker: %s", v)
	}
}
