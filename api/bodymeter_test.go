package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/relay"
)

// bodyReads collects the running totals the relay reports for the bodies it
// reads (api.SetOnBodyRead).
type bodyReads chan int64

func newBodyReads() bodyReads { return make(chan int64, 1<<16) }

func (b bodyReads) hook(n int64) { b <- n }

// reached returns once some body's running total has been exactly n, count
// times: a body sent up to n bytes and then held has been read that far.
func (b bodyReads) reached(t *testing.T, n int64, count int) {
	t.Helper()
	deadline := time.After(10 * time.Second) // a deadline, not a wait
	for count > 0 {
		select {
		case got := <-b:
			if got == n {
				count--
			}
		case <-deadline:
			t.Fatalf("the relay never read %d bytes of a body (%d more bodies to go)", n, count)
		}
	}
}

// Two idle connections declaring 16 MiB bodies each used to hold the whole
// 32 MiB budget (by their Content-Length) for the server's 2-minute read
// timeout, so every send answered 503. The budget now counts the bytes a body
// has delivered: while both hold their connections open, an ordinary send is
// admitted and delivered (emulator ground truth).
func TestSlowDeclaredBodiesDoNotHoldTheBudget(t *testing.T) {
	reads := newBodyReads()
	e := newEnv(t, envOpts{bodyRead: reads.hook})
	const declared, sent = 16 << 20, 1 << 10
	for range 2 {
		conn, _ := e.rawConn(fmt.Sprintf("POST /v1/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: message/rfc822\r\nContent-Length: %d\r\n\r\n", apiToken, declared))
		if _, err := io.WriteString(conn, strings.Repeat("X", sent)); err != nil {
			t.Fatal(err)
		}
	}
	reads.reached(t, sent, 2)
	r := e.call(call{method: "POST", path: "/v1/send", token: apiToken, ct: "application/json", body: sendJSON("k-legit")})
	if r.status != http.StatusOK {
		t.Fatalf("a send while two slow senders hold 16 MiB declarations: %d %s; want 200", r.status, r.raw)
	}
	if n := e.Emulator.Deliveries(relay.MessageID("k-legit", domain)); n != 1 {
		t.Fatalf("emulator deliveries of k-legit: %d, want 1", n)
	}
	if n := e.Emulator.Deliveries(""); n != 1 {
		t.Fatalf("emulator deliveries in all: %d, want 1 (the slow senders' bodies are incomplete)", n)
	}
}

// A body that falls behind --min-body-rate after its grace is cut with 408
// and its connection closed; nothing is logged or sent. A tiny grace and
// rate stand in for the default 10 s and 16 KiB/s, so the test waits only
// for the relay's own network read.
func TestBodySlowerThanMinRateIs408(t *testing.T) {
	e := newEnv(t, envOpts{configure: func(c *api.Config) {
		c.MinBodyRate, c.MinBodyGrace = 1<<10, 50*time.Millisecond
	}})
	for path, ct := range map[string]string{
		"/v1/send":                         "message/rfc822",
		"/gmail/v1/users/me/messages/send": "application/json",
	} {
		conn, rd := e.rawConn(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: %s\r\nContent-Length: 100000\r\n\r\n", path, apiToken, ct))
		if _, err := io.WriteString(conn, "{"); err != nil {
			t.Fatal(err)
		}
		resp := wantAnswerThenClose(t, rd, http.StatusRequestTimeout)
		if !resp.Close {
			t.Errorf("%s: 408 without Connection: close", path)
		}
	}
	r := e.call(call{method: "GET", path: "/v1/stats", token: apiToken})
	if r.status != http.StatusOK {
		t.Fatalf("a request without a body after the cut: %d", r.status)
	}
	e.wantNothingSent("")
}

// The 408 answer names the rule and speaks the relay's error shape.
func TestBodySlowerThanMinRateNamesTheFlag(t *testing.T) {
	e := newEnv(t, envOpts{configure: func(c *api.Config) {
		c.MinBodyRate, c.MinBodyGrace = 1<<10, 50*time.Millisecond
	}})
	_, rd := e.rawConn(fmt.Sprintf("POST /v1/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", apiToken))
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":"request_timeout"`) ||
		!strings.Contains(string(body), "--min-body-rate") {
		t.Fatalf("answer %d %s; want 408 request_timeout naming --min-body-rate", resp.StatusCode, body)
	}
}

// padSend is a JSON send of exactly size bytes.
func padSend(key string, size int) string {
	b := sendJSON(key)
	b = b[:len(b)-1] + `,"html":"`
	return b + strings.Repeat("x", size-len(b)-2) + `"}`
}

const sendHead = "POST /v1/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + apiToken +
	"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"

// Bytes are charged as they arrive. A younger body whose next bytes no
// longer fit beside an older one's is cut mid-read with 503 + Retry-After;
// the older body completes and is delivered (emulator ground truth).
func TestYoungerBodyGivesWayWhenItsBytesStopFitting(t *testing.T) {
	reads := newBodyReads()
	e := newEnv(t, envOpts{bodyRead: reads.hook, configure: func(c *api.Config) { c.MaxInflightBytes = 1 << 20 }})
	first, second := padSend("k-first", 900<<10), padSend("k-second", 400<<10)
	c1, rd1 := e.rawConn(fmt.Sprintf(sendHead, len(first)))
	if _, err := io.WriteString(c1, first[:600<<10]); err != nil {
		t.Fatal(err)
	}
	reads.reached(t, 600<<10, 1)
	// 600 + 400 KiB fit: the second is admitted, and sends 100 KiB.
	c2, rd2 := e.rawConn(fmt.Sprintf(sendHead, len(second)))
	if _, err := io.WriteString(c2, second[:100<<10]); err != nil {
		t.Fatal(err)
	}
	reads.reached(t, 100<<10, 1)
	if _, err := io.WriteString(c1, first[600<<10:700<<10]); err != nil {
		t.Fatal(err)
	}
	reads.reached(t, 700<<10, 1)
	// 800 KiB are held; the second body's last 300 KiB do not fit.
	go func() { _, _ = io.WriteString(c2, second[100<<10:]) }()
	resp, err := http.ReadResponse(rd2, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the younger body past the budget: %d %v; want 503 + Retry-After", resp.StatusCode, resp.Header)
	}
	if _, err := io.WriteString(c1, first[700<<10:]); err != nil {
		t.Fatal(err)
	}
	if resp, err = http.ReadResponse(rd1, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the older body: %v %v; want 200", resp, err)
	}
	resp.Body.Close()
	f, s := e.Emulator.Deliveries(relay.MessageID("k-first", domain)), e.Emulator.Deliveries(relay.MessageID("k-second", domain))
	if f != 1 || s != 0 {
		t.Fatalf("emulator deliveries: k-first %d, k-second %d; want 1, 0", f, s)
	}
}

// When the oldest body being read no longer fits, the youngest bodies being
// read are cut (503 + Retry-After) to make room, and the oldest completes.
func TestOldestBodyEvictsYoungerWhenItsBytesStopFitting(t *testing.T) {
	reads := newBodyReads()
	e := newEnv(t, envOpts{bodyRead: reads.hook, configure: func(c *api.Config) { c.MaxInflightBytes = 1 << 20 }})
	first, second := padSend("k-first", 900<<10), padSend("k-second", 300<<10)
	c1, rd1 := e.rawConn(fmt.Sprintf(sendHead, len(first)))
	if _, err := io.WriteString(c1, first[:600<<10]); err != nil {
		t.Fatal(err)
	}
	reads.reached(t, 600<<10, 1)
	c2, rd2 := e.rawConn(fmt.Sprintf(sendHead, len(second)))
	if _, err := io.WriteString(c2, second[:200<<10]); err != nil {
		t.Fatal(err)
	}
	reads.reached(t, 200<<10, 1)
	// 800 KiB of 1 MiB are held; the first body's last 300 KiB do not fit.
	if _, err := io.WriteString(c1, first[600<<10:]); err != nil {
		t.Fatal(err)
	}
	resp := wantAnswerThenClose(t, rd2, http.StatusServiceUnavailable)
	if resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the evicted body's 503 has no Retry-After: %v", resp.Header)
	}
	resp, err := http.ReadResponse(rd1, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the oldest body: %v %v; want 200", resp, err)
	}
	resp.Body.Close()
	f, s := e.Emulator.Deliveries(relay.MessageID("k-first", domain)), e.Emulator.Deliveries(relay.MessageID("k-second", domain))
	if f != 1 || s != 0 {
		t.Fatalf("emulator deliveries: k-first %d, k-second %d; want 1, 0", f, s)
	}
}
