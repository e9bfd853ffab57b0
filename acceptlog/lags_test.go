package acceptlog_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/acceptlog/acceptlogtest"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
)

// A mailbox's lag samples: the newest MaxLagSamples, oldest first, in
// whole milliseconds rounded up; one key added twice in a row is one
// sample.
func TestLagSamplesAdd(t *testing.T) {
	var s gmailrelay.LagSamples
	if !s.IsZero() || s.Durations() != nil {
		t.Fatalf("zero value holds %v", s.Durations())
	}
	if !s.Add("1 <a@x>", 1500*time.Microsecond) || s.Add("1 <a@x>", time.Hour) {
		t.Fatal("Add: the first sample of a key is added, a repeat is not")
	}
	if !s.Add("", -time.Second) || !s.Add("", 0) {
		t.Fatal("Add: an empty key is never a repeat")
	}
	if got, want := s.Durations(), []time.Duration{2 * time.Millisecond, 0, 0}; !slices.Equal(got, want) {
		t.Fatalf("samples %v, want %v", got, want)
	}
	for i := range gmailrelay.MaxLagSamples {
		s.Add("", time.Duration(i)*time.Second)
	}
	got := s.Durations()
	if len(got) != gmailrelay.MaxLagSamples || got[0] != 0 || got[len(got)-1] != time.Duration(gmailrelay.MaxLagSamples-1)*time.Second {
		t.Fatalf("after %d more: %d samples from %s to %s, want the newest %d", gmailrelay.MaxLagSamples, len(got), got[0], got[len(got)-1], gmailrelay.MaxLagSamples)
	}
}

// The samples go through the mailbox record's JSON, which both logs
// store; a record written before they were kept reads as none, and a
// longer list keeps its newest.
func TestLagSamplesJSON(t *testing.T) {
	mb := gmailrelay.Mailbox{Name: "me@x", LastSendID: "<a@x>"}
	mb.Lags.Add("1 <a@x>", 8*time.Minute)
	mb.Lags.Add("1 <b@x>", 90*time.Second)
	b, err := json.Marshal(mb)
	if err != nil {
		t.Fatal(err)
	}
	var got gmailrelay.Mailbox
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got != mb {
		t.Fatalf("round trip of %s: %+v, want %+v", b, got, mb)
	}
	if got.Lags.Add("1 <b@x>", time.Minute) {
		t.Error("the newest sample's key is lost in the round trip")
	}

	b, err = json.Marshal(gmailrelay.Mailbox{Name: "me@x"})
	if err != nil {
		t.Fatal(err)
	}
	var old gmailrelay.Mailbox
	if err := json.Unmarshal([]byte(`{"name":"me@x","handle_checked":true,"rewrites":0}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Lags.Len() != 0 {
		t.Errorf("a record without lags reads as %d samples, want none", old.Lags.Len())
	}
	if strings.Contains(string(b), "lags") {
		t.Errorf("a record without samples is written as %s, want no lags field", b)
	}

	long := make([]int, gmailrelay.MaxLagSamples+5)
	for i := range long {
		long[i] = i
	}
	lb, _ := json.Marshal(map[string]any{"ms": long})
	var s gmailrelay.LagSamples
	if err := json.Unmarshal(lb, &s); err != nil {
		t.Fatal(err)
	}
	if d := s.Durations(); len(d) != gmailrelay.MaxLagSamples || d[0] != 5*time.Millisecond {
		t.Errorf("%d samples from %s, want the newest %d from 5ms", len(d), d[0], gmailrelay.MaxLagSamples)
	}
}

// A sample added to the mailbox's record in a Mutate is there after the
// log is closed and opened again.
func TestLagSamplesSurviveReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "accept.db")
	l := acceptlogtest.OpenPath(t, path, acceptlog.Options{})
	logtest.Forward(t, l, "<a@x>", "me@x", time.Time{})
	_, _, err := l.Mutate(ctx, "<a@x>", func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{EditMailbox: func(m *gmailrelay.Mailbox) { m.Lags.Add("1 <a@x>", 8*time.Minute) }}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = acceptlogtest.OpenPath(t, path, acceptlog.Options{})
	mb, err := l.Mailbox(ctx, "me@x")
	if err != nil {
		t.Fatal(err)
	}
	if got := mb.Lags.Durations(); !slices.Equal(got, []time.Duration{8 * time.Minute}) {
		t.Errorf("after reopen: samples %v, want [8m0s]", got)
	}
}
