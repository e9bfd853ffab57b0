package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/pglog"
	"github.com/gmailrelay/gmailrelay/pglog/pgtest"
)

// testDatabase returns the URL of a fresh schema (dropped at the end) on
// the PostgreSQL test server (pgtest: skipped when none, failed with CI=true).
func testDatabase(t *testing.T) (dbURL, schema string) {
	t.Helper()
	return pgtest.SchemaURL(t)
}

// Three relays started at once on one PostgreSQL (each applying the
// migrations) and one emulator; 50 concurrent sends of one key spread
// round-robin over them: exactly one delivery at the emulator (emulator
// results), every answer a 200 with the same Gmail id or a 409, and the log
// read from the database holds one sent job and passes Check.
func TestServeThreeReplicasOnePostgresOneDelivery(t *testing.T) {
	dbURL, schema := testDatabase(t)
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	relays := startReplicas(t, 3, dbURL, emuURL)
	var wg sync.WaitGroup

	const n = 50
	body := `{"key":"cus_9:order.paid:ord_9","to":"a@example.org","subject":"paid","body":"thanks"}`
	type answer struct {
		status  int
		gmailID string
		msgID   string
	}
	answers := make([]answer, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			req, _ := http.NewRequest(http.MethodPost, relays[i%3].URL+"/v1/send", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer api-token-0123456789")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var out map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&out)
			g, _ := out["gmail_id"].(string)
			m, _ := out["message_id"].(string)
			answers[i] = answer{resp.StatusCode, g, m}
		})
	}
	close(start)
	wg.Wait()
	var msgID, gmailID string
	counts := map[int]int{}
	for _, a := range answers {
		counts[a.status]++
		switch a.status {
		case http.StatusOK:
			if gmailID == "" {
				gmailID, msgID = a.gmailID, a.msgID
			}
			if a.gmailID != gmailID {
				t.Errorf("200 answers with different Gmail ids: %s and %s", gmailID, a.gmailID)
			}
		case http.StatusConflict:
		default:
			t.Errorf("answer %d; want 200 (sent or replayed) or 409 (in flight)", a.status)
		}
	}
	t.Logf("emulator results: %d same-key sends over 3 replicas answered %v", n, counts)
	if msgID == "" {
		t.Fatal("no send answered 200")
	}
	if got := emu.Deliveries(msgID); got != 1 {
		t.Errorf("emulator results: %d deliveries of %s, want exactly 1", got, msgID)
	}
	lg, err := pglog.Open(context.Background(), pgtest.URL(t), pglog.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	j, err := lg.Get(context.Background(), msgID)
	if err != nil || j.State != gmailrelay.StateSent || j.Attempts != 1 {
		t.Errorf("job in the database: %+v, %v; want sent after 1 attempt", j, err)
	}
	st, err := lg.Stats(context.Background())
	if err != nil || st.Jobs != 1 {
		t.Errorf("stats %+v, %v; want 1 job", st, err)
	}
	if err := lg.Check(context.Background()); err != nil {
		t.Error(err)
	}
	// The checker reads the log from the database, with the replicas up.
	var out, errb strings.Builder
	if code := runCheck(context.Background(), []string{"--database", dbURL}, &out, &errb); code != 0 || !strings.Contains(out.String(), "ok: 1 jobs") {
		t.Errorf("check --database: exit %d, %q %q", code, out.String(), errb.String())
	}
	// Backups of a PostgreSQL log are pg_dump's: a clear 501, not a 500.
	req, _ := http.NewRequest(http.MethodGet, relays[1].URL+"/admin/backup", nil)
	req.Header.Set("Authorization", "Bearer admin-token-0123456789")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(b), "pg_dump") {
		t.Errorf("GET /admin/backup on PostgreSQL: %d %s; want 501 naming pg_dump", resp.StatusCode, b)
	}
}

func TestServeBadDatabaseURLExits2(t *testing.T) {
	for _, arg := range []string{"mysql://x/y", "postgres://", "not a url"} {
		var errb strings.Builder
		if code := runServe(context.Background(), []string{"--database", arg}, io.Discard, &errb); code != 2 {
			t.Errorf("--database %q: exit %d, want 2", arg, code)
		}
		if !strings.Contains(errb.String(), "--database") {
			t.Errorf("--database %q: message %q does not name the flag", arg, errb.String())
		}
	}
}

func TestServeDatabaseEnvTwin(t *testing.T) {
	c, err := parseServeFlags(nil, env(map[string]string{"GMAILRELAY_DATABASE": "postgres://u:p@db:5432/relay"}), io.Discard)
	if err != nil || c.Database != "postgres://u:p@db:5432/relay" {
		t.Errorf("GMAILRELAY_DATABASE: %q, %v", c.Database, err)
	}
}

// startReplicas starts n relays at once on dbURL in front of the emulator
// at emuURL, closed at the end of the test.
func startReplicas(t *testing.T, n int, dbURL, emuURL string, extra ...string) []*relayServer {
	t.Helper()
	relays := make([]*relayServer, n)
	var wg sync.WaitGroup
	for i := range relays {
		wg.Go(func() {
			args := append([]string{"--addr", "127.0.0.1:0", "--database", dbURL, "--gmail-endpoint", emuURL,
				"--api-token", "api-token-0123456789", "--admin-token", "admin-token-0123456789"}, extra...)
			c, err := parseServeFlags(args, env(nil), io.Discard)
			if err != nil {
				t.Error(err)
				return
			}
			rs, err := startRelay(context.Background(), c, newLogger(io.Discard, "json", "info"))
			if err != nil {
				t.Errorf("replica %d: %v", i, err)
				return
			}
			relays[i] = rs
			t.Cleanup(func() { _ = rs.close(context.Background()) })
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return relays
}

// call sends one request with token and returns the status and body.
func call(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func sendBody(key string) string {
	return `{"key":"` + key + `","to":"a@example.org","subject":"s","body":"b","when_busy":"reject"}`
}

const apiTok, adminTok = "api-token-0123456789", "admin-token-0123456789"

// A fault rule added through replica A fires on a send through replica B,
// and a count: 1 rule fires exactly once over 30 concurrent sends spread
// over both replicas (its count is taken in the database). The rule and
// its hits are listed the same by both (emulator results: the faulted
// sends never reach the emulator).
func TestServeFaultRuleSharedAcrossReplicas(t *testing.T) {
	dbURL, _ := testDatabase(t)
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	rs := startReplicas(t, 2, dbURL, emuURL)
	a, b := rs[0], rs[1]

	if st, body := call(t, http.MethodPost, a.URL+"/admin/faults", adminTok, `{"mode":"fail-before-forward","count":1}`); st != http.StatusCreated {
		t.Fatalf("add fault through A: %d %s", st, body)
	}
	if st, body := call(t, http.MethodPost, b.URL+"/v1/send", apiTok, sendBody("cus_1:fault:1")); st != http.StatusServiceUnavailable || !strings.Contains(body, "fail-before-forward") {
		t.Fatalf("send through B after A's rule: %d %s; want 503 fail-before-forward", st, body)
	}
	if st, body := call(t, http.MethodPost, b.URL+"/v1/send", apiTok, sendBody("cus_1:fault:2")); st != http.StatusOK {
		t.Fatalf("second send through B (count 1 spent): %d %s; want 200", st, body)
	}
	for _, r := range rs {
		_, body := call(t, http.MethodGet, r.URL+"/admin/faults", adminTok, "")
		if !strings.Contains(body, `"hits":1`) || !strings.Contains(body, `"remaining":0`) {
			t.Errorf("GET /admin/faults on %s: %s; want the rule with hits 1, remaining 0", r.URL, body)
		}
	}
	if st, _ := call(t, http.MethodDelete, b.URL+"/admin/faults", adminTok, ""); st != http.StatusOK {
		t.Errorf("clear faults through B: %d", st)
	}
	if _, body := call(t, http.MethodGet, a.URL+"/admin/faults", adminTok, ""); strings.Contains(body, `"id"`) {
		t.Errorf("A still lists rules after B cleared them: %s", body)
	}

	// Concurrency: one count: 1 rule, 30 sends over both replicas at once.
	call(t, http.MethodPost, b.URL+"/admin/faults", adminTok, `{"mode":"fail-before-forward","count":1}`)
	statuses := sendSpread(t, rs[:2], 30, "cus_2:fault:")
	if statuses[http.StatusServiceUnavailable] != 1 || statuses[http.StatusOK] != 29 {
		t.Errorf("30 sends over 2 replicas with one count: 1 rule answered %v; want one 503 and 29 200", statuses)
	}
	if got := emu.Stats().Deliveries; got != 30 {
		t.Errorf("emulator results: %d deliveries, want 30 (1 + 29)", got)
	}
}

// A daily budget spent through replica A refuses (when_busy reject) and
// queues (the default) on replica B: the budget is counted from the shared
// send index at decision time. 12 concurrent sends over three replicas with
// a budget of 5 make exactly 5 attempts (emulator results).
func TestServeDailyBudgetSharedAcrossReplicas(t *testing.T) {
	dbURL, _ := testDatabase(t)
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	pol := t.TempDir() + "/policy.yaml"
	if err := os.WriteFile(pol, []byte("channels:\n  default: {on_unknown: retry}\nmailboxes:\n  default:\n    daily_send_limit: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := startReplicas(t, 3, dbURL, emuURL, "--policy", pol)
	for i := range 2 {
		if st, body := call(t, http.MethodPost, rs[0].URL+"/v1/send", apiTok, sendBody("cus_3:b:"+string(rune('0'+i)))); st != http.StatusOK {
			t.Fatalf("send %d through A: %d %s", i, st, body)
		}
	}
	statuses := sendSpread(t, rs[:3], 12, "cus_3:c:")
	if statuses[http.StatusOK] != 3 || statuses[http.StatusTooManyRequests] != 9 {
		t.Errorf("12 sends over 3 replicas with 3 of 5 left: %v; want 3 × 200 and 9 × 429", statuses)
	}
	st, body := call(t, http.MethodPost, rs[1].URL+"/v1/send", apiTok, `{"key":"cus_3:q:1","to":"a@example.org","subject":"s","body":"b"}`)
	if st != http.StatusAccepted {
		t.Errorf("a send through B with A's budget spent, when_busy queue: %d %s; want 202 queued", st, body)
	}
	if got := emu.Stats().Deliveries; got != 5 {
		t.Errorf("emulator results: %d deliveries, want 5 (the daily budget)", got)
	}
}

// Gmail's rate limit answered to replica A pauses replica B: the pause is
// in the mailbox's record in the database.
func TestServeGmailPauseSharedAcrossReplicas(t *testing.T) {
	dbURL, _ := testDatabase(t)
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	rs := startReplicas(t, 2, dbURL, emuURL)
	if _, err := emu.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 429}); err != nil {
		t.Fatal(err)
	}
	if st, body := call(t, http.MethodPost, rs[0].URL+"/v1/send", apiTok, sendBody("cus_4:p:1")); st != http.StatusTooManyRequests {
		t.Fatalf("send through A with Gmail answering 429: %d %s", st, body)
	}
	before := emu.Stats().Calls["send"]
	st, body := call(t, http.MethodPost, rs[1].URL+"/v1/send", apiTok, sendBody("cus_4:p:2"))
	if st != http.StatusTooManyRequests || !strings.Contains(body, "quota") {
		t.Errorf("send through B during A's pause: %d %s; want 429 from the relay's paused quota", st, body)
	}
	if got := emu.Stats().Calls["send"]; got != before {
		t.Errorf("emulator results: B called Gmail's send %d times during the pause, want 0", got-before)
	}
}

// sendSpread makes n concurrent sends with keys prefix+a, prefix+b, …,
// round-robin over the relays, and counts the answers by status.
func sendSpread(t *testing.T, relays []*relayServer, n int, prefix string) map[int]int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := range n {
		wg.Go(func() {
			st, _ := call(t, http.MethodPost, relays[i%len(relays)].URL+"/v1/send", apiTok, sendBody(prefix+string(rune('a'+i))))
			mu.Lock()
			statuses[st]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return statuses
}
