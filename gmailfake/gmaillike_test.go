package gmailfake_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/option"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

// plenty is a quota no test of many sends runs out of.
const plenty = 1 << 30

var retryAfterText = regexp.MustCompile(`Retry after (\S+)$`)

// retryAfterInMessage parses the "Retry after <RFC 3339>" that ends a
// Gmail quota message.
func retryAfterInMessage(t *testing.T, msg string) time.Time {
	t.Helper()
	m := retryAfterText.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("message %q has no \"Retry after <RFC 3339>\"", msg)
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatalf("retry time %q in %q: %v", m[1], msg, err)
	}
	return at
}

// storedMessageID reads the Message-ID header Gmail stored, through the
// Google client.
func storedMessageID(t *testing.T, svc *gmail.Service, id string) string {
	t.Helper()
	m, err := svc.Users.Messages.Get("me", id).Format("metadata").MetadataHeaders("Message-ID").Do()
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	if len(m.Payload.Headers) != 1 {
		t.Fatalf("get %s: headers %+v, want one Message-ID", id, m.Payload.Headers)
	}
	return m.Payload.Headers[0].Value
}

func TestGmailLikeRewritePolicies(t *testing.T) {
	const good = "<job-1ca74402c25f227b40cf235d910d7664@inbound.example.com>"
	cases := []struct {
		name    string
		opts    gmailfake.Options
		id      string
		rewrite bool
	}{
		{"malformed default keeps a strict id", gmailfake.Options{}, good, false},
		{"malformed default: empty atom (kernel list)", gmailfake.Options{}, "<202304061608.@keescook>", true},
		{"malformed default: no brackets", gmailfake.Options{}, "abc123@example.com", true},
		{"malformed default: no @", gmailfake.Options{}, "<abc123>", true},
		{"malformed default: double dot", gmailfake.Options{}, "<a..b@example.com>", true},
		{"malformed default: too long", gmailfake.Options{}, "<" + strings.Repeat("a", 240) + "@example.com>", true},
		{"never keeps a malformed id", gmailfake.Options{Rewrite: gmailfake.RewritePolicy{Mode: gmailfake.RewriteNever}}, "<202304061608.@keescook>", false},
		{"always replaces a strict id", gmailfake.Options{Rewrite: gmailfake.RewritePolicy{Mode: gmailfake.RewriteAlways}}, good, true},
		{"the first emulator's bool is always", gmailfake.Options{RewriteMessageID: true}, good, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, svc, _ := emulator(t, tc.opts)
			sent := send(t, svc, rawMessage(tc.id, "a@example.org", "rw"))
			stored := storedMessageID(t, svc, sent.Id)
			truth := srv.Lookup("", tc.id)
			if truth.Deliveries != 1 {
				t.Errorf("deliveries of the client's id: got %d, want 1", truth.Deliveries)
			}
			all := srv.Messages("")
			if len(all) != 1 {
				t.Fatalf("stored %d messages, want 1", len(all))
			}
			if !tc.rewrite {
				if stored != tc.id || all[0].OriginalMessageID != "" || truth.Count != 1 {
					t.Errorf("stored %q original %q count %d, want %q kept", stored, all[0].OriginalMessageID, truth.Count, tc.id)
				}
				return
			}
			if !regexp.MustCompile(`^<CA\+[A-Za-z0-9+/]+@mail\.gmail\.com>$`).MatchString(stored) {
				t.Errorf("stored Message-ID %q, want Gmail's shape", stored)
			}
			if strings.Contains(string(all[0].Raw), strings.Trim(tc.id, "<>")) {
				t.Errorf("the client's id survived in the stored message:\n%s", all[0].Raw)
			}
			if all[0].OriginalMessageID != tc.id || truth.Count != 0 {
				t.Errorf("original %q, count by the client's id %d; want %q and 0", all[0].OriginalMessageID, truth.Count, tc.id)
			}
			q := "rfc822msgid:" + strings.Trim(tc.id, "<>")
			if got, err := svc.Users.Messages.List("me").Q(q).Do(); err != nil || len(got.Messages) != 0 {
				t.Errorf("search by the client's id: %v %v, want nothing", got, err)
			}
		})
	}
}

func TestGmailLikeRewriteFraction(t *testing.T) {
	const n, p = 2000, 0.05
	srv, svc, _ := emulator(t, gmailfake.Options{Seed: 12, QuotaPerMinute: plenty,
		Rewrite: gmailfake.RewritePolicy{Mode: gmailfake.RewriteFraction, Fraction: p}})
	for i := range n {
		send(t, svc, rawMessage(msgID(i), "a@example.org", "f"))
	}
	rewritten := 0
	for _, m := range srv.Messages("") {
		if m.OriginalMessageID != "" {
			rewritten++
		}
	}
	mean, sigma := n*p, 9.746794 // sqrt(n p (1-p))
	t.Logf("fraction %.2f, seed 12: %d of %d sends rewritten (%.2f%%)", p, rewritten, n, 100*float64(rewritten)/n)
	if float64(rewritten) < mean-3*sigma || float64(rewritten) > mean+3*sigma {
		t.Errorf("rewritten %d of %d, want %.0f ± %.0f", rewritten, n, mean, 3*sigma)
	}
	// The same seed gives the same choices.
	again, svc2, _ := emulator(t, gmailfake.Options{Seed: 12, QuotaPerMinute: plenty,
		Rewrite: gmailfake.RewritePolicy{Mode: gmailfake.RewriteFraction, Fraction: p}})
	for i := range 200 {
		send(t, svc2, rawMessage(msgID(i), "a@example.org", "f"))
	}
	first, second := srv.Messages(""), again.Messages("")
	for i := range 200 {
		if (first[i].OriginalMessageID == "") != (second[i].OriginalMessageID == "") {
			t.Fatalf("send %d: rewritten differs between two runs with seed 12", i)
		}
	}
}

func TestGmailLikeTrashUntrashDelete(t *testing.T) {
	srv, svc, base := emulator(t, gmailfake.Options{})
	sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "t"))
	other := send(t, svc, rawMessage(msgID(2), "a@example.org", "u"))
	q := "rfc822msgid:" + msgID(1)

	tr, err := svc.Users.Messages.Trash("me", sent.Id).Do()
	if err != nil {
		t.Fatalf("trash: %v", err)
	}
	if !slices.Equal(tr.LabelIds, []string{"SENT", "TRASH"}) {
		t.Errorf("trashed labels: got %v, want [SENT TRASH]", tr.LabelIds)
	}
	if got := search(t, svc, q); len(got) != 0 {
		t.Errorf("list without includeSpamTrash: got %v, want the trashed message left out", got)
	}
	got, err := svc.Users.Messages.List("me").Q(q).IncludeSpamTrash(true).Do()
	if err != nil || len(got.Messages) != 1 || got.Messages[0].Id != sent.Id {
		t.Errorf("list with includeSpamTrash: %+v %v, want %s", got, err, sent.Id)
	}
	if m := srv.Messages(msgID(1)); len(m) != 1 || !m[0].Trashed {
		t.Errorf("truth: %+v, want trashed", m)
	}
	if _, err := svc.Users.Messages.Untrash("me", sent.Id).Do(); err != nil {
		t.Fatalf("untrash: %v", err)
	}
	if got := search(t, svc, q); !slices.Equal(got, []string{sent.Id}) {
		t.Errorf("after untrash: got %v", got)
	}

	if err := svc.Users.Messages.Delete("me", sent.Id).Do(); err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err = svc.Users.Messages.Get("me", sent.Id).Do()
	apiError(t, err, http.StatusNotFound, "notFound")
	got, err = svc.Users.Messages.List("me").IncludeSpamTrash(true).Do()
	if err != nil || len(got.Messages) != 1 || got.Messages[0].Id != other.Id {
		t.Errorf("list after delete: %+v %v, want only %s", got, err, other.Id)
	}
	_, err = svc.Users.Messages.Trash("me", sent.Id).Do()
	apiError(t, err, http.StatusNotFound, "notFound")

	status, body := do(t, http.MethodGet, base+"/_emulator/messages?rfc822msgid="+url.QueryEscape(msgID(1)), "")
	msgs, _ := body["messages"].([]any)
	if status != 200 || len(msgs) != 1 || body["deliveries"] != 1.0 {
		t.Fatalf("truth after delete: %d %v", status, body)
	}
	if m := msgs[0].(map[string]any); m["deleted"] != true || m["account"] != gmailfake.DefaultAccount {
		t.Errorf("truth message: %v, want deleted in %s", m, gmailfake.DefaultAccount)
	}

	// By hand, through the control API: no quota, no call counted.
	before := srv.Stats()
	status, body = do(t, http.MethodPost, base+"/_emulator/messages/"+other.Id+"/trash", "")
	if status != 200 || body["trashed"] != true {
		t.Errorf("control trash: %d %v", status, body)
	}
	status, body = do(t, http.MethodPost, base+"/_emulator/messages/"+other.Id+"/delete", "")
	if status != 200 || body["deleted"] != true {
		t.Errorf("control delete: %d %v", status, body)
	}
	if status, _ := do(t, http.MethodPost, base+"/_emulator/messages/"+other.Id+"/delete", ""); status != 404 {
		t.Errorf("control delete twice: %d, want 404", status)
	}
	if after := srv.Stats(); after.QuotaUnits != before.QuotaUnits {
		t.Errorf("control actions spent quota: %d → %d", before.QuotaUnits, after.QuotaUnits)
	}
	if st := srv.Stats(); st.Calls["trash"] != 2 || st.Calls["untrash"] != 1 || st.Calls["delete"] != 1 ||
		st.QuotaUnits != 2*gmailfake.CostSend+3*gmailfake.CostTrash+gmailfake.CostDelete+4*gmailfake.CostList+gmailfake.CostGet {
		t.Errorf("stats: %+v", st)
	}
}

func TestGmailLikeSelfSend(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{})
	sent := send(t, svc, rawMessage(msgID(1), "Me <"+gmailfake.DefaultAccount+">", "to myself"))
	if want := []string{"SENT", "INBOX", "UNREAD"}; !slices.Equal(sent.LabelIds, want) {
		t.Errorf("labels: got %v, want %v", sent.LabelIds, want)
	}
	if tr := srv.Lookup("", msgID(1)); tr.Count != 1 || tr.Deliveries != 1 {
		t.Errorf("truth: %+v, want one copy, one delivery", tr)
	}
}

func TestGmailLikeLenientQueries(t *testing.T) {
	for _, strict := range []bool{false, true} {
		_, svc, base := emulator(t, gmailfake.Options{StrictQueries: strict})
		send(t, svc, rawMessage(msgID(1), "a@example.org", "q"))
		for _, q := range []string{"shipped", "subject:shipped", "rfc822msgid:<abc", "{", "after:yesterday"} {
			resp, err := http.Get(base + "/gmail/v1/users/me/messages?q=" + url.QueryEscape(q))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case strict && resp.StatusCode != http.StatusBadRequest:
				t.Errorf("strict %q: %d %s, want 400", q, resp.StatusCode, body)
			case !strict && (resp.StatusCode != 200 || strings.Contains(string(body), `"messages"`)):
				t.Errorf("lenient %q: %d %s, want 200 without a messages field", q, resp.StatusCode, body)
			}
		}
	}
}

func TestGmailLikeAfterBefore(t *testing.T) {
	clk := testclock.New()
	_, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now})
	var ids []string // oldest first, 10 s apart
	for i := range 6 {
		ids = append(ids, send(t, svc, rawMessage(msgID(i), "a@example.org", "d")).Id)
		clk.Advance(10 * time.Second)
	}
	t0 := clk.Now().Add(-60 * time.Second).Unix() // the first message's second
	epoch := func(d int64) string { return itoa(t0 + d) }
	newestFirst := func(idx ...int) []string {
		var out []string
		for _, i := range slices.Backward(idx) {
			out = append(out, ids[i])
		}
		return out
	}
	cases := []struct {
		q    string
		want []string
	}{
		{"after:" + epoch(25), newestFirst(3, 4, 5)},
		{"after:" + epoch(30), newestFirst(3, 4, 5)}, // after: is inclusive, to the second
		{"before:" + epoch(30), newestFirst(0, 1, 2)},
		{"after:" + epoch(15) + " before:" + epoch(45), newestFirst(2, 3, 4)},
		{"newer:" + epoch(45) + " OR older:" + epoch(5), newestFirst(0, 5)},
		{"after:" + epoch(1) + " rfc822msgid:" + msgID(4), newestFirst(4)},
		{"after:" + epoch(100), nil},
		{"after:2026/12/02", newestFirst(0, 1, 2, 3, 4, 5)}, // the clock reads 2026-12-02 09:00 UTC
		{"before:2026/12/02", nil},
		{"after:2026/12/3", nil},
	}
	for _, tc := range cases {
		t.Run(tc.q, func(t *testing.T) {
			if got := search(t, svc, tc.q); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGmailLikeSentDedupe(t *testing.T) {
	for _, dedupe := range []bool{true, false} {
		srv, svc, base := emulator(t, gmailfake.Options{SentDedupe: dedupe})
		first := send(t, svc, rawMessage(msgID(1), "a@example.org", "twice"))
		second := send(t, svc, rawMessage(msgID(1), "a@example.org", "twice"))
		_, body := do(t, http.MethodGet, base+"/_emulator/messages?rfc822msgid="+url.QueryEscape(msgID(1)), "")
		wantCount := 2.0
		if dedupe {
			wantCount = 1
			if second.Id != first.Id || second.ThreadId != first.ThreadId {
				t.Errorf("folded send answered %s/%s, want the first copy %s/%s", second.Id, second.ThreadId, first.Id, first.ThreadId)
			}
		} else if second.Id == first.Id {
			t.Errorf("without dedupe both sends answered %s", first.Id)
		}
		if body["count"] != wantCount || body["deliveries"] != 2.0 {
			t.Errorf("dedupe %v: truth %v, want count %v and deliveries 2", dedupe, body, wantCount)
		}
		if got := srv.Deliveries(msgID(1)); got != 2 {
			t.Errorf("Deliveries: got %d, want 2", got)
		}
	}
}

func TestGmailLikeQuotaRetryHeaderOption(t *testing.T) {
	clk := testclock.New()
	_, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: 100, RateLimitHeader: true})
	send(t, svc, rawMessage(msgID(1), "a@example.org", "1"))
	_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(2), "a@example.org", "2"))}).Do()
	ge := apiError(t, err, http.StatusTooManyRequests, "rateLimitExceeded")
	if got := ge.Header.Get("Retry-After"); got != "60" {
		t.Errorf("Retry-After: got %q, want 60", got)
	}
	if at := retryAfterInMessage(t, ge.Message); !at.Equal(clk.Now().Add(time.Minute)) {
		t.Errorf("retry time: got %v, want %v", at, clk.Now().Add(time.Minute))
	}
}

func TestGmailLikeDailySendLimit(t *testing.T) {
	const limit = 2000
	clk := testclock.New()
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: plenty, DailySendLimit: limit})
	start := clk.Now()
	for i := range limit {
		send(t, svc, rawMessage(msgID(i), "a@example.org", "d"))
		clk.Advance(30 * time.Second) // 2,000 sends in 16 h 40 min
	}
	_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(limit), "a@example.org", "d"))}).Do()
	ge := apiError(t, err, http.StatusTooManyRequests, "rateLimitExceeded")
	if !strings.HasPrefix(ge.Message, "Daily user sending limit exceeded. Retry after ") {
		t.Errorf("message: %q", ge.Message)
	}
	if v := ge.Header.Get("Retry-After"); v != "" {
		t.Errorf("Retry-After header %q, want none", v)
	}
	at := retryAfterInMessage(t, ge.Message)
	if want := start.Add(24 * time.Hour); !at.Equal(want) {
		t.Errorf("retry time: got %v, want %v (the first send leaves the window)", at, want)
	}
	if tr := srv.Lookup("", msgID(limit)); tr.Count != 0 || tr.Deliveries != 0 {
		t.Errorf("refused send stored: %+v", tr)
	}
	if st := srv.Stats(); st.DailyLimited != 1 || st.Deliveries != limit {
		t.Errorf("stats: %+v", st)
	}
	clk.Advance(at.Sub(clk.Now()) - time.Millisecond)
	_, err = svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(limit), "a@example.org", "d"))}).Do()
	apiError(t, err, http.StatusTooManyRequests, "rateLimitExceeded")
	clk.Advance(time.Millisecond)
	send(t, svc, rawMessage(msgID(limit), "a@example.org", "d"))
	_, err = svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(limit+1), "a@example.org", "d"))}).Do()
	apiError(t, err, http.StatusTooManyRequests, "rateLimitExceeded") // the window is full again
}

func TestGmailLikeCosts(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{Costs: map[string]int{gmailfake.MethodGet: 20, gmailfake.MethodList: 5}})
	sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "c"))
	if _, err := svc.Users.Messages.Get("me", sent.Id).Do(); err != nil {
		t.Fatal(err)
	}
	if got := srv.Stats().QuotaUnits; got != 120 {
		t.Errorf("units: got %d, want 100 + 20", got)
	}
}

func TestGmailLikeAccounts(t *testing.T) {
	const a, b = "support@example.com", "billing@example.com"
	clk := testclock.New()
	srv, base := gmailfake.NewTestServer(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: 250, DailySendLimit: 2,
		Accounts: []string{a, b}, Tokens: map[string]string{"ta": a, "tb": b}})
	svcA := client(t, base, option.WithHTTPClient(bearerClient("ta")))
	svcB := client(t, base, option.WithHTTPClient(bearerClient("tb")))
	if got := srv.Account(); got != a {
		t.Errorf("primary: got %s, want %s", got, a)
	}

	sa := send(t, svcA, rawMessage(msgID(1), "x@example.org", "a"))
	if _, err := svcB.Users.Messages.Get("me", sa.Id).Do(); err == nil {
		t.Errorf("B read A's message")
	}
	sb, err := svcB.Users.Messages.Send(b, &gmail.Message{Raw: b64(rawMessage(msgID(2), "x@example.org", "b"))}).Do()
	if err != nil {
		t.Fatalf("send as %s by address: %v", b, err)
	}
	_, err = svcB.Users.Messages.List(a).Do()
	apiError(t, err, http.StatusForbidden, "forbidden")
	if got := search(t, svcA, ""); !slices.Equal(got, []string{sa.Id}) {
		t.Errorf("A lists %v, want only %s", got, sa.Id)
	}
	if got := search(t, svcB, ""); !slices.Equal(got, []string{sb.Id}) {
		t.Errorf("B lists %v, want only %s", got, sb.Id)
	}
	if m := srv.Lookup(b, ""); m.Count != 1 || m.Messages[0].Account != b || !strings.Contains(string(m.Messages[0].Raw), "From: <"+b+">") &&
		!strings.Contains(string(m.Messages[0].Raw), b) {
		t.Errorf("B's truth: %+v", m)
	}

	// Quota: A has 250 − 100 − 5 = 145 left (one more send); B 150.
	send(t, svcA, rawMessage(msgID(3), "x@example.org", "a2"))
	_, err = svcA.Users.Messages.List("me").Do() // 40 left: a list fits
	if err != nil {
		t.Fatal(err)
	}
	_, err = svcA.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(4), "x@example.org", "a3"))}).Do()
	apiError(t, err, http.StatusTooManyRequests, "rateLimitExceeded")
	// Daily limit: A has spent its 2; B sends its second.
	send(t, svcB, rawMessage(msgID(5), "x@example.org", "b2"))
	clk.Advance(time.Minute) // quota refilled; A's daily limit still spent
	_, err = svcA.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(4), "x@example.org", "a3"))}).Do()
	ge := apiError(t, err, http.StatusTooManyRequests, "rateLimitExceeded")
	if !strings.HasPrefix(ge.Message, "Daily") {
		t.Errorf("A's answer: %q, want the daily limit", ge.Message)
	}

	if st := srv.AccountStats(a); st.RateLimited != 1 || st.DailyLimited != 1 || st.Deliveries != 2 {
		t.Errorf("A's stats: %+v", st)
	}
	if st := srv.AccountStats(b); st.RateLimited != 0 || st.DailyLimited != 0 || st.Deliveries != 2 {
		t.Errorf("B's stats: %+v", st)
	}
	_, body := do(t, http.MethodGet, base+"/_emulator/stats?account="+url.QueryEscape(b), "")
	if body["deliveries"] != 2.0 || body["rateLimited"] != 0.0 || body["messages"] != 2.0 {
		t.Errorf("control stats for B: %v", body)
	}
	_, body = do(t, http.MethodGet, base+"/_emulator/messages?account="+url.QueryEscape(a), "")
	if body["count"] != 2.0 {
		t.Errorf("control messages for A: %v", body)
	}
	if status, _ := do(t, http.MethodGet, base+"/_emulator/messages?account=nobody%40example.org", ""); status != 400 {
		t.Errorf("unknown account: %d, want 400", status)
	}

	// A fault for B only.
	if status, body := do(t, http.MethodPost, base+"/_emulator/faults", `{"method":"list","action":"error","status":503,"account":"`+b+`"}`); status != 200 {
		t.Fatalf("add fault: %d %v", status, body)
	}
	if _, err := svcA.Users.Messages.List("me").Do(); err != nil {
		t.Errorf("A hit B's fault: %v", err)
	}
	_, err = svcB.Users.Messages.List("me").Do()
	apiError(t, err, http.StatusServiceUnavailable, "backendError")

	// No token at all: 401.
	_, err = client(t, base).Users.Messages.List("me").Context(context.Background()).Do()
	apiError(t, err, http.StatusUnauthorized, "authError")
}

// The ground truth of an empty Message-ID ("<>", blanks) is nothing: two
// sends that carried no Message-ID are not its deliveries. Counted (2),
// they would give a job with a blank id other sends' deliveries.
func TestEmulatorLookupOfAnEmptyMessageIDFindsNothing(t *testing.T) {
	clk := testclock.New()
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: plenty})
	send(t, svc, rawMessage("", "a@example.org", "none"))
	send(t, svc, rawMessage("", "a@example.org", "none"))
	for _, q := range []string{"<>", " ", "< >"} {
		if tr := srv.Lookup("", q); tr.Deliveries != 0 || tr.Count != 0 {
			t.Errorf("Lookup(%q) = %d deliveries, %d copies; want 0 and 0", q, tr.Deliveries, tr.Count)
		}
	}
}

// A lag distribution the Go API is given without a median or a p99 (which
// ParseIndexLag refuses) does not hide every message for good: no median
// is no lag, a p99 below the median is the median. Taken as given, the
// distribution would draw ~146 years for each message.
func TestEmulatorIncompleteLagDistributionStillIndexes(t *testing.T) {
	for name, d := range map[string]gmailfake.LagDistribution{
		"no p99":    {P50: time.Minute},
		"no median": {P99: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			clk := testclock.New()
			_, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: plenty, IndexLagDistribution: d})
			for i := range 20 {
				send(t, svc, rawMessage(msgID(i), "a@example.org", "x"))
			}
			clk.Advance(2 * time.Hour)
			res, err := svc.Users.Messages.List("me").MaxResults(100).Do()
			if err != nil || len(res.Messages) != 20 {
				t.Errorf("two hours after 20 sends the index shows %d messages (%v), want 20", len(res.Messages), err)
			}
		})
	}
}
