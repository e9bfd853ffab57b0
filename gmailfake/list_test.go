package gmailfake_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

func TestEmulatorSearchIndexLag(t *testing.T) {
	clk := testclock.New()
	_, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, IndexLag: 30 * time.Second})
	sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "lag"))

	if got := search(t, svc, "rfc822msgid:"+msgID(1)); len(got) != 0 {
		t.Errorf("before the lag: got %v, want no hit", got)
	}
	if _, err := svc.Users.Messages.Get("me", sent.Id).Format("minimal").Do(); err != nil {
		t.Errorf("get by id before the lag: %v", err)
	}
	clk.Advance(29 * time.Second)
	if got := search(t, svc, "rfc822msgid:"+msgID(1)); len(got) != 0 {
		t.Errorf("1s before the lag ends: got %v, want no hit", got)
	}
	clk.Advance(time.Second)
	if got := search(t, svc, "rfc822msgid:"+msgID(1)); !slices.Equal(got, []string{sent.Id}) {
		t.Errorf("after the lag: got %v, want [%s]", got, sent.Id)
	}
}

func TestEmulatorQueries(t *testing.T) {
	// Strict queries: the parser's refusals are asserted as 400s here;
	// TestEmulatorLenientQueries covers Gmail's silent empty answer.
	srv, svc, _ := emulator(t, gmailfake.Options{StrictQueries: true})
	ids := map[int]string{}
	for i := 1; i <= 4; i++ {
		ids[i] = send(t, svc, rawMessage(msgID(i), "a@example.org", "q")).Id
	}
	bare := func(i int) string { return strings.Trim(msgID(i), "<>") }
	cases := []struct {
		q    string
		want []int // newest first
	}{
		{"rfc822msgid:" + msgID(2), []int{2}},
		{"rfc822msgid:" + bare(2), []int{2}},
		{"RFC822MSGID:" + bare(2), []int{2}},
		{`rfc822msgid:"` + msgID(2) + `"`, []int{2}},
		{"rfc822msgid:" + bare(1) + " OR rfc822msgid:" + msgID(3), []int{3, 1}},
		{"{rfc822msgid:" + bare(1) + " rfc822msgid:" + bare(3) + " rfc822msgid:" + msgID(4) + "}", []int{4, 3, 1}},
		{"in:sent {rfc822msgid:" + bare(1) + " rfc822msgid:" + bare(2) + "}", []int{2, 1}},
		{"label:sent rfc822msgid:" + bare(4), []int{4}},
		{"label:SENT rfc822msgid:" + bare(4), []int{4}},
		{"in:sent", []int{4, 3, 2, 1}},
		{"", []int{4, 3, 2, 1}},
		{"rfc822msgid:" + bare(1) + " rfc822msgid:" + bare(2), nil}, // implicit AND
		{"label:inbox", nil},
		{"rfc822msgid:nobody@nowhere", nil},
		{"(rfc822msgid:" + bare(1) + " OR rfc822msgid:" + bare(2) + ") in:sent", []int{2, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.q, func(t *testing.T) {
			var want []string
			for _, i := range tc.want {
				want = append(want, ids[i])
			}
			if got := search(t, svc, tc.q); !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
	invalid := []string{
		"shipped",                            // free text
		"from:shop@example.com",              // unsupported operator
		"rfc822msgid:",                       // no value
		"rfc822msgid:<>",                     // empty id
		"rfc822msgid:<abc",                   // unclosed bracket
		"{rfc822msgid:a@b",                   // unclosed brace
		"{}",                                 // empty group
		"rfc822msgid:a@b OR",                 // dangling OR
		"OR rfc822msgid:a@b",                 // leading OR
		"rfc822msgid:a@b or rfc822msgid:c@d", // lower-case or is free text
		"-in:sent",                           // negation is not emulated
		")",
	}
	for _, q := range invalid {
		t.Run("invalid "+q, func(t *testing.T) {
			_, err := svc.Users.Messages.List("me").Q(q).Do()
			apiError(t, err, http.StatusBadRequest, "invalidArgument")
		})
	}
	if n := srv.Stats().Calls["list"]; n != len(cases)+len(invalid) {
		t.Errorf("list calls: got %d, want %d", n, len(cases)+len(invalid))
	}
}

func TestEmulatorListLabelIDs(t *testing.T) {
	_, svc, _ := emulator(t, gmailfake.Options{})
	sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "labels"))
	cases := []struct {
		labels []string
		want   int
	}{
		{[]string{"SENT"}, 1},
		{[]string{"SENT", "INBOX"}, 0}, // all must match
		{[]string{"INBOX"}, 0},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.labels, ","), func(t *testing.T) {
			r, err := svc.Users.Messages.List("me").LabelIds(tc.labels...).IncludeSpamTrash(true).Do()
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Messages) != tc.want || int(r.ResultSizeEstimate) != tc.want {
				t.Fatalf("got %d messages (estimate %d), want %d", len(r.Messages), r.ResultSizeEstimate, tc.want)
			}
			if tc.want == 1 && (r.Messages[0].Id != sent.Id || r.Messages[0].ThreadId != sent.ThreadId) {
				t.Errorf("got %+v, want id %s thread %s", r.Messages[0], sent.Id, sent.ThreadId)
			}
		})
	}
}

func TestEmulatorPagination1200(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{QuotaPerMinute: 1 << 30})
	const n = 1200
	var order []string
	for i := range n {
		order = append(order, send(t, svc, rawMessage(msgID(i), "a@example.org", "page")).Id)
	}
	slices.Reverse(order) // Gmail lists newest first
	if got := srv.Count(""); got != n {
		t.Fatalf("stored: got %d, want %d", got, n)
	}
	for _, tc := range []struct {
		maxResults int64
		pages      []int
	}{
		{0, []int{100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100}}, // default 100
		{500, []int{500, 500, 200}},
		{1000, []int{500, 500, 200}}, // capped at 500
		{7, nil},                     // checked by total only
	} {
		t.Run("maxResults="+strconv.FormatInt(tc.maxResults, 10), func(t *testing.T) {
			var got []string
			var sizes []int
			call := svc.Users.Messages.List("me").Q("in:sent")
			if tc.maxResults > 0 {
				call = call.MaxResults(tc.maxResults)
			}
			first := true
			err := call.Pages(context.Background(), func(r *gmail.ListMessagesResponse) error {
				if first && r.ResultSizeEstimate != n {
					t.Errorf("first page resultSizeEstimate: got %d, want %d", r.ResultSizeEstimate, n)
				}
				first = false
				sizes = append(sizes, len(r.Messages))
				for _, m := range r.Messages {
					got = append(got, m.Id)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.pages != nil && !slices.Equal(sizes, tc.pages) {
				t.Errorf("page sizes: got %v, want %v", sizes, tc.pages)
			}
			if !slices.Equal(got, order) {
				t.Errorf("ids over all pages: got %d ids, want the %d sent, newest first", len(got), n)
			}
		})
	}
}

func TestEmulatorListEmptyShape(t *testing.T) {
	_, _, url := emulator(t, gmailfake.Options{})
	status, body := do(t, http.MethodGet, url+"/gmail/v1/users/me/messages?alt=json&prettyPrint=false&q=rfc822msgid%3Anobody%40example.com", "")
	if status != http.StatusOK {
		t.Fatalf("status: got %d, want 200", status)
	}
	if _, ok := body["messages"]; ok {
		t.Errorf("empty result carries a messages key: %v", body)
	}
	if got, ok := body["resultSizeEstimate"].(float64); !ok || got != 0 {
		t.Errorf("resultSizeEstimate: got %v, want 0", body["resultSizeEstimate"])
	}
	if _, ok := body["nextPageToken"]; ok {
		t.Errorf("empty result carries a nextPageToken: %v", body)
	}
}

func TestEmulatorPageTokenStableUnderNewMail(t *testing.T) {
	_, svc, _ := emulator(t, gmailfake.Options{})
	var ids []string
	for i := range 3 {
		ids = append(ids, send(t, svc, rawMessage(msgID(i), "a@example.org", "p")).Id)
	}
	first, err := svc.Users.Messages.List("me").MaxResults(2).Do()
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Messages) != 2 || first.Messages[0].Id != ids[2] || first.NextPageToken == "" {
		t.Fatalf("first page: got %+v", first)
	}
	send(t, svc, rawMessage(msgID(9), "a@example.org", "arrived between pages"))
	second, err := svc.Users.Messages.List("me").MaxResults(2).PageToken(first.NextPageToken).Do()
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Messages) != 1 || second.Messages[0].Id != ids[0] || second.NextPageToken != "" {
		t.Errorf("second page: got %+v, want only %s and no further page", second.Messages, ids[0])
	}
}
