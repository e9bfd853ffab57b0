package main

import (
	"bytes"
	"context"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/relay"
)

func selftestAgainstEmulator(t *testing.T, rewrite bool) (selftestReport, *gmailfake.Server, string) {
	t.Helper()
	clock := testclock.New()
	emu, url := gmailfake.NewTestServer(t, gmailfake.Options{Now: clock.Now, IndexLag: 45 * time.Second, RewriteMessageID: rewrite})
	var out bytes.Buffer
	rep, err := selftest(context.Background(), selftestOptions{
		To: "me@example.com", Gmail: gmailapi.Config{Endpoint: url}, Mailbox: "me", MsgIDDomain: "selftest.example.com",
		Window: 5 * time.Minute, Poll: 20 * time.Second, Label: "the Gmail emulator (EMULATOR RESULT)",
		now: clock.Now, sleep: func(_ context.Context, d time.Duration) error { clock.Advance(d); return nil },
	}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("selftest printed:\n%s", out.String())
	return rep, emu, out.String()
}

func onlyTo(t *testing.T, emu *gmailfake.Server, addr string) {
	t.Helper()
	for _, m := range emu.Messages("") {
		msg, err := mail.ReadMessage(bytes.NewReader(m.Raw))
		if err != nil {
			t.Fatal(err)
		}
		if got := msg.Header.Get("To"); got != addr || msg.Header.Get("Cc") != "" || msg.Header.Get("Bcc") != "" {
			t.Errorf("self-test message went to To=%q Cc=%q Bcc=%q, want only %s", got, msg.Header.Get("Cc"), msg.Header.Get("Bcc"), addr)
		}
	}
}

func TestSelftestEmulatorIDKeptPasses(t *testing.T) {
	rep, emu, out := selftestAgainstEmulator(t, false)
	if !rep.Found || !rep.Trustworthy || rep.HandleKept == nil || !*rep.HandleKept {
		t.Fatalf("report %+v, want found, kept, pass", rep)
	}
	if rep.IndexLag < 45*time.Second || rep.IndexLag > 90*time.Second {
		t.Errorf("index lag %v, want between the emulator's 45s lag and one poll more", rep.IndexLag)
	}
	if got := emu.Deliveries(rep.MessageID); got != 1 {
		t.Errorf("emulator has %d deliveries, want 1 (no resend)", got)
	}
	if rep.QuotaUnits < relay.UnitsSend {
		t.Errorf("quota used %d, want at least one send", rep.QuotaUnits)
	}
	if !strings.Contains(out, "PASS") || !strings.Contains(out, "EMULATOR RESULT") {
		t.Errorf("report lacks the verdict or the emulator label:\n%s", out)
	}
	onlyTo(t, emu, "me@example.com")
}

func TestSelftestEmulatorRewrittenIDFails(t *testing.T) {
	rep, emu, out := selftestAgainstEmulator(t, true)
	if rep.Found || rep.Trustworthy || rep.HandleKept == nil || *rep.HandleKept {
		t.Fatalf("report %+v, want not found, handle not kept, fail", rep)
	}
	if !strings.Contains(out, "FAIL") {
		t.Errorf("report lacks FAIL:\n%s", out)
	}
	if got := emu.Deliveries(""); got != 2 {
		t.Errorf("emulator has %d deliveries, want 2 (the ambiguous send and the Message-ID check), never a resend", got)
	}
	onlyTo(t, emu, "me@example.com")
}

func TestSelftestFlags(t *testing.T) {
	tests := [][]string{
		{"--live"}, // no --to
		{"--live", "--to", "a@b.c", "--credentials", "/nonexistent"},
		{"--poll", "0s"},
		{"--bogus"},
		{"--live", "--to", "me@example.com", "--gmail-endpoint", "not a url"},
		{"--live", "--to", "me@example.com", "--gmail-endpoint", "ftp://127.0.0.1:1"},
	}
	for _, args := range tests {
		var out, errb bytes.Buffer
		if code := runSelftest(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("selftest %v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := runSelftest(context.Background(), []string{"--live", "--to", "Eve <a@b.c>, x@y.z", "--gmail-endpoint", "http://127.0.0.1:1"}, &out, &errb); code == 0 {
		t.Errorf("several recipients accepted")
	}
}

func TestSelftestSandboxRuns(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runSelftest(context.Background(), nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "EMULATOR RESULT") {
		t.Errorf("sandbox self-test does not say it is an emulator result")
	}
}
