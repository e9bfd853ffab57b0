package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// Without a bound on the request bytes in flight, three 24 MB sends at
// once take the process from 26 to 641 MB. This runs the real binary
// (built without -race, whose shadow memory would swamp the figure) against
// the emulator, sends 16 messages of 24 MB at once, and reads the relay
// process's own peak resident set (VmHWM in /proc/<pid>/status) once they
// are all answered: no timing is asserted, only memory and outcomes.
func TestEmulatorRSSUnder16LargeSends(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and moves 400 MB")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc (Linux)")
	}
	const (
		sends   = 16
		size    = 24 << 20
		ceiling = 200 << 20
	)
	bin := filepath.Join(t.TempDir(), "gmailrelay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{SendAs: []gmailfake.Alias{{Address: "s@mem.example"}}})
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "r.db"),
		"--gmail-endpoint", emuURL, "--log-level", "warn", "--sweep-interval", "1h")
	cmd.Env = append(os.Environ(), "GMAILRELAY_API_TOKEN=", "GMAILRELAY_ADMIN_TOKEN=", "GMAILRELAY_MAX_INFLIGHT_BYTES=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("relay stderr:\n%s", stderr.String())
		}
	})
	url := ""
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "gmailrelay listening on "); ok {
			url = u
			break
		}
	}
	if url == "" {
		t.Fatalf("the relay never said where it listens:\n%s", stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	base := hwm(t, cmd.Process.Pid)

	body := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-\r\n"), size/66)
	statuses := make([]int, sends)
	var wg sync.WaitGroup
	for i := range sends {
		wg.Go(func() {
			raw := fmt.Sprintf("Message-ID: <big-%d@mem.example>\r\nFrom: s@mem.example\r\nTo: a@mem.example\r\nSubject: big %d\r\n\r\n", i, i)
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/send", io.MultiReader(strings.NewReader(raw), bytes.NewReader(body)))
			req.ContentLength = int64(len(raw) + len(body))
			req.Header.Set("Content-Type", "message/rfc822")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	peak := hwm(t, cmd.Process.Pid)
	served := 0
	for i, st := range statuses {
		id := fmt.Sprintf("<big-%d@mem.example>", i)
		switch st {
		case http.StatusOK:
			served++
			if d := emu.Deliveries(id); d != 1 {
				t.Errorf("send %d answered 200 but the emulator counts %d deliveries", i, d)
			}
		case http.StatusServiceUnavailable:
			if d := emu.Deliveries(id); d != 0 {
				t.Errorf("send %d refused 503 but the emulator counts %d deliveries", i, d)
			}
		default:
			t.Errorf("send %d: status %d, want 200 (served) or 503 (refused)", i, st)
		}
	}
	t.Logf("emulator results: %d of %d sends of %d MB served, %d refused 503; relay VmHWM %d MB at start, %d MB after",
		served, sends, size>>20, sends-served, base>>20, peak>>20)
	if served == 0 {
		t.Error("no send was served")
	}
	if peak >= ceiling {
		t.Errorf("the relay's peak resident set is %d MB, want under %d MB", peak>>20, ceiling>>20)
	}
}

// hwm reads a process's peak resident set size in bytes.
func hwm(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM line")
	return 0
}
