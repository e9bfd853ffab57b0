package e2e_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/e2e"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// Emulator results, the real binary with its history tail (serve's
// default): under a search index lag of p50 60 s, p99 5 min, ten sends
// whose answer the relay's fault dropped (Gmail stored each) are all sent
// within 30 s of the relay's clock — resolved_by "history" in the job
// view — and each is delivered once. The search path alone could not know
// before grace and a lagging index.
func TestEmulatorHistoryResolvesDroppedResponsesWithin30s(t *testing.T) {
	t.Parallel()
	r := startRelay(t, relayOptions{history: true, gmail: func(o *gmailfake.Options) {
		o.IndexLagDistribution = gmailfake.LagDistribution{P50: time.Minute, P99: 5 * time.Minute, Max: 10 * time.Minute}
	}})
	var ops []e2e.Op
	var ids []string
	for i := range 10 {
		key := fmt.Sprintf("cus_%d:order.shipped:history", i)
		r.AddFault(t, fmt.Sprintf(`{"mode":"forward-then-drop-response","key":%q,"count":1}`, key))
		op := r.Send(request(key, "default"), 1, 1)
		if op.Outcome != e2e.Info {
			t.Fatalf("send %d: %s, want an unknown outcome (answer dropped)", i, opString(op))
		}
		ops, ids = append(ops, op), append(ids, msgID(key))
	}
	for waited := time.Duration(0); waited < 30*time.Second; waited += 5 * time.Second {
		r.Advance(t, 5*time.Second)
		r.Sweep(t)
	}
	for _, id := range ids {
		var v map[string]any
		if err := r.admin(http.MethodGet, "/v1/jobs/"+url.PathEscape(id), "", http.StatusOK, &v); err != nil {
			t.Fatal(err)
		}
		if v["state"] != "sent" || v["resolved_by"] != "history" {
			t.Errorf("%s after 30 s: state %v, resolved_by %v; want sent, history", id, v["state"], v["resolved_by"])
		}
		if d := r.Emu.Deliveries(id); d != 1 {
			t.Errorf("emulator result: %s delivered %d times, want 1", id, d)
		}
	}
	wantClean(t, r, ops)
}
