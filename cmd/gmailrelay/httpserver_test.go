package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// With no ReadTimeout and no IdleTimeout, sockets sending a body one byte
// at a time, and idle keep-alives, would stay open indefinitely
// (docs/operations.md#security-model).

// The server startRelay runs has every timeout set, not only
// ReadHeaderTimeout, and a slow Gmail never cuts an answer.
func TestServeSetsEveryTimeout(t *testing.T) {
	rs := startTestRelay(t, "--send-timeout", "45s")
	defer rs.close(context.Background())
	srv := rs.http
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Fatalf("timeouts: header %s, read %s, write %s, idle %s; want all set",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	// The body, a send and the Message-ID read-back each taking their
	// whole deadline still leave time to answer.
	if srv.WriteTimeout < srv.ReadTimeout+2*45*time.Second {
		t.Errorf("WriteTimeout %s does not cover the body (%s) and two Gmail calls of 45s", srv.WriteTimeout, srv.ReadTimeout)
	}
}

// serveWith serves h with the given timeouts on a loopback port.
func serveWith(t *testing.T, h http.Handler, to httpTimeouts) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(h, to)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// wantClosedByServer reads until the server ends the connection; the
// deadline only bounds a failing test.
func wantClosedByServer(t *testing.T, conn net.Conn, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: the server kept the connection open", what)
	}
}

// The server newHTTPServer builds, with short timeouts, closes a body sent
// one byte at a time and an idle keep-alive connection.
func TestSlowBodyAndIdleConnectionsAreClosed(t *testing.T) {
	read := func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}
	addr := serveWith(t, http.HandlerFunc(read), httpTimeouts{ReadHeader: 5 * time.Second, Read: 300 * time.Millisecond,
		Write: 5 * time.Second, Idle: 300 * time.Millisecond})

	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_, _ = io.WriteString(slow, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
	wantClosedByServer(t, slow, "a body sent one byte at a time")

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_, _ = io.WriteString(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	rd := bufio.NewReader(idle)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	wantClosedByServer(t, idle, "an idle keep-alive connection")
}

func TestServeMaxInflightBytesFlagAndEnvTwin(t *testing.T) {
	c, err := parseServeFlags(nil, env(map[string]string{"GMAILRELAY_MAX_INFLIGHT_BYTES": "2097152"}), io.Discard)
	if err != nil || c.MaxInflightBytes != 2<<20 {
		t.Fatalf("env twin: %d, %v", c.MaxInflightBytes, err)
	}
	c, err = parseServeFlags([]string{"--max-inflight-bytes", "3145728"}, env(map[string]string{"GMAILRELAY_MAX_INFLIGHT_BYTES": "2097152"}), io.Discard)
	if err != nil || c.MaxInflightBytes != 3<<20 {
		t.Fatalf("flag over env: %d, %v", c.MaxInflightBytes, err)
	}
	if _, err := parseServeFlags([]string{"--max-inflight-bytes", "1000"}, env(nil), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "max-inflight-bytes") {
		t.Fatalf("1000 bytes: %v, want an error naming the flag", err)
	}
}

func TestServeMinBodyRateFlagAndEnvTwin(t *testing.T) {
	c, err := parseServeFlags(nil, env(nil), io.Discard)
	if err != nil || c.MinBodyRate != 16<<10 || c.minBodyRate() != 16<<10 {
		t.Fatalf("default: %d, %v; want 16384", c.MinBodyRate, err)
	}
	c, err = parseServeFlags(nil, env(map[string]string{"GMAILRELAY_MIN_BODY_RATE": "0"}), io.Discard)
	if err != nil || c.minBodyRate() >= 0 {
		t.Fatalf("env twin 0: %d, %v; want no minimum", c.minBodyRate(), err)
	}
	c, err = parseServeFlags([]string{"--min-body-rate", "4096"}, env(map[string]string{"GMAILRELAY_MIN_BODY_RATE": "0"}), io.Discard)
	if err != nil || c.minBodyRate() != 4096 {
		t.Fatalf("flag over env: %d, %v", c.minBodyRate(), err)
	}
	if _, err := parseServeFlags([]string{"--min-body-rate", "-1"}, env(nil), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "min-body-rate") {
		t.Fatalf("-1: %v, want an error naming the flag", err)
	}
}
