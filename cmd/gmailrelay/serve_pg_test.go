package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/pglog"
)

// testDatabase returns the URL of a fresh schema (dropped at the end) on
// GMAILRELAY_TEST_DATABASE: skipped when unset, failed when unset with
// CI=true.
func testDatabase(t *testing.T) (dbURL, schema string) {
	t.Helper()
	base := os.Getenv("GMAILRELAY_TEST_DATABASE")
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("GMAILRELAY_TEST_DATABASE is not set: with CI=true the PostgreSQL tests must run")
		}
		t.Skip("GMAILRELAY_TEST_DATABASE is not set (postgres://…); skipping the PostgreSQL tests")
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	schema = "gmailrelay_test_" + hex.EncodeToString(b)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}

// Three relays started at once on one PostgreSQL (each applying the
// migrations) and one emulator; 50 concurrent sends of one key spread
// round-robin over them: exactly one delivery at the emulator (emulator
// results), every answer a 200 with the same Gmail id or a 409, and the log
// read from the database holds one sent job and passes Check.
func TestServeThreeReplicasOnePostgresOneDelivery(t *testing.T) {
	dbURL, schema := testDatabase(t)
	emu, emuURL := gmailfake.NewTestServer(t, gmailfake.Options{})
	relays := make([]*relayServer, 3)
	var wg sync.WaitGroup
	for i := range relays {
		wg.Go(func() {
			c, err := parseServeFlags([]string{"--addr", "127.0.0.1:0", "--database", dbURL, "--gmail-endpoint", emuURL,
				"--api-token", "api-token-0123456789", "--admin-token", "admin-token-0123456789"}, env(nil), io.Discard)
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
		})
	}
	wg.Wait()
	for _, rs := range relays {
		if rs != nil {
			defer rs.close(context.Background())
		}
	}
	if t.Failed() {
		t.FailNow()
	}

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
	lg, err := pglog.Open(context.Background(), os.Getenv("GMAILRELAY_TEST_DATABASE"), pglog.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	j, err := lg.Get(context.Background(), msgID)
	if err != nil || j.State != acceptlog.StateSent || j.Attempts != 1 {
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
