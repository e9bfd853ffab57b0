package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// demoRow is one line of the demo's table.
type demoRow struct {
	Mode     string
	Caller   string // what the caller saw
	Log      string // what the acceptance log says
	Emulator int    // deliveries of the job at the emulator (ground truth, not copies)
	Effects  int    // effect lines in the log
	OK       bool
	Why      string
}

// demo runs the relay in-process against the embedded emulator, with a
// manual clock so the sweeper's grace windows pass instantly.
type demo struct {
	ctx    context.Context
	cfg    serveConfig
	logger zerolog.Logger
	clock  *testclock.Clock
	emu    *gmailfake.Server
	rs     *relayServer
	client *http.Client
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", stderr, "")
	verbose := fs.Bool("v", false, "show the relay's logs")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	dir, err := os.MkdirTemp("", "gmailrelay-demo-")
	if err != nil {
		fmt.Fprintf(stderr, "gmailrelay demo: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	logger := zerolog.Nop()
	if *verbose {
		logger = newLogger(stderr, "console", "info")
	}
	d := &demo{ctx: ctx, logger: logger, clock: testclock.At(time.Now()), client: &http.Client{Timeout: 30 * time.Second}}
	d.emu = gmailfake.New(gmailfake.Options{Now: d.clock.Now, IndexLag: 30 * time.Second})
	pol := policy.Default()
	pol.MsgIDDomain = "demo.gmailrelay.local"
	pol.Channels["default"] = policy.Channel{Name: "default", OnUnknown: policy.Retry, Grace: time.Minute, Checks: 2, MaxAttempts: 3}
	pol.Channels["billing"] = policy.Channel{Name: "billing", OnUnknown: policy.Review, Grace: time.Minute, Checks: 1, MaxAttempts: 1}
	d.cfg = serveConfig{Addr: "127.0.0.1:0", Data: filepath.Join(dir, "demo.db"), Mailbox: "me", Sandbox: true,
		Clock: "manual", QuotaPerMinute: 6000, SweepInterval: time.Hour, SendTimeout: 30 * time.Second,
		policy: pol, clock: d.clock, emulator: d.emu}
	if err := d.start(nil); err != nil {
		fmt.Fprintf(stderr, "gmailrelay demo: %v\n", err)
		return 1
	}
	defer func() { d.rs.close(context.Background()) }()

	fmt.Fprintln(stdout, "gmailrelay demo — EMULATOR RESULTS (the embedded Gmail emulator, not Gmail: a green run is not a Gmail guarantee)")
	fmt.Fprintln(stdout)
	rows := []demoRow{
		d.faultRow("fail-before-forward", "fail-before-forward", "demo:fail-before-forward", "", true, gmailrelay.StateSent, 1),
		d.faultRow("forward-then-drop-response", "forward-then-drop-response", "demo:forward-then-drop-response", "", true, gmailrelay.StateSent, 1),
		d.faultRow("forward-and-respond", "forward-and-respond", "demo:forward-and-respond", "", false, gmailrelay.StateSent, 1),
		d.faultRow("drop-response, review channel", "forward-then-drop-response", "demo:billing-drop", "billing", true, gmailrelay.StateReview, 1),
		d.rowCrashAndRecover(),
		d.rowTrashedCopy(),
		d.rowLagTail(),
		d.rowRewrittenID(), // last: it leaves the mailbox untrusted
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODE\tCALLER SAW\tLOG SAYS\tDELIVERIES\tEFFECT LINES\tVERDICT")
	failed := 0
	for _, r := range rows {
		verdict := "PASS"
		if !r.OK {
			verdict, failed = "FAIL: "+r.Why, failed+1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", r.Mode, r.Caller, r.Log, r.Emulator, r.Effects, verdict)
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	if failed > 0 {
		fmt.Fprintf(stdout, "%d of %d invariants FAILED\n", failed, len(rows))
		return 1
	}
	fmt.Fprintf(stdout, "all %d invariants held (emulator results)\n", len(rows))
	return 0
}

func (d *demo) start(crashPoint func(string)) error {
	c := d.cfg
	c.crashPoint = crashPoint
	rs, err := startRelay(d.ctx, c, d.logger)
	if err != nil {
		return err
	}
	d.rs = rs
	return nil
}

// restart closes the relay (as after a crash: in-flight work is not
// recorded) and starts a new one on the same log file.
func (d *demo) restart() error {
	d.rs.close(context.Background())
	return d.start(nil)
}

type demoAnswer struct {
	status int    // 0: no HTTP answer (connection cut)
	state  string // the state in a 2xx body
}

func (a demoAnswer) String() string {
	if a.status == 0 {
		return "connection cut"
	}
	if a.state != "" {
		return fmt.Sprintf("%d %s", a.status, a.state)
	}
	return fmt.Sprint(a.status)
}

func (d *demo) send(key, channel string) demoAnswer {
	body, _ := json.Marshal(map[string]string{"key": key, "to": "customer@example.org", "subject": "Your order shipped",
		"body": "It is on its way.", "channel": channel})
	resp, err := d.client.Post(d.rs.URL+"/v1/send", "application/json", bytes.NewReader(body))
	if err != nil {
		return demoAnswer{}
	}
	defer resp.Body.Close()
	var out struct {
		State string `json:"state"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return demoAnswer{status: resp.StatusCode, state: out.State}
}

func (d *demo) admin(method, path string, body any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(d.ctx, method, d.rs.URL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// settle moves time past several grace windows, sweeping after each.
func (d *demo) settle() {
	for range 4 {
		d.clock.Advance(61 * time.Second)
		_ = d.admin("POST", "/admin/sweep", nil)
	}
}

// outcome reads the job from the log and the emulator's deliveries (what
// the recipients received: folded and rewritten sends included).
func (d *demo) outcome(key string) (gmailrelay.Job, []gmailrelay.Line, int) {
	id := d.cfg.ids().MessageID(key)
	j, _ := d.rs.log.Get(d.ctx, id)
	lines, _ := d.rs.log.JobLines(d.ctx, id)
	return j, lines, d.emu.Deliveries(id)
}

// describe renders the job's state with where each effect came from, and
// counts its effect lines.
func describe(j gmailrelay.Job, lines []gmailrelay.Line) (string, int) {
	s, effects := string(j.State), 0
	for _, l := range lines {
		if l.Kind == gmailrelay.KindEffect {
			s += " (effect from " + l.Source + ")"
			effects++
		}
	}
	return s, effects
}

func (d *demo) row(mode, caller, key string, want gmailrelay.State, wantEffects int) demoRow {
	j, lines, n := d.outcome(key)
	r := demoRow{Mode: mode, Caller: caller, Emulator: n}
	r.Log, r.Effects = describe(j, lines)
	switch {
	case j.State != want:
		r.Why = fmt.Sprintf("state %s, want %s", j.State, want)
	case n != 1:
		r.Why = fmt.Sprintf("%d deliveries at the emulator, want exactly 1", n)
	case r.Effects != wantEffects:
		r.Why = fmt.Sprintf("%d effect lines, want %d", r.Effects, wantEffects)
	default:
		r.OK = true
	}
	return r
}

// faultRow runs one fault-mode scenario: a rule for the key, a send, the
// caller's retry when retry is set, then time passes and the sweeper runs.
func (d *demo) faultRow(label, mode, key, channel string, retry bool, want gmailrelay.State, wantEffects int) demoRow {
	rule := map[string]any{"mode": mode, "key": key}
	if mode != "forward-and-respond" {
		rule["count"] = 1
	}
	if err := d.admin("POST", "/admin/faults", rule); err != nil {
		return demoRow{Mode: label, Why: err.Error()}
	}
	caller := d.send(key, channel).String()
	if retry {
		caller += ", retry " + d.send(key, channel).String()
	}
	d.settle()
	return d.row(label, caller, key, want, wantEffects)
}

func (d *demo) rowCrashAndRecover() demoRow {
	const key = "demo:crash-after-gmail-accepted"
	mode := "crash after Gmail accepted + restart"
	d.rs.close(context.Background())
	// Simulated in-process crash: the send path stops right after Gmail's
	// answer, before anything is recorded, and the caller's connection dies.
	if err := d.start(func(point string) {
		if point == relay.CrashAfterGmailAnswer {
			panic(http.ErrAbortHandler)
		}
	}); err != nil {
		return demoRow{Mode: mode, Why: err.Error()}
	}
	first := d.send(key, "")
	if err := d.restart(); err != nil {
		return demoRow{Mode: mode, Why: err.Error()}
	}
	d.settle()
	return d.row(mode, first.String(), key, gmailrelay.StateSent, 1)
}

// rowTrashedCopy: Gmail accepted, the response was dropped, and a user
// trashed the Sent copy before the sweep; the search (includeSpamTrash)
// still finds it: sent, not resent.
func (d *demo) rowTrashedCopy() demoRow {
	const key = "demo:trashed-sent-copy"
	mode := "drop-response, user trashes the Sent copy"
	if err := d.admin("POST", "/admin/faults", map[string]any{"mode": "forward-then-drop-response", "key": key, "count": 1}); err != nil {
		return demoRow{Mode: mode, Why: err.Error()}
	}
	caller := d.send(key, "").String()
	for _, m := range d.emu.Messages(d.cfg.ids().MessageID(key)) {
		if err := d.emu.Trash(m.ID); err != nil {
			return demoRow{Mode: mode, Why: err.Error()}
		}
	}
	d.settle()
	return d.row(mode, caller, key, gmailrelay.StateSent, 1)
}

// rowLagTail: the response is dropped and Gmail takes 10 minutes to index
// the message, far past checks × grace (2m); a later send of the mailbox
// is the witness the miss needs, and it is not searchable before the
// first one either (an index in order), so no miss counts and nothing is
// resent until the message shows.
func (d *demo) rowLagTail() demoRow {
	const key = "demo:lag-tail"
	mode := "drop-response, 10m index lag"
	d.emu.SetIndexLag(10 * time.Minute)
	defer d.emu.SetIndexLag(30 * time.Second)
	if err := d.admin("POST", "/admin/faults", map[string]any{"mode": "forward-then-drop-response", "key": key, "count": 1}); err != nil {
		return demoRow{Mode: mode, Why: err.Error()}
	}
	caller := d.send(key, "").String()
	d.clock.Advance(time.Second)
	d.send("demo:lag-tail-witness", "")
	for range 4 {
		d.settle()
	}
	return d.row(mode, caller, key, gmailrelay.StateSent, 1)
}

// rowRewrittenID: Gmail replaces the Message-ID of a send after the
// one-time read-back; the verify pass finds no hit, reads the message
// back (one messages.get), writes a handle line "rewritten" and marks the
// mailbox untrusted. The job stays sent, delivered once.
func (d *demo) rowRewrittenID() demoRow {
	const key = "demo:rewritten-id"
	mode := "Gmail rewrites the Message-ID"
	d.emu.SetRewrite(gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways})
	caller := d.send(key, "").String()
	d.emu.SetRewrite(gmailfake.RewritePolicy{})
	d.settle()
	r := d.row(mode, caller, key, gmailrelay.StateSent, 1)
	_, lines, _ := d.outcome(key)
	rewritten := false
	for _, l := range lines {
		if l.Kind == gmailrelay.KindHandle && l.Reason == gmailrelay.ReasonHandleRewritten {
			rewritten = true
		}
	}
	mb, err := d.rs.log.Mailbox(d.ctx, policy.DefaultMailbox)
	switch {
	case !rewritten:
		r.OK, r.Why = false, "no handle line \"rewritten\""
	case err != nil || !mb.HandleUntrusted:
		r.OK, r.Why = false, "the mailbox is still trusted"
	}
	if r.OK {
		r.Log += ", handle rewritten, mailbox untrusted"
	}
	return r
}
