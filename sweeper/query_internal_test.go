package sweeper

import (
	"context"
	"slices"
	"testing"

	"github.com/gmailrelay/gmailrelay/acceptlog"
	"github.com/gmailrelay/gmailrelay/gmailapi"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/relay"
)

func TestQueryLeavesOutUnsearchableIDs(t *testing.T) {
	jobs := []acceptlog.Job{
		{MessageID: "<a@x.example>"},
		{MessageID: "<p}q@attacker.example>"},
		{MessageID: "<x@[}OR(in:sent)OR{in:x]>"},
		{MessageID: "<b@x.example>"},
	}
	q, searched := query(jobs)
	if want := "{rfc822msgid:a@x.example rfc822msgid:b@x.example}"; q != want {
		t.Errorf("query = %q, want %q", q, want)
	}
	if len(searched) != 2 || searched[0].MessageID != "<a@x.example>" || searched[1].MessageID != "<b@x.example>" {
		t.Errorf("searched = %v, want the two valid jobs", searched)
	}
	if q, searched := query(jobs[1:3]); q != "" || len(searched) != 0 {
		t.Errorf("query of only bad ids = %q, %v; want nothing", q, searched)
	}
}

// FuzzQuery: for ids that pass relay.CheckMessageIDShape, the emulator's
// messages.list with query's q returns exactly the messages carrying
// those ids (decoys in the same mailbox never come back).
func FuzzQuery(f *testing.F) {
	_, url := gmailfake.NewTestServer(f, gmailfake.Options{StrictQueries: true})
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
	f.Add("<a@x.example>", "<b.c@y.example>", "<%6Aob@z>")
	f.Add("<!#$%&'*+-/=?^_`~@x>", "<a@x.example>", "<a@x.example>")
	f.Add("<p}q@attacker.example>", "<x@[}OR(in:sent)OR{in:x]>", "<ok@x>")
	f.Add("<a-b@c-d>", "<OR@x>", "<in:sent@x>")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		send(t, "<decoy-1@decoy.example>")
		var jobs []acceptlog.Job
		var want []string
		for _, id := range []string{a, b, c} {
			if relay.CheckMessageIDShape(id) != nil || slices.ContainsFunc(jobs, func(j acceptlog.Job) bool { return j.MessageID == id }) {
				continue
			}
			send(t, id)
			jobs = append(jobs, acceptlog.Job{MessageID: id})
			want = append(want, sent[id])
		}
		q, searched := query(jobs)
		if len(searched) != len(jobs) {
			t.Fatalf("query(%v) searched %d of %d valid ids", jobs, len(searched), len(jobs))
		}
		if len(jobs) == 0 {
			return
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
