package sweeper

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// The decide functions are tested here on plain values: no emulator, no
// log, no pass. Each case says what the pass learned (a look) and what the
// decision must be.

var (
	dNow   = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	dRetry = policy.Channel{Name: "alerts", OnUnknown: policy.Retry, Grace: 5 * time.Minute, Checks: 2, MaxAttempts: 3,
		MaxUnwitnessed: time.Hour}
	dReview = policy.Channel{Name: "billing", OnUnknown: policy.Review, Grace: 5 * time.Minute, Checks: 2, MaxAttempts: 1,
		MaxUnwitnessed: time.Hour}
	dHitA = hit{id: "gm-a", labels: []string{sentLabel}}
	dHitB = hit{id: "gm-b", labels: []string{sentLabel}}
)

// dJob is a job of the given state whose attempt ended ten minutes before
// dNow, seen on the given check.
func dJob(state gmailrelay.State, checks int) gmailrelay.Job {
	end := dNow.Add(-10 * time.Minute)
	return gmailrelay.Job{MessageID: "<a@relay.test>", Mailbox: "ops", Channel: "alerts", State: state,
		Attempts: 1, Checks: checks, AmbiguousAt: end, UpdatedAt: end, NextCheckAt: dNow}
}

// dLook is a look at j after a search that found hits, on channel ch.
func dLook(j gmailrelay.Job, ch policy.Channel, hits ...hit) look {
	return look{job: j, ch: ch, now: dNow, query: `rfc822msgid:"a@relay.test"`, hits: hits, witness: WitnessFound,
		used: j.Attempts, since: dNow.Sub(attemptEnd(j))}
}

// outcome is what a test asks of a decision.
type outcome struct {
	to       gmailrelay.State
	why      gmailrelay.Reason // the reason of the line that moves the job
	search   gmailrelay.Reason // the reason of the search line (verify)
	checks   int
	looks    int
	verified bool
	next     time.Time // the job's next check; keepNext: its own
	keepNext bool
	found    bool // an effect line for the found copy comes from the write
	then     follow
	count    tally
	level    zerolog.Level // of the decision's own log line, if any
	say      bool
}

func outcomeOf(d decision) outcome {
	o := outcome{to: d.to, why: d.why.Reason, checks: d.checks, looks: d.looks, verified: d.verified,
		next: d.next, keepNext: d.keepNext, found: d.found != nil, then: d.then, count: d.count}
	if d.keepNext {
		o.next = time.Time{}
	}
	if len(d.lines) > 0 {
		o.search = d.lines[0].Reason
	}
	if d.say.msg != "" {
		o.say, o.level = true, d.say.level
	}
	return o
}

func TestDecideUnknown(t *testing.T) {
	miss := func(checks int, witness string, edit func(*look)) look {
		l := dLook(dJob(gmailrelay.StateUnknown, checks), dRetry)
		l.witness = witness
		if edit != nil {
			edit(&l)
		}
		return l
	}
	grace := dNow.Add(dRetry.Grace)
	for _, tc := range []struct {
		name string
		look look
		want outcome
	}{
		{"a miss in a mailbox whose handle is untrusted proves nothing: review",
			miss(0, WitnessFound, func(l *look) { l.untrusted, l.hold = true, time.Minute }),
			outcome{to: gmailrelay.StateReview, why: ReasonHandleUntrusted, count: tChecked}},
		{"a miss from before a forward step of the clock waits for real time",
			miss(0, WitnessFound, func(l *look) { l.hold = 3 * time.Minute }),
			outcome{next: dNow.Add(3 * time.Minute), count: tChecked | tUnwitnessed}},
		{"no witness for max_unwitnessed: review with an alarm",
			miss(1, WitnessMissing, func(l *look) { l.since = time.Hour }),
			outcome{to: gmailrelay.StateReview, why: ReasonIndexUnverifiable, checks: 1, count: tChecked | tUnwitnessed,
				say: true, level: zerolog.ErrorLevel}},
		{"a miss younger than the mailbox's p99 lag waits until it is that old",
			miss(0, WitnessFound, func(l *look) { l.lagUntil = dNow.Add(time.Second) }),
			outcome{next: dNow.Add(time.Second), count: tChecked | tUnwitnessed}},
		{"a miss as old as the p99 lag counts",
			miss(0, WitnessFound, func(l *look) { l.lagUntil = dNow }),
			outcome{checks: 1, next: grace, count: tChecked | tMissed}},
		{"a miss without a witness does not count: look again after grace",
			miss(1, WitnessMissing, nil),
			outcome{checks: 1, next: grace, count: tChecked | tUnwitnessed}},
		{"a witnessed miss counts and is checked again after grace",
			miss(0, WitnessFound, nil),
			outcome{checks: 1, next: grace, count: tChecked | tMissed}},
		{"a miss in a quiet mailbox counts by the time rule",
			miss(0, WitnessNone, nil),
			outcome{checks: 1, next: grace, count: tChecked | tMissed}},
		{"the last counted miss on a retry channel: written, then resent",
			miss(1, WitnessFound, nil),
			outcome{checks: 2, keepNext: true, then: followResend, count: tChecked}},
		{"the last counted miss with every attempt used: review",
			miss(1, WitnessFound, func(l *look) { l.used = 3 }),
			outcome{to: gmailrelay.StateReview, why: ReasonMaxAttempts, checks: 1, count: tChecked}},
		{"the last counted miss on a review channel: review",
			miss(1, WitnessFound, func(l *look) { l.ch = dReview }),
			outcome{to: gmailrelay.StateReview, why: ReasonMissingAfterChecks, checks: 1, count: tChecked}},
		{"found once on a retry channel: sent, with the late look",
			dLook(dJob(gmailrelay.StateUnknown, 1), dRetry, dHitA),
			outcome{to: gmailrelay.StateSent, looks: 1, next: dNow.Add(10 * dRetry.Grace), found: true,
				count: tChecked | tFound, say: true, level: zerolog.InfoLevel}},
		{"found once while the clock's step holds misses: a hit is not held",
			func() look {
				l := dLook(dJob(gmailrelay.StateUnknown, 0), dRetry, dHitA)
				l.hold = time.Hour
				return l
			}(),
			outcome{to: gmailrelay.StateSent, looks: 1, next: dNow.Add(10 * dRetry.Grace), found: true,
				count: tChecked | tFound, say: true, level: zerolog.InfoLevel}},
		{"found once on a review channel: the effect, then review",
			dLook(dJob(gmailrelay.StateUnknown, 0), dReview, dHitA),
			outcome{to: gmailrelay.StateReview, why: ReasonReviewChannel, found: true, count: tChecked | tFound}},
		{"found twice: review as a duplicate",
			dLook(dJob(gmailrelay.StateUnknown, 0), dRetry, dHitA, dHitB),
			outcome{to: gmailrelay.StateReview, why: ReasonDuplicate, count: tChecked | tDuplicates}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideUnknown(tc.look)
			if got := outcomeOf(d); got != tc.want {
				t.Errorf("decision\n got %+v\nwant %+v", got, tc.want)
			}
			if len(d.lines) != 1 || d.lines[0].Kind != gmailrelay.KindSearch || d.lines[0].Check != tc.look.job.Checks+1 {
				t.Errorf("lines %+v, want the search line, check %d", d.lines, tc.look.job.Checks+1)
			}
			if len(tc.look.hits) == 0 && d.lines[0].Witness != tc.look.witness {
				t.Errorf("search line's witness %q, want the miss's %q", d.lines[0].Witness, tc.look.witness)
			}
		})
	}
}

func TestDecideFailed(t *testing.T) {
	for _, tc := range []struct {
		name string
		look look
		want outcome
	}{
		{"found once: the ambiguous attempt was delivered after all",
			dLook(dJob(gmailrelay.StateFailed, 2), dRetry, dHitA),
			outcome{to: gmailrelay.StateSent, looks: 1, next: dNow.Add(10 * dRetry.Grace), found: true,
				count: tChecked | tFound, say: true, level: zerolog.InfoLevel}},
		{"found twice: review",
			dLook(dJob(gmailrelay.StateFailed, 2), dRetry, dHitA, dHitB),
			outcome{to: gmailrelay.StateReview, why: ReasonDuplicate, checks: 2, count: tChecked | tDuplicates}},
		{"a miss in an untrusted mailbox: review",
			func() look { l := dLook(dJob(gmailrelay.StateFailed, 2), dRetry); l.untrusted = true; return l }(),
			outcome{to: gmailrelay.StateReview, why: ReasonHandleUntrusted, checks: 2, count: tChecked}},
		{"a miss confirms the retry (no witness needed): written, then retried",
			func() look { l := dLook(dJob(gmailrelay.StateFailed, 2), dRetry); l.witness = WitnessMissing; return l }(),
			outcome{checks: 3, keepNext: true, then: followRetry, count: tChecked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcomeOf(decideFailed(tc.look)); got != tc.want {
				t.Errorf("decision\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDecideVerify(t *testing.T) {
	sent := func(checks, looks int, gmailID string) gmailrelay.Job {
		j := dJob(gmailrelay.StateSent, checks)
		j.VerifyLooks, j.GmailID = looks, gmailID
		return j
	}
	withHandle := func(l look, a handleAnswer) look { l.handle = a; return l }
	late := dNow.Add(10 * dRetry.Grace)
	for _, tc := range []struct {
		name string
		look look
		want outcome
	}{
		{"one copy, first look: verified for now, the late look scheduled",
			dLook(sent(0, 0, "gm-a"), dRetry, dHitA),
			outcome{search: ReasonVerified, looks: 1, next: late, count: tChecked | tVerified}},
		{"one copy at the late look: verified for good",
			dLook(sent(0, 1, "gm-a"), dRetry, dHitA),
			outcome{search: ReasonVerified, looks: 2, verified: true, count: tChecked}},
		{"two copies: review",
			dLook(sent(0, 0, "gm-a"), dRetry, dHitA, dHitB),
			outcome{to: gmailrelay.StateReview, why: ReasonDuplicate, count: tChecked | tDuplicates}},
		{"a miss without a gmail id: once more",
			dLook(sent(0, 0, ""), dRetry),
			outcome{search: ReasonVerifyMiss, checks: 1, next: dNow.Add(dRetry.Grace), count: tChecked | tMissed}},
		{"a second miss without a gmail id: gave up, still sent",
			dLook(sent(1, 0, ""), dRetry),
			outcome{search: ReasonVerifyGaveUp, checks: 2, count: tChecked}},
		{"a miss whose handle reads back the same id: the index is behind, look up to ten times",
			withHandle(dLook(sent(1, 0, "gm-a"), dRetry), handleAnswer{kind: handleSame}),
			outcome{search: ReasonVerifyMiss, checks: 2, next: dNow.Add(dRetry.Grace), count: tChecked | tMissed}},
		{"a miss whose handle could not be read: as the index behind",
			withHandle(dLook(sent(8, 0, "gm-a"), dRetry), handleAnswer{}),
			outcome{search: ReasonVerifyMiss, checks: 9, next: dNow.Add(dRetry.Grace), count: tChecked | tMissed}},
		{"the tenth miss with the same id read back: gave up",
			withHandle(dLook(sent(9, 0, "gm-a"), dRetry), handleAnswer{kind: handleSame}),
			outcome{search: ReasonVerifyGaveUp, checks: 10, count: tChecked}},
		{"the handle is gone (404): verification ends, not a rewrite",
			withHandle(dLook(sent(0, 0, "gm-a"), dRetry), handleAnswer{kind: handleGone}),
			outcome{search: ReasonVerifyGaveUp, checks: 1, count: tChecked, say: true, level: zerolog.WarnLevel}},
		{"the handle was rewritten: alarm, and the late look under Gmail's id",
			withHandle(dLook(sent(0, 0, "gm-a"), dRetry), handleAnswer{kind: handleRewritten, stored: "<x@mail.gmail.com>"}),
			outcome{search: ReasonVerifyGaveUp, checks: 1, looks: 1, next: late, count: tChecked, say: true, level: zerolog.ErrorLevel}},
		{"the handle rewritten at the late look: no second alarm, no further look",
			withHandle(dLook(sent(0, 1, "gm-a"), dRetry), handleAnswer{kind: handleRewritten, stored: "<x@mail.gmail.com>"}),
			outcome{search: ReasonVerifyGaveUp, checks: 1, looks: 1, count: tChecked}},
		{"the handle rewritten and stored twice under Gmail's id: review",
			withHandle(dLook(sent(0, 0, "gm-a"), dRetry), handleAnswer{kind: handleRewritten, stored: "<x@mail.gmail.com>",
				copiesQuery: `rfc822msgid:"x@mail.gmail.com"`, copies: []hit{dHitA, dHitB}}),
			outcome{to: gmailrelay.StateReview, why: ReasonDuplicate, search: ReasonVerifyGaveUp, checks: 1,
				count: tChecked | tDuplicates, say: true, level: zerolog.ErrorLevel}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcomeOf(decideVerify(tc.look)); got != tc.want {
				t.Errorf("decision\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// The handle check's decisions write the handle line with the search, and
// edit the mailbox's record: a rewrite counts once (not at the late look),
// and the job's Message-ID stops being the mailbox's witness.
func TestDecideHandleLinesAndMailbox(t *testing.T) {
	j := dJob(gmailrelay.StateSent, 0)
	j.GmailID = "gm-a"
	l := dLook(j, dRetry)
	l.handle = handleAnswer{kind: handleRewritten, stored: "<x@mail.gmail.com>"}
	d := decideVerify(l)
	if len(d.lines) != 2 || d.lines[1].Kind != gmailrelay.KindHandle || d.lines[1].Reason != ReasonHandleRewritten ||
		d.lines[1].StoredMessageID != "<x@mail.gmail.com>" || d.lines[1].HandleKept == nil || *d.lines[1].HandleKept {
		t.Errorf("lines %+v, want the search and a handle line rewritten, stored id, not kept", d.lines)
	}
	if want := (boxEdit{rewrites: 1, untrusted: true, forget: true}); d.mailbox != want {
		t.Errorf("mailbox edit %+v, want %+v", d.mailbox, want)
	}
	j.VerifyLooks = 1
	l.job = j
	if d := decideVerify(l); d.mailbox != (boxEdit{untrusted: true, forget: true}) {
		t.Errorf("late look: mailbox edit %+v, want no second rewrite", d.mailbox)
	}
	l.handle = handleAnswer{kind: handleGone}
	if d := decideVerify(l); d.mailbox != (boxEdit{forget: true}) || d.lines[1].Reason != ReasonHandleDeleted {
		t.Errorf("gone: mailbox edit %+v, line %+v, want forget only and a handle line deleted", d.mailbox, d.lines[1])
	}

	mb := gmailrelay.Mailbox{LastSendID: j.MessageID, LastSendAt: dNow}
	boxEdit{rewrites: 1, untrusted: true, forget: true}.edit(j.MessageID)(&mb)
	if !mb.HandleUntrusted || !mb.HandleChecked || mb.Rewrites != 1 || mb.LastSendID != "" || !mb.LastSendAt.IsZero() {
		t.Errorf("record after the edit %+v, want untrusted, one rewrite, no last send", mb)
	}
	other := gmailrelay.Mailbox{LastSendID: "<b@relay.test>", LastSendAt: dNow}
	boxEdit{forget: true}.edit(j.MessageID)(&other)
	if other.LastSendID != "<b@relay.test>" {
		t.Errorf("forget cleared another job's last send: %+v", other)
	}
	if (boxEdit{untrusted: true}).edit(j.MessageID) != nil {
		t.Errorf("an edit that changes nothing in the record is not nil")
	}
}

// settleFound reads the job as the write sees it: the copy found is one
// delivery unless an effect line counts another copy already.
func TestSettleFound(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ch        policy.Channel
		effects   int
		gmailID   string
		to        gmailrelay.State
		why       gmailrelay.Line
		lines     []gmailrelay.Kind
		effectsTo int
		count     tally
	}{
		{"no effect yet: the found copy is the effect that makes it sent", dRetry, 0, "",
			gmailrelay.StateSent, gmailrelay.Line{Kind: gmailrelay.KindEffect, Reason: ReasonFound, Source: gmailrelay.SourceSearch},
			[]gmailrelay.Kind{gmailrelay.KindSearch}, 1, tChecked | tFound},
		{"the very copy an effect counts: still one delivery", dRetry, 1, "gm-a",
			gmailrelay.StateSent, gmailrelay.Line{Kind: gmailrelay.KindState, Reason: ReasonFound, Source: gmailrelay.SourceSearch},
			[]gmailrelay.Kind{gmailrelay.KindSearch}, 1, tChecked | tFound},
		{"another copy than the one an effect counts: delivered twice", dRetry, 1, "gm-z",
			gmailrelay.StateReview, gmailrelay.Line{Kind: gmailrelay.KindReview, Reason: ReasonDuplicateDelivery},
			[]gmailrelay.Kind{gmailrelay.KindSearch, gmailrelay.KindEffect}, 2, tChecked | tFound | tDuplicates},
		{"a review channel: the effect line, then review", dReview, 0, "",
			gmailrelay.StateReview, gmailrelay.Line{Kind: gmailrelay.KindReview, Reason: ReasonReviewChannel},
			[]gmailrelay.Kind{gmailrelay.KindSearch, gmailrelay.KindEffect}, 1, tChecked | tFound},
		{"a review channel, the copy counted already: no second effect", dReview, 1, "gm-a",
			gmailrelay.StateReview, gmailrelay.Line{Kind: gmailrelay.KindReview, Reason: ReasonReviewChannel},
			[]gmailrelay.Kind{gmailrelay.KindSearch}, 1, tChecked | tFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := dJob(gmailrelay.StateUnknown, 1)
			d := decideUnknown(dLook(j, tc.ch, dHitA))
			n := j
			n.Effects, n.GmailID = tc.effects, tc.gmailID
			got := settleFound(d, &n)
			if got.to != tc.to || got.why.Kind != tc.why.Kind || got.why.Reason != tc.why.Reason || got.why.Source != tc.why.Source {
				t.Errorf("moves to %s with %+v, want %s with %+v", got.to, got.why, tc.to, tc.why)
			}
			var kinds []gmailrelay.Kind
			for _, l := range got.lines {
				kinds = append(kinds, l.Kind)
			}
			if strings.Join(kindNames(kinds), ",") != strings.Join(kindNames(tc.lines), ",") {
				t.Errorf("lines before the move %v, want %v", kinds, tc.lines)
			}
			if n.Effects != tc.effectsTo || n.GmailID != dHitA.id {
				t.Errorf("job after: effects %d gmail id %q, want %d and the copy's id", n.Effects, n.GmailID, tc.effectsTo)
			}
			if got.count != tc.count {
				t.Errorf("counts %b, want %b", got.count, tc.count)
			}
			if len(d.lines) != 1 {
				t.Errorf("settleFound changed the decision it was given: %d lines", len(d.lines))
			}
		})
	}
}

func kindNames(kinds []gmailrelay.Kind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = string(k)
	}
	return out
}
