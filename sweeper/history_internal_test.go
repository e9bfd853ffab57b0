package sweeper

import (
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/policy"
)

// historyMiss counts a miss only for an attempt the cursor covers and a
// history complete to history_settle past the attempt's end.
func TestHistoryMissNeedsCoverAndSettle(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	ch := policy.Channel{Name: "default", OnUnknown: policy.Retry, Grace: time.Minute, Checks: 2, MaxAttempts: 3,
		HistorySettle: 10 * time.Second, Witness: policy.WitnessHistory}
	j := gmailrelay.Job{MessageID: "<m@x>", State: gmailrelay.StateUnknown, Attempts: 1, Checks: 0, AmbiguousAt: t0.Add(2 * time.Second)}
	for _, c := range []struct {
		name  string
		cur   gmailrelay.HistoryCursor
		start time.Time
		miss  bool
	}{
		{"covered and settled", gmailrelay.HistoryCursor{ID: 9, Since: t0.Add(-time.Minute), CompleteAt: t0.Add(12 * time.Second)}, t0, true},
		{"not settled yet", gmailrelay.HistoryCursor{ID: 9, Since: t0.Add(-time.Minute), CompleteAt: t0.Add(11 * time.Second)}, t0, false},
		{"cursor began after the attempt", gmailrelay.HistoryCursor{ID: 9, Since: t0.Add(time.Second), CompleteAt: t0.Add(time.Hour)}, t0, false},
		{"no cursor", gmailrelay.HistoryCursor{}, t0, false},
		{"attempt start unknown", gmailrelay.HistoryCursor{ID: 9, Since: t0.Add(-time.Minute), CompleteAt: t0.Add(time.Hour)}, time.Time{}, false},
	} {
		d, miss := historyMiss(j, ch, c.cur, c.start)
		if miss != c.miss {
			t.Errorf("%s: miss %v, want %v", c.name, miss, c.miss)
			continue
		}
		if miss && (d.then != followResend || d.checks != 1 || len(d.lines) != 1 || d.lines[0].Witness != witnessHistory || d.lines[0].Hits != 0) {
			t.Errorf("%s: decision %+v, want a history miss line and a resend", c.name, d)
		}
	}
}

// historyFound moves an unknown job to sent with an effect line of source
// history once the write settles it.
func TestHistoryFoundIsSentWithSourceHistory(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	j := gmailrelay.Job{MessageID: "<m@x>", State: gmailrelay.StateUnknown, Attempts: 1}
	d := historyFound(j, policy.Channel{OnUnknown: policy.Retry, Grace: time.Minute}, hit{id: "g1", labels: []string{"SENT"}, source: gmailrelay.SourceHistory}, now)
	n := j
	d = settleFound(d, &n)
	if d.to != gmailrelay.StateSent || d.why.Kind != gmailrelay.KindEffect || d.why.Source != gmailrelay.SourceHistory || n.Effects != 1 || n.GmailID != "g1" {
		t.Errorf("decision %+v, job %+v; want sent with an effect line of source history", d, n)
	}
}

// On a review channel a copy in the history is recorded (effect line,
// source history) and the job goes to review, never sent by itself.
func TestHistoryFoundOnAReviewChannelGoesToReview(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	j := gmailrelay.Job{MessageID: "<m@x>", State: gmailrelay.StateUnknown, Attempts: 1}
	d := historyFound(j, policy.Channel{OnUnknown: policy.Review, Grace: time.Minute}, hit{id: "g1", labels: []string{"SENT"}, source: gmailrelay.SourceHistory}, now)
	n := j
	d = settleFound(d, &n)
	if d.to != gmailrelay.StateReview || d.why.Reason != ReasonReviewChannel || len(d.lines) != 1 || d.lines[0].Source != gmailrelay.SourceHistory || n.Effects != 1 {
		t.Errorf("decision %+v, job %+v; want the effect recorded (source history) and review", d, n)
	}
}
