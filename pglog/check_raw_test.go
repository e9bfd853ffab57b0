package pglog_test

import (
	"context"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog/logtest"
	"github.com/gmailrelay/gmailrelay/pglog"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// TestCheckRawMessageRules plants a violation of each raw-message rule
// with SQL behind the log's back: Check names the first two, CheckFull all
// three. (open's cleanup would fail on the planted violation, so the log is
// opened without it.)
func TestCheckRawMessageRules(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		plant     string // SQL on a log holding the sent jobs <sent@x> and (pruned) <pruned@x>
		wantCheck string // "": Check passes
		wantFull  string
	}{
		{"pruned job with its message",
			`INSERT INTO bodies (message_id, raw) VALUES ('<pruned@x>', 'm')`,
			"job <pruned@x>: pruned at 2030-01-01T00:00:00Z but its raw message is still stored",
			"job <pruned@x>: pruned at 2030-01-01T00:00:00Z but its raw message is still stored"},
		{"message without its job",
			`ALTER TABLE bodies DROP CONSTRAINT bodies_message_id_fkey;
			INSERT INTO bodies (message_id, raw) VALUES ('<none@x>', 'm')`,
			"1 lines or raw messages without their job",
			"1 lines or raw messages without their job"},
		{"job that may be sent without its message",
			`DELETE FROM bodies WHERE message_id = '<sent@x>'`,
			"",
			"job <sent@x>: in state sent, not pruned, and no raw message stored (it could not be sent again)"},
	}
	url := databaseURL(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			schema := freshSchema(t, url)
			l, err := pglog.Open(ctx, url, pglog.Options{Schema: schema, Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			logtest.SentJob(t, l, "<pruned@x>", t0.Add(-time.Hour))
			logtest.SentJob(t, l, "<sent@x>", t0)
			if res, err := l.Prune(ctx, t0.Add(-time.Minute), 0); err != nil || res.Jobs != 1 {
				t.Fatalf("Prune = %+v, %v; want one job pruned", res, err)
			}
			if err := l.CheckFull(ctx); err != nil {
				t.Fatalf("before planting: %v", err)
			}
			if _, err := poolOf(t, url, schema).Exec(ctx, tc.plant); err != nil {
				t.Fatalf("plant: %v", err)
			}
			logtest.WantChecks(t, ctx, l, tc.wantCheck, tc.wantFull)
		})
	}
}

// TestCheckFullAfterSendsAndPrune: jobs the relay sent through the Gmail
// emulator and the sweeper verified, two of them pruned, pass CheckFull.
func TestCheckFullAfterSendsAndPrune(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	pol := policy.Default()
	svc := s.replica(t, relay.Config{Provider: s.gm, Policy: pol})
	send := func(key string) {
		t.Helper()
		p, err := relay.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{"a@example.org"}, Subject: "s", Text: "b"},
			"", pol.MsgIDDomain, s.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if res, err := svc.Send(ctx, p, relay.SendOptions{}); err != nil || res.Job.State != gmailrelay.StateSent {
			t.Fatalf("send %s: %s, %v; want sent", key, res.Job.State, err)
		}
	}
	send("check:1")
	send("check:2")
	s.clock.Advance(pol.Channels[policy.DefaultChannel].Grace + time.Second)
	sw := sweeper.New(svc.sweeperConfig())
	for range 2 { // the verify pass and its late look: done, prunable
		if _, err := sw.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		s.clock.Advance(time.Hour)
	}
	send("check:3") // sent, its verify pass to come: not pruned
	l := open(t, s.url, s.schema, s.clock.Now)
	if res, err := l.Prune(ctx, s.clock.Now().Add(-time.Minute), 0); err != nil || res.Jobs != 2 {
		t.Fatalf("Prune = %+v, %v; want two jobs pruned", res, err)
	}
	if err := l.CheckFull(ctx); err != nil {
		t.Errorf("CheckFull after sends and a prune: %v", err)
	}
}
