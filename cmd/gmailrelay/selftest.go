package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/mail"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

// selftestOptions configure one self-test run. now and sleep let tests
// run it on a manual clock.
type selftestOptions struct {
	To          string
	Gmail       gmailapi.Config
	Mailbox     string
	MsgIDDomain string
	Window      time.Duration // how long to wait for the message to be found
	Poll        time.Duration // time between searches (also the sweeper's grace)
	Label       string        // "Gmail" or "the Gmail emulator", for the report
	now         func() time.Time
	sleep       func(ctx context.Context, d time.Duration) error
}

// selftestReport is what a run found.
type selftestReport struct {
	MessageID   string
	Found       bool
	IndexLag    time.Duration // from the send to the search that found it
	Searches    int
	HandleKept  *bool // nil: not determined
	QuotaUnits  int64
	FinalState  gmailrelay.State
	Verdict     string
	Trustworthy bool
}

func runSelftest(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("selftest", stderr, "")
	live := fs.Bool("live", false, "run against a real mailbox (needs --to and credentials), not the embedded emulator")
	to := fs.String("to", "", "the mailbox's OWN address: the only recipient the self-test ever sends to")
	creds := fs.String("credentials", "", "Google credentials JSON (default: the token `gmailrelay auth` stored)")
	subject := fs.String("subject", "", "user a service account acts for")
	endpoint := fs.String("gmail-endpoint", "", "base URL of a Gmail-compatible API (e.g. a running `gmailrelay fakegmail`)")
	domain := fs.String("msgid-domain", "selftest.gmailrelay.local", "domain part of the test Message-ID")
	window := fs.Duration("window", 30*time.Minute, "how long to wait for Gmail's search to find the message")
	poll := fs.Duration("poll", 30*time.Second, "time between searches")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	o := selftestOptions{To: *to, MsgIDDomain: *domain, Window: *window, Poll: *poll, Mailbox: "me"}
	if *window <= 0 || *poll <= 0 || *poll > *window {
		fmt.Fprintln(stderr, "gmailrelay selftest: --window and --poll must be positive, with --poll <= --window")
		return 2
	}
	if err := relay.ValidDomain(*domain); err != nil {
		fmt.Fprintf(stderr, "gmailrelay selftest: --msgid-domain: %v\n", err)
		return 2
	}
	if err := validEndpoint(*endpoint); err != nil {
		fmt.Fprintf(stderr, "gmailrelay selftest: %v\n", err)
		return 2
	}
	if !*live {
		// Sandbox: the embedded emulator, on a manual clock with a 90s index lag.
		clock := testclock.At(time.Now())
		emu := gmailfake.New(gmailfake.Options{Now: clock.Now, IndexLag: 90 * time.Second})
		url, stop, err := serveEmulator(emu)
		if err != nil {
			fmt.Fprintf(stderr, "gmailrelay selftest: %v\n", err)
			return 1
		}
		defer stop()
		if o.To == "" {
			o.To = gmailfake.DefaultAccount
		}
		o.Gmail, o.Label, o.now = gmailapi.Config{Endpoint: url, Now: clock.Now}, "the embedded Gmail emulator (EMULATOR RESULT, not Gmail)", clock.Now
		o.sleep = func(_ context.Context, d time.Duration) error { clock.Advance(d); return nil }
		o.Window, o.Poll = 10*time.Minute, 30*time.Second
	} else {
		if o.To == "" {
			fmt.Fprintln(stderr, "gmailrelay selftest --live: --to <your own address> is required")
			return 2
		}
		o.Gmail = gmailapi.Config{Endpoint: *endpoint, Subject: *subject}
		o.Label = "Gmail"
		if *endpoint != "" {
			o.Label = "the Gmail-compatible API at " + *endpoint
		}
		if *creds == "" && *endpoint == "" {
			*creds = defaultTokenPath()
		}
		if *creds != "" {
			data, err := os.ReadFile(*creds)
			if err != nil {
				fmt.Fprintf(stderr, "gmailrelay selftest: --credentials: %v (run `gmailrelay auth` first)\n", err)
				return 2
			}
			o.Gmail.CredentialsJSON = data
		}
		if *subject != "" {
			o.Mailbox = *subject
		}
	}
	rep, err := selftest(ctx, o, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay selftest: %v\n", err)
		return 1
	}
	if !rep.Trustworthy {
		return 1
	}
	return 0
}

// selftest sends one message to o.To with its response dropped, then runs
// the sweeper until the message is found by Message-ID or the window ends.
// When it is not found, a second message (a normal send) is read back to
// tell whether the provider replaced the Message-ID.
func selftest(ctx context.Context, o selftestOptions, w io.Writer) (selftestReport, error) {
	var rep selftestReport
	addr, err := mail.ParseAddress(o.To)
	if err != nil || addr.Name != "" {
		return rep, fmt.Errorf("--to %q: one plain address is required (the mailbox's own)", o.To)
	}
	o.setDefaults()
	dir, err := os.MkdirTemp("", "gmailrelay-selftest-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	lg, err := acceptlog.Open(filepath.Join(dir, "selftest.db"), acceptlog.Options{Now: o.now})
	if err != nil {
		return rep, err
	}
	defer lg.Close()
	st, err := newSelftestStack(ctx, o, lg, addr.Address)
	if err != nil {
		return rep, err
	}

	fmt.Fprintf(w, "gmailrelay self-test against %s, mailbox %s, sending only to %s\n", o.Label, o.Mailbox, addr.Address)
	if err := st.sendAmbiguous(ctx, w, &rep); err != nil {
		return rep, err
	}
	if rep.Found {
		kept := true
		rep.HandleKept = &kept
		fmt.Fprintf(w, "2. found by rfc822msgid: after ~%s and marked sent, without a resend\n", rep.IndexLag.Round(time.Second))
	} else {
		fmt.Fprintf(w, "2. NOT found by rfc822msgid: within %s (state %s)\n", o.Window, rep.FinalState)
		st.readBackHandle(ctx, w, &rep)
	}
	rep.QuotaUnits = st.quota.Spent()
	rep.judge()
	rep.print(w, o.Label)
	return rep, nil
}

// setDefaults fills in the real clock and a sleep that waits on it.
func (o *selftestOptions) setDefaults() {
	if o.now == nil {
		o.now = time.Now
	}
	if o.sleep == nil {
		o.sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
}

// selftestStack is the relay, sweeper and log one self-test run sends
// through, on a channel that never resends inside the window.
type selftestStack struct {
	o     selftestOptions
	to    string // the one recipient
	lg    *acceptlog.Log
	svc   *relay.Service
	sw    *sweeper.Sweeper
	quota *relay.Quota
	nonce string // makes this run's keys and subjects unique
}

func newSelftestStack(ctx context.Context, o selftestOptions, lg *acceptlog.Log, to string) (*selftestStack, error) {
	gm, err := gmailapi.New(ctx, o.Gmail)
	if err != nil {
		return nil, err
	}
	checks := int(o.Window/o.Poll) + 2 // never resend inside the window
	pol := &policy.Policy{MsgIDDomain: o.MsgIDDomain, VerifyHandle: policy.VerifyAlways, Channels: map[string]policy.Channel{
		"selftest": {Name: "selftest", OnUnknown: policy.Retry, Grace: o.Poll, Checks: checks, MaxAttempts: 1},
	}}
	quota := relay.NewQuota(6000, o.now)
	svc, err := relay.New(ctx, relay.Config{Log: lg, Provider: faultmodes.Wrap(gm, nil, nil), Policy: pol, UserID: o.Mailbox, Now: o.now,
		Logger: zerolog.Nop(), Quota: quota})
	if err != nil {
		return nil, err
	}
	sw := sweeper.New(sweeper.Config{Log: lg, Policy: pol, Mailboxes: svc, Attempter: svc, Now: o.now})
	nonce := o.now().UTC().Format("20060102T150405.000000000")
	return &selftestStack{o: o, to: to, lg: lg, svc: svc, sw: sw, quota: quota, nonce: nonce}, nil
}

// send sends one self-test message to the mailbox's own address.
func (st *selftestStack) send(ctx context.Context, key, subject string, fault faultmodes.Decision) (relay.Result, error) {
	p, err := relay.Prepare(relay.SendRequest{Key: key, To: relay.AddressList{st.to}, Channel: "selftest",
		Subject: subject, Text: "gmailrelay self-test. You can delete this message.\r\n"}, "", st.o.MsgIDDomain, st.o.now())
	if err != nil {
		return relay.Result{}, err
	}
	return st.svc.Send(faultmodes.WithForced(ctx, fault), p, relay.SendOptions{})
}

// sendAmbiguous sends a message whose response is dropped, then sweeps
// every o.Poll until the job leaves StateUnknown or o.Window ends, and
// records in rep what it found.
func (st *selftestStack) sendAmbiguous(ctx context.Context, w io.Writer, rep *selftestReport) error {
	o := st.o
	start := o.now()
	res, err := st.send(ctx, "selftest:ambiguous:"+st.nonce, "gmailrelay self-test (ambiguous send) "+st.nonce,
		faultmodes.Decision{RuleID: "selftest", Mode: faultmodes.ForwardThenDropResponse})
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	rep.MessageID = res.Job.MessageID
	fmt.Fprintf(w, "1. sent %s with forward-then-drop-response: the relay logged it %s\n", rep.MessageID, res.Job.State)
	for o.now().Sub(start) <= o.Window {
		if err := o.sleep(ctx, o.Poll); err != nil {
			return err
		}
		r, err := st.sw.RunOnce(ctx)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		rep.Searches += r.Checked
		j, err := st.lg.Get(ctx, rep.MessageID)
		if err != nil {
			return err
		}
		if j.State != gmailrelay.StateUnknown {
			rep.FinalState = j.State
			rep.Found = j.State == gmailrelay.StateSent
			rep.IndexLag = o.now().Sub(start)
			return nil
		}
		fmt.Fprintf(w, "   %s: not found yet (search index lag), checking again in %s\n", o.now().Sub(start).Round(time.Second), o.Poll)
	}
	return nil
}

// readBackHandle sends a normal message and records in rep whether the
// provider kept its Message-ID (left nil when that cannot be told).
func (st *selftestStack) readBackHandle(ctx context.Context, w io.Writer, rep *selftestReport) {
	res, err := st.send(ctx, "selftest:handle:"+st.nonce, "gmailrelay self-test (Message-ID check) "+st.nonce, faultmodes.Decision{})
	if err != nil || res.Job.State != gmailrelay.StateSent {
		return
	}
	lines, _ := st.lg.JobLines(ctx, res.Job.MessageID)
	for _, l := range lines {
		if l.Kind == gmailrelay.KindHandle && l.HandleKept != nil {
			rep.HandleKept = l.HandleKept
			fmt.Fprintf(w, "3. a normal send's Message-ID read back: ours %s, stored %s\n", res.Job.MessageID, l.StoredMessageID)
		}
	}
}

// judge sets the verdict from what the run found.
func (rep *selftestReport) judge() {
	switch {
	case rep.Found:
		rep.Trustworthy = true
		rep.Verdict = "PASS: the Message-ID survived and search found the ambiguous send; reconciliation works on this mailbox"
	case rep.HandleKept != nil && !*rep.HandleKept:
		rep.Verdict = "FAIL: the provider replaced our Message-ID; search cannot find ambiguous sends here. Use review channels (on_unknown: review)"
	default:
		rep.Verdict = "INCONCLUSIVE: not found within the window; the search index may be slower. Run again with a longer --window"
	}
}

// print writes the report's summary to w.
func (rep *selftestReport) print(w io.Writer, label string) {
	kept := "unknown"
	if rep.HandleKept != nil {
		kept = fmt.Sprint(*rep.HandleKept)
	}
	fmt.Fprintf(w, "\nreport (%s):\n  message id:       %s\n  message id kept:  %s\n  index lag:        %s\n  searches:         %d\n  quota units used: %d\n  verdict:          %s\n",
		label, rep.MessageID, kept, lagText(*rep), rep.Searches, rep.QuotaUnits, rep.Verdict)
}

func lagText(r selftestReport) string {
	if !r.Found {
		return "not found"
	}
	return "~" + r.IndexLag.Round(time.Second).String()
}

// serveEmulator serves emu on a loopback port and returns its URL and a
// stop function.
func serveEmulator(emu *gmailfake.Server) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen for the emulator: %w", err)
	}
	srv := &http.Server{Handler: emu.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}
