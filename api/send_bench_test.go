package api

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
)

// benchRelay is a relay wired as `gmailrelay serve` (and the bench
// harness's relay child) wires a send, by testenv on the host's clock:
// Metrics as observer and timed provider, a fault set without rules, a
// JSON logger at info into io.Discard, gmailapi over the emulator, a
// bbolt log in a temp dir; verify_handle never and limits that never
// bite.
type benchRelay struct {
	emu    *gmailfake.Server
	emuURL string
	url    string
	client *http.Client
}

func newBenchRelay(b *testing.B) *benchRelay {
	b.Helper()
	logger := zerolog.New(io.Discard).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	metrics := NewMetrics()
	pol := policy.Default()
	pol.MsgIDDomain = "bench.example"
	pol.VerifyHandle = policy.VerifyNever
	pol.Mailboxes = map[string]policy.Mailbox{policy.DefaultMailbox: {Name: policy.DefaultMailbox, DailySendLimit: 1 << 30}}
	te := testenv.New(b, testenv.Options{HostClock: true, Emulator: gmailfake.Options{QuotaPerMinute: 1 << 30}, Policy: pol,
		QuotaPerMinute: 1 << 30, SendTimeout: 60 * time.Second, Logger: &logger,
		Configure: func(c *relay.Config) { c.Provider, c.Observer = metrics.Provider(c.Provider), metrics }})
	srv := httptest.NewServer(New(Config{Relay: te.Service, Log: te.Store, Policy: pol, Faults: te.Faults, MsgIDDomain: "bench.example",
		Metrics: metrics, Logger: logger, Mode: "gmail"}))
	b.Cleanup(srv.Close)
	return &benchRelay{emu: te.Emulator, emuURL: te.EmulatorURL, url: srv.URL,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
}

// benchMessage is the harness's typical message (bench.BuildMessage).
func benchMessage(id string) []byte {
	return fmt.Appendf(nil, "From: Bench <%s>\r\nTo: rcpt@example.com\r\nSubject: bench %s\r\n"+
		"Date: Mon, 01 Jun 2026 09:00:00 +0000\r\nMessage-ID: %s\r\nMIME-Version: 1.0\r\n"+
		"Content-Type: text/plain; charset=UTF-8\r\n\r\nYour order has shipped. %s\r\n",
		gmailfake.DefaultAccount, id, id, id)
}

var benchSeq atomic.Int64

// post sends one request and checks its status.
func (br *benchRelay) post(b *testing.B, url, ct string, body []byte, want int) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	resp, err := br.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		b.Fatalf("POST %s: status %d, want %d", url, resp.StatusCode, want)
	}
}

func gmailBody(id string) []byte {
	return []byte(`{"raw":"` + base64.URLEncoding.EncodeToString(benchMessage(id)) + `"}`)
}

// BenchmarkSendPath measures one send per op, sequentially, through the
// whole relay in this process (emulator results). "direct" is the same
// request straight to the emulator: relayed − direct is the relay's own
// cost per send (the client's and the emulator's share cancel out).
func BenchmarkSendPath(b *testing.B) {
	const gmailSend = "/gmail/v1/users/me/messages/send"
	for _, c := range []struct {
		name string
		// url is where a send goes; body is send number n's body, of
		// content type ct.
		url  func(br *benchRelay) string
		ct   string
		body func(n string) []byte
	}{
		{"direct", func(br *benchRelay) string { return br.emuURL + gmailSend }, "application/json",
			func(n string) []byte { return gmailBody("<d" + n + "@bench.example>") }},
		{"gmail", func(br *benchRelay) string { return br.url + gmailSend }, "application/json",
			func(n string) []byte { return gmailBody("<g" + n + "@bench.example>") }},
		{"v1json", func(br *benchRelay) string { return br.url + "/v1/send" }, "application/json",
			func(n string) []byte {
				return []byte(`{"key":"order-` + n + `","from":"Bench <` + gmailfake.DefaultAccount + `>","to":["rcpt@example.com"],` +
					`"subject":"Your order ` + n + ` has shipped","text":"Your order has shipped."}`)
			}},
		{"v1", func(br *benchRelay) string { return br.url + "/v1/send" }, "message/rfc822",
			func(n string) []byte { return benchMessage("<v" + n + "@bench.example>") }},
	} {
		b.Run(c.name, func(b *testing.B) {
			br := newBenchRelay(b)
			b.ReportAllocs()
			for b.Loop() {
				br.post(b, c.url(br), c.ct, c.body(strconv.FormatInt(benchSeq.Add(1), 10)), http.StatusOK)
			}
		})
	}
}
