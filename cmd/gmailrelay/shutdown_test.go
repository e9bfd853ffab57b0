package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
)

// startTestRelay starts a relay on an OS-chosen port with its log in a
// temporary file (sandbox unless args say otherwise); args come after
// those flags, so they win. The caller closes it.
func startTestRelay(t *testing.T, args ...string) *relayServer {
	t.Helper()
	base := []string{"--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "r.db")}
	c, err := parseServeFlags(append(base, args...), env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := startRelay(context.Background(), c, newLogger(io.Discard, "json", "info"))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestShutdownOrder: close stops accepting first, then the background
// loops that can start a Gmail call (sweeper, outbox, retention), then
// waits for the calls in flight, and closes the log last. Each step is
// checked against the real state at the moment the next one starts: the
// listener refuses before the sweeper stops, and the log still answers
// before it is closed. Reversing any pair fails the test.
func TestShutdownOrder(t *testing.T) {
	rs := startTestRelay(t)
	var got []string
	var problems []string
	rs.onShutdownStep = func(step string) {
		got = append(got, step)
		switch step {
		case stepSweeper:
			// Accepting must have stopped: a new request finds no server.
			resp, err := http.Get(rs.URL + "/healthz")
			if err == nil {
				resp.Body.Close()
				problems = append(problems, "the relay still answered HTTP when the sweeper was stopped")
			}
		case stepLog:
			if _, err := rs.log.Stats(context.Background()); err != nil {
				problems = append(problems, "the log was closed before its own step: "+err.Error())
			}
		}
	}
	if err := rs.close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	want := []string{stepHTTP, stepSweeper, stepOutbox, stepRetention, stepSendAs, stepLogWatch, stepInflight, stepEmulator, stepLog}
	if !slices.Equal(got, want) {
		t.Errorf("shutdown steps ran as %q, want %q", got, want)
	}
	// The pairs that make it safe, stated one by one.
	before := func(a, b string) {
		ia, ib := slices.Index(got, a), slices.Index(got, b)
		if ia < 0 || ib < 0 || ia > ib {
			t.Errorf("%q must run before %q (ran: %q)", a, b, got)
		}
	}
	before(stepHTTP, stepInflight)
	for _, loop := range []string{stepSweeper, stepOutbox, stepRetention, stepSendAs, stepLogWatch} {
		before(stepHTTP, loop)
		before(loop, stepInflight) // no resend may Add to the WaitGroup while Wait runs
	}
	before(stepInflight, stepLog) // every Gmail call in flight is recorded before the log closes
	for _, p := range problems {
		t.Error(p)
	}
	if _, err := rs.log.Stats(context.Background()); err == nil {
		t.Error("the log still answers after close")
	}
}

// failingClose is a log whose Close fails after closing the real one.
type failingClose struct{ gmailrelay.Store }

func (f failingClose) Close() error {
	_ = f.Store.Close()
	return errors.New("disk on fire")
}

// TestShutdownReportsTheLogsCloseError: a failing Close of the log is
// returned by close and turns serve's exit code to 1.
func TestShutdownReportsTheLogsCloseError(t *testing.T) {
	rs := startTestRelay(t)
	rs.log = failingClose{rs.log}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // serve stops at once
	var stderr bytes.Buffer
	if code := serveUntil(ctx, rs, newLogger(io.Discard, "json", "info"), &stderr); code != 1 {
		t.Errorf("exit %d after the log's Close failed, want 1", code)
	}
	if !strings.Contains(stderr.String(), "close the acceptance log: disk on fire") {
		t.Errorf("stderr %q does not report the log's Close error", stderr.String())
	}
}

// TestServeExitsNonZeroWhenItsServerDies: the listener closed underneath
// the HTTP server ends serve with exit 1 (and a clean shutdown), while a
// requested stop exits 0.
func TestServeExitsNonZeroWhenItsServerDies(t *testing.T) {
	t.Run("listener closed underneath", func(t *testing.T) {
		rs := startTestRelay(t)
		if err := rs.listener.Close(); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		if code := serveUntil(context.Background(), rs, newLogger(io.Discard, "json", "info"), &stderr); code != 1 {
			t.Errorf("exit %d after the HTTP server died, want 1", code)
		}
		if !strings.Contains(stderr.String(), "http server stopped") {
			t.Errorf("stderr %q does not say the server stopped", stderr.String())
		}
		if _, err := rs.log.Stats(context.Background()); err == nil {
			t.Error("the log was not closed by the shutdown that followed")
		}
	})
	t.Run("requested stop", func(t *testing.T) {
		rs := startTestRelay(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var stderr bytes.Buffer
		if code := serveUntil(ctx, rs, newLogger(io.Discard, "json", "info"), &stderr); code != 0 {
			t.Errorf("exit %d after a clean stop, want 0 (stderr %q)", code, stderr.String())
		}
	})
}
