package sweeper_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Search injection (docs/guarantees.md#defences): jobs whose Message-ID
// carries Gmail search syntax may be in a log an older gmailrelay wrote,
// which did not refuse such ids. The sweeper must
// neither let them break the batches they are in nor let them match mail
// they do not name.

// sendLegacy logs a job with a Message-ID the front door refuses, as an
// older gmailrelay accepted it, through an ambiguous send. stored says
// whether Gmail keeps the message.
func (h *harness) sendLegacy(id string, stored bool) {
	h.t.Helper()
	raw := []byte("Message-ID: " + id + "\r\nFrom: " + gmailfake.DefaultAccount + "\r\nTo: customer@example.net\r\nSubject: s\r\n\r\nbody\r\n")
	sum := sha256.Sum256(raw)
	p := relay.Prepared{Key: id, MessageID: id, Channel: retryChannel, Raw: raw, Fingerprint: hex.EncodeToString(sum[:])}
	action := gmailfake.ActionError
	if stored {
		action = gmailfake.ActionAcceptThenError
	}
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: action, Status: 500})
	res, err := h.svc.Send(h.ctx, p, relay.SendOptions{})
	if err != nil {
		h.t.Fatalf("send %s: %v", id, err)
	}
	h.wantState(id, res.Job, gmailrelay.StateUnknown)
}

func reviewReason(h *harness, id string) gmailrelay.Reason {
	h.t.Helper()
	ls := h.lines(id, gmailrelay.KindReview)
	if len(ls) == 0 {
		return ""
	}
	return ls[len(ls)-1].Reason
}

// One poison id in a batch of 20 must not fail every search of the batch,
// or nineteen other callers' ambiguous jobs would never settle.
func TestPoisonMessageIDDoesNotHoldBackItsBatch(t *testing.T) {
	h := newHarness(t, setup{batchSize: 20})
	poison := "<p}q@attacker.example>"
	h.sendLegacy(poison, true)
	var others []string
	for range 19 {
		others = append(others, h.sendAmbiguous(retryChannel))
	}
	h.clock.Advance(grace)
	h.sweep()
	for _, id := range others {
		h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
		if d := h.srv.Deliveries(id); d != 1 {
			t.Errorf("%s: %d deliveries at the emulator, want 1", id, d)
		}
	}
	h.wantState(poison, h.job(poison), gmailrelay.StateReview)
	if got := reviewReason(h, poison); got != gmailrelay.ReasonUnsearchable {
		t.Errorf("poison job's review reason %q, want %q", got, gmailrelay.ReasonUnsearchable)
	}
	if n := len(h.lines(poison, gmailrelay.KindSearch)); n != 0 {
		t.Errorf("the poison id was searched %d times", n)
	}
}

// <x@[}OR(in:sent)OR{in:x]> made the sweeper's query match all sent mail:
// a hit for a job that was never sent.
func TestInjectedQueryNeverMarksAJobSent(t *testing.T) {
	h := newHarness(t, setup{})
	h.send(retryChannel) // one sent message for an injected query to match
	inj := "<x@[}OR(in:sent)OR{in:x]>"
	h.sendLegacy(inj, false)
	h.sweeps(3)
	j := h.wantJob(inj, gmailrelay.StateReview, 1, 0, 0)
	if j.Effects != 0 {
		t.Fatalf("never-sent job has %d effects", j.Effects)
	}
	if d := h.srv.Deliveries(inj); d != 0 {
		t.Fatalf("never-sent job: %d deliveries at the emulator", d)
	}
}

// refusingGmail answers 400 invalidArgument, as Gmail does for a query it
// refuses, to every search whose query names the refused id.
type refusingGmail struct {
	relay.Provider
	refuse string
	lists  atomic.Int32
}

func (g *refusingGmail) List(ctx context.Context, mailbox, q string, labels []string, token string, max int64) (relay.ListPage, error) {
	g.lists.Add(1)
	if strings.Contains(q, g.refuse) {
		return relay.ListPage{}, &relay.ProviderError{Status: 400, Reason: "invalidArgument", Message: "Invalid query"}
	}
	return g.Provider.List(ctx, mailbox, q, labels, token, max)
}

// A batched query Gmail refuses is bisected: the other ids settle, the one
// Gmail refuses on its own goes to review with the query and Gmail's answer.
func TestRefusedBatchQueryIsBisected(t *testing.T) {
	h := newHarness(t, setup{batchSize: 8})
	var ids []string
	for range 8 {
		ids = append(ids, h.sendAmbiguous(retryChannel))
	}
	g := &refusingGmail{Provider: h.prov, refuse: strings.Trim(ids[5], "<>")}
	h.prov = g
	h.build(0)
	h.clock.Advance(grace)
	h.sweep()
	for i, id := range ids {
		if i == 5 {
			continue
		}
		h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	}
	h.wantJob(ids[5], gmailrelay.StateReview, 1, 0, 1)
	if d := h.srv.Deliveries(ids[5]); d != 1 {
		t.Errorf("refused id: %d deliveries, want 1 (never resent)", d)
	}
	rv := h.lines(ids[5], gmailrelay.KindReview)
	if len(rv) != 1 || rv[0].Reason != gmailrelay.ReasonQueryRefused || !strings.Contains(rv[0].Query, strings.Trim(ids[5], "<>")) ||
		!strings.Contains(rv[0].Note, "400") {
		t.Fatalf("review evidence of the refused id: %+v", rv)
	}
	// 8 → 4+4 → 2+2 → 1+1: 1 + 2 + 2 + 2 searches, not one per id.
	if n := g.lists.Load(); n != 7 {
		t.Errorf("%d searches, want 7", n)
	}
}

// A batch Gmail refuses once (a transient 400) is bisected and settles in
// the same pass; nothing goes to review.
func TestBatchRefusedOnceSettles(t *testing.T) {
	h := newHarness(t, setup{batchSize: 4})
	var ids []string
	for range 4 {
		ids = append(ids, h.sendAmbiguous(retryChannel))
	}
	h.clock.Advance(grace)
	h.emulatorFault(gmailfake.Fault{Method: gmailfake.MethodList, Action: gmailfake.ActionError, Status: 400})
	h.sweep()
	for _, id := range ids {
		h.wantJob(id, gmailrelay.StateSent, 1, 1, 1)
	}
}
