package sweeper

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

func TestSearchQueryQuotesEveryValue(t *testing.T) {
	cases := []struct {
		ids  []string
		want string
	}{
		{[]string{"<a@b>"}, `rfc822msgid:"a@b"`},
		{[]string{"<a@b>", "<c.d@e>"}, `{rfc822msgid:"a@b" rfc822msgid:"c.d@e"}`},
		{[]string{"<!#$%&'*+-/=?^_`~@x>"}, "rfc822msgid:\"!#$%&'*+-/=?^_`~@x\""},
	}
	for _, c := range cases {
		got, err := searchQuery(c.ids)
		if err != nil || got != c.want {
			t.Errorf("searchQuery(%q) = %q, %v; want %q", c.ids, got, err, c.want)
		}
	}
}

// Ids carrying Gmail search syntax (docs/guarantees.md#defences): put into
// the query as they come, they would break every batch holding them or
// turn the search into one matching all sent mail.
func TestSearchQueryRefusesWhatItCannotQuote(t *testing.T) {
	for _, id := range []string{
		"<p}q@attacker.example>", "<x@[}OR(in:sent)OR{in:x]>", `<a"b@c>`, "<a b@c>", "<a|b@c>",
		"<a:b@c>", "<a(b)@c>", "<a@b>c>", "a@b", "<>", "<é@x>",
	} {
		if q, err := searchQuery([]string{"<ok@x>", id}); err == nil {
			t.Errorf("searchQuery(%q) = %q, want an error", id, q)
		}
	}
	if _, err := searchQuery(nil); err == nil {
		t.Errorf("searchQuery(nil) built a query")
	}
}

// splitIDs turns fuzz input into up to six distinct bracketed ids.
func splitIDs(in string) []string {
	var ids []string
	for _, s := range strings.SplitN(in, "\n", 6) {
		if !strings.HasPrefix(s, "<") {
			s = "<" + s + ">"
		}
		if !slices.Contains(ids, s) {
			ids = append(ids, s)
		}
	}
	return ids
}

var querySeeds = []string{
	"a@b", "a@b\nc.d@e.f", "p}q@attacker.example", "x@[}OR(in:sent)OR{in:x]", `a"b@c`, "a b@c",
	"job-1ca74402c25f227b40cf235d910d7664@inbound.yourdomain.com", "-a@b\nOR@b", "in:sent@x", "*@*",
	"a@b\na@b", "'@'\n`@~", "a%20b@c", "<a@b>", "a@b>\n<c@d", "OR@OR\nin:x@y",
}

// FuzzSearchQuery: a query searchQuery builds, parsed by the emulator's
// own parser (gmailfake.QueryMessageIDs), means exactly "these ids,
// OR-ed": the same ids, in order, and nothing else (no label, date or AND
// term, no id split or merged).
func FuzzSearchQuery(f *testing.F) {
	for _, s := range querySeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		ids := splitIDs(in)
		q, err := searchQuery(ids)
		if err != nil {
			return
		}
		got, err := gmailfake.QueryMessageIDs(q)
		if err != nil {
			t.Fatalf("ids %q: query %q does not parse as an OR of ids: %v", ids, q, err)
		}
		want := make([]string, len(ids))
		for i, id := range ids {
			want[i] = id[1 : len(id)-1]
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ids %q: query %q parses as %q", ids, q, got)
		}
	})
}

// FuzzSearchQueryAtTheEmulator: for ids searchQuery accepts, the emulator's
// messages.list with its q returns exactly the messages carrying those ids
// (a decoy and near misses in the same mailbox never come back).
func FuzzSearchQueryAtTheEmulator(f *testing.F) {
	_, url := gmailfake.NewTestServer(f, gmailfake.Options{StrictQueries: true, QuotaPerMinute: 1 << 30})
	gm, err := gmailapi.New(context.Background(), gmailapi.Config{Endpoint: url})
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	sent := map[string]string{} // Message-ID → Gmail id
	send := func(t *testing.T, id string) {
		if _, ok := sent[id]; ok {
			return
		}
		raw := "From: me@example.org\r\nTo: a@example.org\r\nSubject: s\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
		m, err := gm.Send(ctx, "me", []byte(raw), "")
		if err != nil {
			t.Fatalf("send %s: %v", id, err)
		}
		sent[id] = m.ID
	}
	for _, s := range querySeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		send(t, "<decoy-1@decoy.example>")
		ids := splitIDs(in)
		q, err := searchQuery(ids)
		if err != nil {
			return
		}
		var want []string
		for _, id := range ids {
			send(t, id)
			want = append(want, sent[id])
			if near := "<x" + id[1:]; relay.CheckMessageIDShape(near) == nil {
				send(t, near)
			}
		}
		var got []string
		token := ""
		for {
			page, err := gm.List(ctx, "me", q, []string{"SENT"}, token, 500)
			if err != nil {
				t.Fatalf("list %q: %v", q, err)
			}
			got = append(got, page.IDs...)
			if token = page.NextPageToken; token == "" {
				break
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("q %q: got %v, want %v", q, got, want)
		}
	})
}

// jobsQuery is searchQuery over jobs' Message-IDs.
func TestJobsQuery(t *testing.T) {
	q, err := jobsQuery([]gmailrelay.Job{{MessageID: "<a@x>"}, {MessageID: "<b@y>"}})
	if err != nil || q != `{rfc822msgid:"a@x" rfc822msgid:"b@y"}` {
		t.Fatalf("jobsQuery = %q, %v", q, err)
	}
}

// The window check before a resend knows both shapes of a Message-ID Gmail
// makes when it replaces a client's: its clients' (and the emulator's)
// <…@mail.gmail.com> and its servers' <hex.hex.hex.hex@mx.google.com> (the
// shape public kernel-list copies of rewritten mail carry). Knowing only
// the first, a copy stored under the second would not be a suspect, and
// the job would be resent.
func TestGmailMadeIDKnowsBothShapes(t *testing.T) {
	for id, want := range map[string]bool{
		"<CA+abc/def=@mail.gmail.com>":                   true,
		"<642f5130.170a0220.2a780.356a@mx.google.com>":   true,
		" <642F5130.170A0220.2A780.356A@MX.GOOGLE.COM> ": true,
		"<job-1ca74402@inbound.example.com>":             false,
		"<a@mx.google.com.example.org>":                  false,
	} {
		if got := gmailMadeID(id); got != want {
			t.Errorf("gmailMadeID(%q) = %v, want %v", id, got, want)
		}
	}
}
