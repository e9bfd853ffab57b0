package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"github.com/gmailrelay/gmailrelay/internal/tmpfs"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

// httpReply is a relay answer: its status, Retry-After and JSON body.
type httpReply struct {
	status     int
	retryAfter string
	body       map[string]any
	raw        string
}

func httpDo(t *testing.T, method, u, token, body string) httpReply {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := httpReply{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), raw: string(b)}
	_ = json.Unmarshal(b, &r.body)
	return r
}

// TestDiskFullFailsSafeAndRecoversWithoutRestart runs the relay (sandbox:
// emulator results) with its log on a real tmpfs and fills the disk. The
// sends that find no room answer 503 unavailable with a Retry-After and
// /readyz answers 503 with "log": "writes refused: …" while the disk is
// full. Once room comes back the relay's own LogWatch finds the log
// taking writes and /readyz answers 200 again within 30 s, without a
// restart. Then the caller retries every send answered 503: each is
// delivered exactly once (a send Gmail accepted whose answer the log
// refused is replayed and found by the sweeper, never sent again), and
// every job acknowledged before is intact, through a restart too.
func TestDiskFullFailsSafeAndRecoversWithoutRestart(t *testing.T) {
	dir := tmpfs.Mount(t, 8<<20)
	data := filepath.Join(dir, "relay.db")
	clock := testclock.At(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	var emu *gmailfake.Server // the sandbox's emulator, kept across the restart
	start := func() *relayServer {
		c, err := parseServeFlags([]string{"--addr", "127.0.0.1:0", "--data", data, "--clock", "manual",
			"--api-token", apiTok, "--admin-token", adminTok, "--sweep-interval", "1h"}, env(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		c.clock, c.emulator = clock, emu
		rs, err := startRelay(context.Background(), c, newLogger(io.Discard, "json", "info"))
		if err != nil {
			t.Fatal(err)
		}
		emu = rs.Emulator
		t.Cleanup(func() { rs.close(context.Background()) }) // before the tmpfs is unmounted
		return rs
	}
	rs := start()
	send := func(key string) httpReply {
		return httpDo(t, "POST", rs.URL+"/v1/send", apiTok,
			`{"key":"`+key+`","to":"a@example.org","subject":"s","text":"`+strings.Repeat("x", 2000)+`"}`)
	}
	gmailIDs := map[string]string{} // acknowledged key → Gmail id
	for i := range 20 {
		key := fmt.Sprintf("before:%d", i)
		r := send(key)
		if r.status != 200 {
			t.Fatalf("send %s with room to spare: %d %s", key, r.status, r.raw)
		}
		gmailIDs[key] = r.body["gmail_id"].(string)
	}

	filler := filepath.Join(dir, "filler")
	tmpfs.Fill(t, filler)
	// Sends arrive 8 at a time, as a busy caller's do: some pass the
	// admission and reach Gmail while others find the disk full.
	msgIDs := map[string]string{} // every key → its Message-ID
	var refused []string
	for round := 0; len(refused) < 5; round++ {
		if round == 500 {
			t.Fatalf("4,000 sends on a full disk, only %d answered 503", len(refused))
		}
		var keys [8]string
		var replies [8]httpReply
		var wg sync.WaitGroup
		for i := range keys {
			keys[i] = fmt.Sprintf("full:%d:%d", round, i)
			wg.Go(func() { replies[i] = send(keys[i]) })
		}
		wg.Wait()
		for i, r := range replies {
			key := keys[i]
			errBody, _ := r.body["error"].(map[string]any)
			switch {
			case r.status == 200:
				msgIDs[key] = r.body["message_id"].(string)
				gmailIDs[key] = r.body["gmail_id"].(string) // it fit in the file's free pages
			case r.status == 503:
				msgIDs[key], _ = errBody["message_id"].(string)
				if errBody["code"] != "unavailable" || r.retryAfter == "" {
					t.Fatalf("send %s on a full disk: 503 %s with Retry-After %q, want code unavailable and a Retry-After", key, r.raw, r.retryAfter)
				}
				refused = append(refused, key)
			default:
				t.Fatalf("send %s on a full disk: %d %s, want 200 or 503", key, r.status, r.raw)
			}
		}
	}
	wantNotReady := func(when string) {
		t.Helper()
		r := httpDo(t, "GET", rs.URL+"/readyz", "", "")
		logState, _ := r.body["log"].(string)
		if r.status != 503 || !strings.HasPrefix(logState, "writes refused: ") || !strings.Contains(logState, "no space left on device") {
			t.Fatalf("/readyz %s: %d %s, want 503 with log \"writes refused: … no space left on device\"", when, r.status, r.raw)
		}
	}
	wantNotReady("while the disk is full")
	// The LogWatch's probes find the disk still full.
	select {
	case c := <-rs.logWatch.Checks():
		if c.Refused == nil {
			t.Fatalf("a LogWatch pass on a full disk found the log taking writes: %+v", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no LogWatch pass within 30 s")
	}
	wantNotReady("after a probe on the full disk")
	for _, key := range refused {
		if id := msgIDs[key]; id == "" || rs.Emulator.Deliveries(id) > 1 {
			t.Fatalf("send %s answered 503: Message-ID %q, %d deliveries; want at most 1", key, id, rs.Emulator.Deliveries(id))
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	deadline := time.After(30 * time.Second)
	for back := false; !back; {
		select {
		case c := <-rs.logWatch.Checks():
			back = c.Refused == nil
		case <-deadline:
			t.Fatal("the relay did not take writes again within 30 s of room coming back")
		}
	}
	if r := httpDo(t, "GET", rs.URL+"/readyz", "", ""); r.status != 200 || r.body["log"] != "open" {
		t.Fatalf("/readyz after room came back: %d %s, want 200 with log open", r.status, r.raw)
	}
	t.Logf("ready again %v after room came back, without a restart", time.Since(freed).Round(time.Millisecond))

	// The caller retries every send answered 503.
	replayed := 0
	for _, key := range refused {
		r := send(key)
		switch {
		case r.status == 200:
		case r.status == 202 && r.body["state"] == string(gmailrelay.StateUnknown) && r.body["replayed"] == true:
			replayed++ // Gmail accepted it, its answer went unrecorded
		default:
			t.Fatalf("retry of %s after room came back: %d %s, want 200, or 202 replaying an unknown job", key, r.status, r.raw)
		}
	}
	t.Logf("%d sends answered 503 on the full disk; retried, %d replayed an unknown job (Gmail had accepted it)", len(refused), replayed)
	// The sweeper looks for the unknown ones in the mailbox.
	if r := httpDo(t, "POST", rs.URL+"/admin/clock", adminTok, `{"advance":"10m"}`); r.status != 200 {
		t.Fatalf("advance the clock: %d %s", r.status, r.raw)
	}
	if r := httpDo(t, "POST", rs.URL+"/admin/sweep", adminTok, ""); r.status != 200 {
		t.Fatalf("sweep: %d %s", r.status, r.raw)
	}
	wantAll := func(rs *relayServer) {
		t.Helper()
		for _, key := range refused {
			id := msgIDs[key]
			r := httpDo(t, "GET", rs.URL+"/v1/jobs/"+url.PathEscape(id), apiTok, "")
			if r.status != 200 || r.body["state"] != string(gmailrelay.StateSent) {
				t.Errorf("job %s (answered 503, then retried): %d %s, want sent", key, r.status, r.raw)
			}
			if got := rs.Emulator.Deliveries(id); got != 1 {
				t.Errorf("job %s (answered 503, then retried): %d deliveries, want exactly 1", key, got)
			}
		}
		for key, gid := range gmailIDs {
			r := send(key)
			if r.status != 200 || r.body["gmail_id"] != gid || r.body["replayed"] != true {
				t.Errorf("acknowledged job %s: %d %s, want its sent record (gmail id %s) replayed", key, r.status, r.raw, gid)
			}
		}
	}
	wantAll(rs)
	if err := rs.close(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, err := acceptlog.OpenReadOnly(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Check(context.Background()); err != nil {
		t.Errorf("the log after the disk filled and emptied: %v", err)
	}
	l.Close()
	rs = start()
	for key, gid := range gmailIDs {
		r := send(key)
		if r.status != 200 || r.body["gmail_id"] != gid {
			t.Errorf("acknowledged job %s after a restart: %d %s, want gmail id %s", key, r.status, r.raw, gid)
		}
	}
}

// TestDatabaseLostAnswers503AndRecoversWithoutRestart (emulator
// results): a relay on PostgreSQL whose database is lost (every
// connection through a proxy cut, new ones closed) answers sends 503
// unavailable with a Retry-After and /readyz 503 with "log": "writes
// refused: …", sending nothing; once the database is back its LogWatch
// finds it taking writes within 30 s, without a restart, and the caller's
// retry sends the message once.
func TestDatabaseLostAnswers503AndRecoversWithoutRestart(t *testing.T) {
	dbURL, _ := testDatabase(t)
	proxy, viaProxy := pgtest.NewProxy(t, dbURL)
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	rs := startReplicas(t, 1, viaProxy, emuURL)[0]
	send := func(key string) httpReply {
		return httpDo(t, "POST", rs.URL+"/v1/send", apiTok, sendBody(key))
	}
	if r := send("k:before"); r.status != 200 {
		t.Fatalf("send with the database up: %d %s", r.status, r.raw)
	}
	proxy.Cut()
	r := send("k:lost")
	errBody, _ := r.body["error"].(map[string]any)
	if r.status != 503 || errBody["code"] != "unavailable" || r.retryAfter == "" {
		t.Fatalf("send with the database lost: %d %s (Retry-After %q), want 503 unavailable with a Retry-After", r.status, r.raw, r.retryAfter)
	}
	id, _ := errBody["message_id"].(string)
	rz := httpDo(t, "GET", rs.URL+"/readyz", "", "")
	if logState, _ := rz.body["log"].(string); rz.status != 503 || !strings.HasPrefix(logState, "writes refused: ") {
		t.Fatalf("/readyz with the database lost: %d %s, want 503 with log \"writes refused: …\"", rz.status, rz.raw)
	}
	proxy.Restore()
	restored := time.Now()
	deadline := time.After(30 * time.Second)
	for back := false; !back; {
		select {
		case c := <-rs.logWatch.Checks():
			back = c.Refused == nil
		case <-deadline:
			t.Fatal("the relay did not take writes again within 30 s of the database coming back")
		}
	}
	if rz := httpDo(t, "GET", rs.URL+"/readyz", "", ""); rz.status != 200 {
		t.Fatalf("/readyz with the database back: %d %s", rz.status, rz.raw)
	}
	t.Logf("ready again %v after the database came back, without a restart", time.Since(restored).Round(time.Millisecond))
	if r := send("k:lost"); r.status != 200 {
		t.Fatalf("the caller's retry: %d %s", r.status, r.raw)
	}
	if got := emu.Deliveries(id); got != 1 {
		t.Fatalf("emulator deliveries of %s = %d, want 1", id, got)
	}
}
