package e2e_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

// The binaries under test, built at most once per `go test` run into a
// temporary directory by TestMain's helpers. They are plain builds (not
// -race): the race detector covers this package's own code, and the relay's
// packages have their own -race tests.
type binaries struct {
	good   func() (string, error)
	broken func() (string, error)
}

// bins is set once by TestMain before any test runs and never changed.
var bins binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gmailrelay-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		os.Exit(1)
	}
	bins = binaries{
		good: sync.OnceValues(func() (string, error) { return buildRelay(filepath.Join(dir, "gmailrelay")) }),
		broken: sync.OnceValues(func() (string, error) {
			return buildRelay(filepath.Join(dir, "gmailrelay-broken"), "gmailrelay_broken")
		}),
	}
	// pgtest.Run starts the throwaway PostgreSQL the replica tests ask for
	// and stops it after them.
	code := pgtest.Run(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// buildRelay builds cmd/gmailrelay to out, with build tags.
func buildRelay(out string, tags ...string) (string, error) {
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "github.com/gmailrelay/gmailrelay/cmd/gmailrelay")
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// Test policy: a short grace so that sweeps need little clock movement.
const (
	msgidDomain = "e2e.example.com"
	grace       = time.Minute
	apiToken    = "e2e-api-token-0123456789"
	adminToken  = "e2e-admin-token-0123456789"
	testPolicy  = `msgid_domain: ` + msgidDomain + `
verify_handle: first
# The soak makes thousands of attempts in emulated minutes: the daily
# budget (default 2000) is tested by the outbox's own tests.
mailboxes:
  default: {daily_send_limit: 1000000}
channels:
  default: {on_unknown: retry, grace: 1m, checks: 2, max_attempts: 3}
  billing: {on_unknown: review, grace: 1m, checks: 1}
`
)

// reviewChannels returns the test policy's on_unknown: review channels.
func reviewChannels() map[string]bool { return map[string]bool{"billing": true} }

// relayOptions configures startRelay.
type relayOptions struct {
	binary   string        // "" = the good build
	crashAt  string        // GMAILRELAY_CRASH_AT for the first process only
	indexLag time.Duration // the emulator's search index lag
	seed     int64         // --fault-seed (0: 1)
	timeout  time.Duration // --send-timeout (0: 5s)
	quota    int           // --quota-per-minute (0: 10,000,000)
	// history turns serve's history tail on; off (--history=false), the
	// sweeper answers through searches only, the path these tests pin.
	history bool
	// gmail, when set, edits the emulator's options before it starts (the
	// realism soak's Gmail-like behaviours).
	gmail func(*gmailfake.Options)
}

// relayProc is a gmailrelay serve subprocess against an in-process Gmail
// emulator whose clock the test holds. Both clocks move together through
// advance; a restarted process gets the same data file and is brought to
// the same clock reading.
type relayProc struct {
	t      testing.TB
	bin    string
	args   []string
	Emu    *gmailfake.Server
	clock  *testclock.Clock
	client *http.Client
	out    *testenv.LockedBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
	starts int
}

// startRelay starts the emulator and the relay, and registers cleanup
// that kills the relay and prints its output if the test failed.
func startRelay(t testing.TB, o relayOptions) *relayProc {
	t.Helper()
	bin := o.binary
	if bin == "" {
		var err error
		if bin, err = bins.good(); err != nil {
			t.Fatalf("build gmailrelay: %v", err)
		}
	}
	clock := testclock.At(time.Now())
	emuOpts := gmailfake.Options{Now: clock.Now, IndexLag: o.indexLag, QuotaPerMinute: 10_000_000}
	if o.gmail != nil {
		o.gmail(&emuOpts)
	}
	emu, emuURL := gmailfake.NewTestServer(t, emuOpts)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(testPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	seed := o.seed
	if seed == 0 {
		seed = 1
	}
	timeout := o.timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	quota := "10000000"
	if o.quota > 0 {
		quota = fmt.Sprint(o.quota)
	}
	r := &relayProc{
		t: t, bin: bin, Emu: emu, clock: clock, out: &testenv.LockedBuffer{},
		client: &http.Client{Timeout: timeout + 10*time.Second},
		args: []string{"serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "relay.db"),
			"--gmail-endpoint", emuURL, "--policy", pol, "--api-token", apiToken, "--admin-token", adminToken,
			"--allow-crash-faults", "--fault-seed", fmt.Sprint(seed), "--sweep-interval", "1h",
			"--clock", "manual", "--send-timeout", timeout.String(), "--quota-per-minute", quota,
			fmt.Sprintf("--history=%t", o.history)},
	}
	t.Cleanup(func() {
		r.Kill()
		if t.Failed() {
			t.Logf("relay output (last 64 KiB):\n%s", r.out.Tail(64<<10))
		}
	})
	if err := r.start(o.crashAt); err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs a new relay process on the data file and waits until it
// listens, its clock starting at the test's reading.
func (r *relayProc) start(crashAt string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	// The new process's manual clock starts at the test's reading, so
	// recovery at start already sees the right time.
	args := append(append([]string(nil), r.args...), "--clock-start", r.clock.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(r.bin, args...)
	cmd.Env = relayEnv(crashAt)
	listening := make(chan string, 1)
	cmd.Stdout = &lineWatcher{w: r.out, prefix: fmt.Sprintf("[%d out] ", r.starts), found: listening}
	cmd.Stderr = &lineWatcher{w: r.out, prefix: fmt.Sprintf("[%d err] ", r.starts)}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start relay: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	r.cmd, r.exited, r.url = cmd, exited, ""
	select {
	case u := <-listening:
		r.url = u
	case <-exited:
		return fmt.Errorf("relay exited before listening (%v)", cmd.ProcessState)
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return errors.New("relay did not print its listening line within 30s")
	}
	return nil
}

// relayEnv is this process's environment without GMAILRELAY_* twins (they
// would override the test's flags), plus the crash point.
func relayEnv(crashAt string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GMAILRELAY_") {
			env = append(env, kv)
		}
	}
	if crashAt != "" {
		env = append(env, "GMAILRELAY_CRASH_AT="+crashAt)
	}
	return env
}

// URL is the running process's base URL ("" while none runs).
func (r *relayProc) URL() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.url
}

// Exited is closed when the current process has exited.
func (r *relayProc) Exited() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exited
}

// Kill SIGKILLs the current process and waits for it to exit; it reports
// whether the process was still running.
func (r *relayProc) Kill() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false
	}
	running := true
	select {
	case <-r.exited:
		running = false
	default:
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
	r.url = ""
	return running
}

// WaitExit waits (bounded) for the process to exit by itself, as a crash
// point makes it, and checks that it died of SIGKILL.
func (r *relayProc) WaitExit(t testing.TB) {
	t.Helper()
	select {
	case <-r.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not crash within 30s")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ws, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("relay exited with %v, want killed by SIGKILL", r.cmd.ProcessState)
	}
	r.url = ""
	// A crash point fires in the send path, with the log open: the kill
	// must leave the data file alone in its directory (the log keeps no
	// journal or other file beside it), and `gmailrelay check` must find
	// every invariant holding.
	r.wantDataFileAlone(t)
	r.checkDataLocked(t)
}

// wantDataFileAlone fails unless the data file's directory holds the data
// file and nothing else of the log's (no -journal, .new or .replay file;
// the test's policy file is its own).
func (r *relayProc) wantDataFileAlone(t testing.TB) {
	t.Helper()
	data := r.dataFile()
	entries, err := os.ReadDir(filepath.Dir(data))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != "policy.yaml" {
			names = append(names, e.Name())
		}
	}
	if len(names) != 1 || names[0] != filepath.Base(data) {
		t.Fatalf("beside the policy, the data directory holds %v, want %s alone", names, filepath.Base(data))
	}
}

// dataFile is the relay's --data file ("" when it has none).
func (r *relayProc) dataFile() string {
	for i, a := range r.args {
		if a == "--data" && i+1 < len(r.args) {
			return r.args[i+1]
		}
	}
	return ""
}

// checkData runs `gmailrelay check` on the data file of the killed
// process: the log must hold every invariant after any kill.
func (r *relayProc) checkData(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkDataLocked(t)
}

func (r *relayProc) checkDataLocked(t testing.TB) {
	t.Helper()
	data := r.dataFile()
	if data == "" {
		return
	}
	if _, err := os.Stat(data); err != nil {
		return // killed before the log was created
	}
	out, err := exec.Command(r.bin, "check", "--data", data).CombinedOutput()
	if err != nil {
		t.Fatalf("gmailrelay check after a kill: %v\n%s", err, out)
	}
}

// Restart kills the process if it runs and starts a new one on the same
// data file, with no crash point armed.
func (r *relayProc) Restart(t testing.TB) {
	t.Helper()
	r.Kill()
	r.checkData(t)
	if err := r.start(""); err != nil {
		t.Fatal(err)
	}
}

// lineWatcher copies a process's output to w, line by line with a prefix,
// and sends the URL of the first "gmailrelay listening on" line to found.
type lineWatcher struct {
	w       io.Writer
	prefix  string
	found   chan<- string
	partial []byte
}

const listeningPrefix = "gmailrelay listening on "

func (l *lineWatcher) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		_, _ = io.WriteString(l.w, l.prefix+line+"\n")
		if u, ok := strings.CutPrefix(line, listeningPrefix); ok && l.found != nil {
			l.found <- strings.TrimSpace(u)
			l.found = nil
		}
	}
}
