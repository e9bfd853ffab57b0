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

// profile is users.getProfile through Google's client.
func profile(t *testing.T, svc *gmail.Service) *gmail.Profile {
	t.Helper()
	p, err := svc.Users.GetProfile("me").Do()
	if err != nil {
		t.Fatalf("getProfile: %v", err)
	}
	return p
}

// history lists every record after start through Google's client's Pages,
// and returns them with the historyId of the last page and the number of
// pages.
func history(t *testing.T, call *gmail.UsersHistoryListCall) (recs []*gmail.History, last uint64, pages int) {
	t.Helper()
	err := call.Pages(context.Background(), func(r *gmail.ListHistoryResponse) error {
		pages++
		recs = append(recs, r.History...)
		last = r.HistoryId
		return nil
	})
	if err != nil {
		t.Fatalf("history.list: %v", err)
	}
	return recs, last, pages
}

// addedIDs is the message ids of the messagesAdded records, in order.
func addedIDs(recs []*gmail.History) []string {
	var ids []string
	for _, r := range recs {
		for _, m := range r.MessagesAdded {
			ids = append(ids, m.Message.Id)
		}
	}
	return ids
}

func TestGmailLikeProfile(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{QuotaPerMinute: plenty})
	empty := profile(t, svc)
	if empty.EmailAddress != gmailfake.DefaultAccount || empty.MessagesTotal != 0 || empty.ThreadsTotal != 0 {
		t.Errorf("empty mailbox: %+v", empty)
	}
	first := send(t, svc, rawMessage(msgID(1), "a@example.org", "order"))
	reply := "In-Reply-To: " + msgID(1)
	second, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(2), "a@example.org", "Re: order", reply)), ThreadId: first.ThreadId}).Do()
	if err != nil {
		t.Fatal(err)
	}
	third := send(t, svc, rawMessage(msgID(3), "a@example.org", "other"))
	if err := svc.Users.Messages.Delete("me", third.Id).Do(); err != nil {
		t.Fatal(err)
	}
	before := srv.Stats()
	p := profile(t, svc)
	if p.EmailAddress != gmailfake.DefaultAccount || p.MessagesTotal != 2 || p.ThreadsTotal != 1 {
		t.Errorf("profile: %+v, want 2 messages in 1 thread (the deleted one not counted)", p)
	}
	if p.HistoryId != srv.HistoryID("") || p.HistoryId <= second.HistoryId {
		t.Errorf("profile historyId %d: want the mailbox's current %d, after the second send's %d", p.HistoryId, srv.HistoryID(""), second.HistoryId)
	}
	after := srv.Stats()
	if after.QuotaUnits-before.QuotaUnits != gmailfake.CostProfile || after.Calls[gmailfake.MethodProfile] != 2 {
		t.Errorf("getProfile spent %d units (calls %v), want %d", after.QuotaUnits-before.QuotaUnits, after.Calls, gmailfake.CostProfile)
	}
}

// TestGmailLikeHistoryPaging sends 25 messages and reads their history ten
// records a page: three pages, oldest first, ids increasing but not
// contiguous, each messagesAdded carrying the message's id, thread and
// labels, and the last page answering the mailbox's current historyId.
func TestGmailLikeHistoryPaging(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{QuotaPerMinute: plenty})
	start := profile(t, svc).HistoryId
	var sent []*gmail.Message
	for i := range 25 {
		m := send(t, svc, rawMessage(msgID(i), "a@example.org", "p"))
		if m.HistoryId == 0 {
			t.Fatalf("send %d answered no historyId", i)
		}
		sent = append(sent, m)
	}
	before := srv.Stats()
	recs, last, pages := history(t, svc.Users.History.List("me").StartHistoryId(start).MaxResults(10))
	if pages != 3 || len(recs) != 25 {
		t.Fatalf("got %d records in %d pages, want 25 in 3", len(recs), pages)
	}
	if spent := srv.Stats().QuotaUnits - before.QuotaUnits; spent != 3*gmailfake.CostHistory {
		t.Errorf("three pages spent %d units, want %d", spent, 3*gmailfake.CostHistory)
	}
	contiguous := true
	for i, r := range recs {
		m := sent[i]
		if r.Id != m.HistoryId {
			t.Errorf("record %d: id %d, want the send's historyId %d", i, r.Id, m.HistoryId)
		}
		if i > 0 && r.Id <= recs[i-1].Id {
			t.Errorf("record %d: id %d not after %d", i, r.Id, recs[i-1].Id)
		}
		if i > 0 && r.Id != recs[i-1].Id+1 {
			contiguous = false
		}
		if len(r.MessagesAdded) != 1 || len(r.Messages) != 1 || len(r.LabelsAdded)+len(r.LabelsRemoved)+len(r.MessagesDeleted) != 0 {
			t.Fatalf("record %d: %+v, want one messagesAdded", i, r)
		}
		add := r.MessagesAdded[0].Message
		if add.Id != m.Id || add.ThreadId != m.ThreadId || !slices.Equal(add.LabelIds, []string{"SENT"}) {
			t.Errorf("record %d: added %+v, want %s in %s labelled SENT", i, add, m.Id, m.ThreadId)
		}
		if r.Messages[0].Id != m.Id || r.Messages[0].ThreadId != m.ThreadId || r.Messages[0].LabelIds != nil {
			t.Errorf("record %d: messages %+v, want only id and threadId", i, r.Messages[0])
		}
	}
	if contiguous {
		t.Errorf("history ids are contiguous; Gmail's are not")
	}
	if last != srv.HistoryID("") || last != sent[24].HistoryId {
		t.Errorf("last page's historyId %d, want the mailbox's %d", last, srv.HistoryID(""))
	}
	got, err := svc.Users.Messages.Get("me", sent[3].Id).Format("minimal").Do()
	if err != nil || got.HistoryId != sent[3].HistoryId {
		t.Errorf("messages.get historyId: %v %v, want %d", got, err, sent[3].HistoryId)
	}

	// From the middle: only what follows; from the end: nothing, same id.
	recs, _, _ = history(t, svc.Users.History.List("me").StartHistoryId(sent[19].HistoryId))
	if ids := addedIDs(recs); len(ids) != 5 || ids[0] != sent[20].Id {
		t.Errorf("after the 20th send: %v, want the last 5", ids)
	}
	resp, err := svc.Users.History.List("me").StartHistoryId(last).Do()
	if err != nil || len(resp.History) != 0 || resp.NextPageToken != "" || resp.HistoryId != last {
		t.Errorf("from the current historyId: %+v %v, want no records and historyId %d", resp, err, last)
	}
}

// TestGmailLikeHistoryTrashUntrashDelete: trash and untrash (through the
// API and by hand) are labelsAdded / labelsRemoved of TRASH, delete is
// messagesDeleted, a self-send is added with INBOX, and labelId and
// historyTypes filter the records.
func TestGmailLikeHistoryTrashUntrashDelete(t *testing.T) {
	srv, svc, base := emulator(t, gmailfake.Options{})
	start := profile(t, svc).HistoryId
	a := send(t, svc, rawMessage(msgID(1), "a@example.org", "t"))
	self := send(t, svc, rawMessage(msgID(2), gmailfake.DefaultAccount, "note to self"))
	tr, err := svc.Users.Messages.Trash("me", a.Id).Do()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Users.Messages.Untrash("me", a.Id).Do(); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Users.Messages.Untrash("me", a.Id).Do(); err != nil { // not trashed: no change, no record
		t.Fatal(err)
	}
	if status, body := do(t, http.MethodPost, base+"/_emulator/messages/"+self.Id+"/trash", ""); status != 200 {
		t.Fatalf("trash by hand: %d %v", status, body)
	}
	if err := svc.Users.Messages.Delete("me", a.Id).Do(); err != nil {
		t.Fatal(err)
	}

	recs, last, _ := history(t, svc.Users.History.List("me").StartHistoryId(start))
	type want struct {
		kind, id string
		labels   []string // labels added or removed, or the added message's
	}
	wants := []want{
		{"added", a.Id, []string{"SENT"}},
		{"added", self.Id, []string{"SENT", "INBOX", "UNREAD"}},
		{"labelAdded", a.Id, []string{"TRASH"}},
		{"labelRemoved", a.Id, []string{"TRASH"}},
		{"labelAdded", self.Id, []string{"TRASH"}},
		{"deleted", a.Id, nil},
	}
	if len(recs) != len(wants) {
		t.Fatalf("got %d records, want %d: %+v", len(recs), len(wants), recs)
	}
	for i, w := range wants {
		r := recs[i]
		var kind, id string
		var labels []string
		switch {
		case len(r.MessagesAdded) == 1:
			kind, id, labels = "added", r.MessagesAdded[0].Message.Id, r.MessagesAdded[0].Message.LabelIds
		case len(r.LabelsAdded) == 1:
			kind, id, labels = "labelAdded", r.LabelsAdded[0].Message.Id, r.LabelsAdded[0].LabelIds
		case len(r.LabelsRemoved) == 1:
			kind, id, labels = "labelRemoved", r.LabelsRemoved[0].Message.Id, r.LabelsRemoved[0].LabelIds
		case len(r.MessagesDeleted) == 1:
			kind, id = "deleted", r.MessagesDeleted[0].Message.Id
		}
		if kind != w.kind || id != w.id || !slices.Equal(labels, w.labels) {
			t.Errorf("record %d: %s %s %v, want %s %s %v", i, kind, id, labels, w.kind, w.id, w.labels)
		}
	}
	if recs[2].Id != tr.HistoryId {
		t.Errorf("trash record id %d, want the trash answer's historyId %d", recs[2].Id, tr.HistoryId)
	}
	if got := recs[2].LabelsAdded[0].Message.LabelIds; !slices.Equal(got, []string{"SENT", "TRASH"}) {
		t.Errorf("trashed message's labels in the record: %v, want [SENT TRASH]", got)
	}
	if last != srv.HistoryID("") || last != recs[5].Id {
		t.Errorf("historyId %d, want the delete's %d", last, recs[5].Id)
	}

	inbox, _, _ := history(t, svc.Users.History.List("me").StartHistoryId(start).LabelId("INBOX"))
	if len(inbox) != 2 || inbox[0].Id != recs[1].Id || inbox[1].Id != recs[4].Id {
		t.Errorf("labelId=INBOX: %+v, want the self-send's two records", inbox)
	}
	trash, _, _ := history(t, svc.Users.History.List("me").StartHistoryId(start).LabelId("TRASH"))
	if len(trash) != 3 {
		t.Errorf("labelId=TRASH: %d records, want the 3 that add or remove it", len(trash))
	}
	sent, _, _ := history(t, svc.Users.History.List("me").StartHistoryId(start).LabelId("SENT"))
	if len(sent) != 6 {
		t.Errorf("labelId=SENT: %d records, want all 6", len(sent))
	}
	typed, _, _ := history(t, svc.Users.History.List("me").StartHistoryId(start).HistoryTypes("labelRemoved", "messageDeleted"))
	if len(typed) != 2 || typed[0].Id != recs[3].Id || typed[1].Id != recs[5].Id {
		t.Errorf("historyTypes=labelRemoved,messageDeleted: %+v", typed)
	}
}

// TestGmailLikeMetadataHeadersOnly: format=metadata with metadataHeaders
// answers only those headers (names matched without case), no body, no
// parts, no raw.
func TestGmailLikeMetadataHeadersOnly(t *testing.T) {
	_, svc, _ := emulator(t, gmailfake.Options{})
	sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "meta", "X-Gmailrelay-Job: abc123"))
	m, err := svc.Users.Messages.Get("me", sent.Id).Format("metadata").MetadataHeaders("MESSAGE-ID", "x-gmailrelay-job").Do()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range m.Payload.Headers {
		names = append(names, h.Name+"="+h.Value)
	}
	if want := []string{"Message-ID=" + msgID(1), "X-Gmailrelay-Job=abc123"}; !slices.Equal(names, want) {
		t.Errorf("headers: %v, want %v", names, want)
	}
	if m.Payload.Body != nil || len(m.Payload.Parts) != 0 || m.Raw != "" {
		t.Errorf("metadata carries a body, parts or raw: %+v", m.Payload)
	}
	if m.HistoryId != sent.HistoryId || !slices.Equal(m.LabelIds, []string{"SENT"}) {
		t.Errorf("historyId %d labels %v, want %d [SENT]", m.HistoryId, m.LabelIds, sent.HistoryId)
	}
}

// TestGmailLikeHistoryExpiredCursor: a cursor some dropped record followed
// answers 404 notFound (Gmail's answer to an out-of-date startHistoryId);
// the current historyId of a quiet mailbox stays good however old; an id
// never handed out and one from before a Reset are 404 too.
func TestGmailLikeHistoryExpiredCursor(t *testing.T) {
	clk := testclock.New()
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now})
	old := profile(t, svc).HistoryId
	first := send(t, svc, rawMessage(msgID(1), "a@example.org", "x"))
	clk.Advance(gmailfake.DefaultHistoryRetention - time.Second)
	if _, err := svc.Users.History.List("me").StartHistoryId(old).Do(); err != nil {
		t.Fatalf("a cursor under a week old: %v", err)
	}
	clk.Advance(2 * time.Second)
	_, err := svc.Users.History.List("me").StartHistoryId(old).Do()
	ge := apiError(t, err, http.StatusNotFound, "notFound")
	if ge.Message != "Requested entity was not found." {
		t.Errorf("message %q", ge.Message)
	}
	quiet := profile(t, svc).HistoryId
	if quiet != first.HistoryId {
		t.Errorf("profile historyId %d after the record expired, want %d", quiet, first.HistoryId)
	}
	clk.Advance(30 * 24 * time.Hour)
	resp, err := svc.Users.History.List("me").StartHistoryId(quiet).Do()
	if err != nil || resp.HistoryId != quiet {
		t.Errorf("the current historyId of a quiet mailbox, a month on: %+v %v, want 200 and %d", resp, err, quiet)
	}
	_, err = svc.Users.History.List("me").StartHistoryId(quiet + 1000).Do()
	apiError(t, err, http.StatusNotFound, "notFound")

	srv.SetHistoryRetention(time.Hour)
	next := send(t, svc, rawMessage(msgID(2), "a@example.org", "y"))
	clk.Advance(time.Hour + time.Second)
	send(t, svc, rawMessage(msgID(3), "a@example.org", "z"))
	_, err = svc.Users.History.List("me").StartHistoryId(quiet).Do()
	apiError(t, err, http.StatusNotFound, "notFound")
	recs, _, _ := history(t, svc.Users.History.List("me").StartHistoryId(next.HistoryId))
	if len(recs) != 1 {
		t.Errorf("from a kept record: %d records, want 1", len(recs))
	}

	cur := srv.HistoryID("")
	srv.Reset()
	_, err = svc.Users.History.List("me").StartHistoryId(cur).Do()
	apiError(t, err, http.StatusNotFound, "notFound")
	if p := profile(t, svc); p.HistoryId < cur || p.MessagesTotal != 0 {
		t.Errorf("profile after Reset: %+v, want no messages and a historyId not below %d", p, cur)
	}
}

// TestGmailLikeHistoryLag: under a fixed history lag a record is not listed
// before the lag and is after it, and the listing's historyId does not run
// past it.
func TestGmailLikeHistoryLag(t *testing.T) {
	clk := testclock.New()
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, HistoryLag: 30 * time.Second, IndexLag: time.Hour})
	start := profile(t, svc).HistoryId
	m := send(t, svc, rawMessage(msgID(1), "a@example.org", "lag"))
	clk.Advance(29 * time.Second)
	resp, err := svc.Users.History.List("me").StartHistoryId(start).Do()
	if err != nil || len(resp.History) != 0 || resp.HistoryId != start {
		t.Fatalf("29s after the send: %+v %v, want no record and historyId %d", resp, err, start)
	}
	if p := profile(t, svc); p.HistoryId != start || srv.HistoryID("") != m.HistoryId {
		t.Errorf("profile %d, truth %d: want %d and %d", p.HistoryId, srv.HistoryID(""), start, m.HistoryId)
	}
	clk.Advance(time.Second)
	resp, err = svc.Users.History.List("me").StartHistoryId(start).Do()
	if err != nil || len(resp.History) != 1 || resp.History[0].Id != m.HistoryId || resp.HistoryId != m.HistoryId {
		t.Fatalf("30s after the send: %+v %v, want its record", resp, err)
	}
	if got := search(t, svc, "rfc822msgid:"+msgID(1)); len(got) != 0 {
		t.Errorf("search shows the message under its own hour of lag: %v", got)
	}
}

// TestGmailLikeHistoryLagNoSkip: 60 sends under a drawn history lag; a
// client that lists from the historyId each listing answered, as the sync
// guide says, sees every record exactly once and in order, although the
// draws would make later records listable first; no record is listed
// before its own lag.
func TestGmailLikeHistoryLagNoSkip(t *testing.T) {
	clk := testclock.New()
	dist := gmailfake.LagDistribution{P50: 2 * time.Second, P99: 2 * time.Minute, Max: 10 * time.Minute}
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, Seed: 5, QuotaPerMinute: plenty, HistoryLagDistribution: dist})
	cursor := profile(t, svc).HistoryId
	sentAt := map[string]time.Time{}
	var sent, seen []string
	poll := func() {
		recs, last, _ := history(t, svc.Users.History.List("me").StartHistoryId(cursor).LabelId("SENT"))
		for _, r := range recs {
			if r.Id <= cursor {
				t.Errorf("record %d at or before the cursor %d", r.Id, cursor)
			}
		}
		for _, id := range addedIDs(recs) {
			if clk.Now().Sub(sentAt[id]) < 0 {
				t.Errorf("%s listed before it was sent", id)
			}
			seen = append(seen, id)
		}
		if last < cursor {
			t.Errorf("historyId went back: %d after %d", last, cursor)
		}
		cursor = last
	}
	for i := range 60 {
		m := send(t, svc, rawMessage(msgID(i), "a@example.org", "n"))
		sent = append(sent, m.Id)
		sentAt[m.Id] = clk.Now()
		clk.Advance(time.Second)
		poll()
	}
	partial := len(seen)
	for range 20 {
		clk.Advance(time.Minute)
		poll()
	}
	if !slices.Equal(seen, sent) {
		t.Fatalf("the client saw %d records %v, want every send once, in order: %v", len(seen), seen, sent)
	}
	if partial == len(sent) || partial == 0 {
		t.Errorf("%d of %d listed while sending: the lag did not hold records back", partial, len(sent))
	}
	if cursor != srv.HistoryID("") {
		t.Errorf("cursor %d, want the mailbox's %d", cursor, srv.HistoryID(""))
	}
}

// TestGmailLikeHistoryLagPrefix: a record whose own lag is over is not
// listed while an earlier record still lags, so the answered historyId
// never passes the lagging one.
func TestGmailLikeHistoryLagPrefix(t *testing.T) {
	clk := testclock.New()
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, HistoryLag: time.Minute})
	start := profile(t, svc).HistoryId
	slow := send(t, svc, rawMessage(msgID(1), "a@example.org", "slow"))
	srv.SetHistoryLag(0)
	fast := send(t, svc, rawMessage(msgID(2), "a@example.org", "fast"))
	resp, err := svc.Users.History.List("me").StartHistoryId(start).Do()
	if err != nil || len(resp.History) != 0 || resp.HistoryId != start {
		t.Fatalf("while the first record lags: %+v %v, want nothing and historyId %d", resp, err, start)
	}
	clk.Advance(time.Minute)
	recs, last, _ := history(t, svc.Users.History.List("me").StartHistoryId(start))
	if ids := addedIDs(recs); !slices.Equal(ids, []string{slow.Id, fast.Id}) || last != fast.HistoryId {
		t.Errorf("after the lag: %v (historyId %d), want both, in order, and %d", ids, last, fast.HistoryId)
	}
}

// TestEmulatorHistoryBadParameters: a bad history.list parameter answers
// 400 with Gmail's error JSON naming it.
func TestEmulatorHistoryBadParameters(t *testing.T) {
	_, svc, base := emulator(t, gmailfake.Options{})
	send(t, svc, rawMessage(msgID(1), "a@example.org", "x"))
	for _, tc := range []struct{ query, param string }{
		{"", "startHistoryId"},
		{"startHistoryId=", "startHistoryId"},
		{"startHistoryId=0", "startHistoryId"},
		{"startHistoryId=abc", "startHistoryId"},
		{"startHistoryId=-3", "startHistoryId"},
		{"startHistoryId=1&maxResults=x", "maxResults"},
		{"startHistoryId=1&maxResults=-1", "maxResults"},
		{"startHistoryId=1&pageToken=next", "pageToken"},
		{"startHistoryId=1&pageToken=0", "pageToken"},
		{"startHistoryId=1&historyTypes=messageAdded&historyTypes=messageMoved", "historyTypes"},
	} {
		t.Run(tc.query, func(t *testing.T) {
			status, body := do(t, http.MethodGet, base+"/gmail/v1/users/me/history?"+tc.query, "")
			e, _ := body["error"].(map[string]any)
			items, _ := e["errors"].([]any)
			if status != http.StatusBadRequest || len(items) != 1 {
				t.Fatalf("%d %v, want 400 with one error item", status, body)
			}
			item := items[0].(map[string]any)
			if item["location"] != tc.param || item["reason"] != "invalidArgument" || !strings.Contains(item["message"].(string), tc.param) {
				t.Errorf("error item %v, want invalidArgument naming %s", item, tc.param)
			}
		})
	}
	_, err := svc.Users.History.List("me").Do() // the Go client sends no startHistoryId
	ge := apiError(t, err, http.StatusBadRequest, "invalidArgument")
	if ge.Message != "Missing/invalid parameter: startHistoryId" {
		t.Errorf("message %q, want Gmail's", ge.Message)
	}
	status, body := do(t, http.MethodGet, base+"/gmail/v1/users/me/history?startHistoryId=1&maxResults=9999&historyTypes=MESSAGE_ADDED", "")
	if h, _ := body["history"].([]any); status != 200 || len(h) != 1 || body["historyId"] != strconv.Itoa(int(profile(t, svc).HistoryId)) {
		t.Errorf("maxResults above 500 is capped, MESSAGE_ADDED read: %d %v", status, body)
	}
}

// TestEmulatorHistoryFaultsAndCosts: the history calls take faults and
// --cost overrides like the others.
func TestEmulatorHistoryFaultsAndCosts(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{Costs: map[string]int{gmailfake.MethodHistory: 7}})
	if _, err := srv.AddFault(gmailfake.Fault{Method: gmailfake.MethodProfile, Action: gmailfake.ActionError, Status: 503}); err != nil {
		t.Fatal(err)
	}
	_, err := svc.Users.GetProfile("me").Do()
	apiError(t, err, http.StatusServiceUnavailable, "backendError")
	start := profile(t, svc).HistoryId
	before := srv.Stats().QuotaUnits
	if _, err := svc.Users.History.List("me").StartHistoryId(start).Do(); err != nil {
		t.Fatal(err)
	}
	if spent := srv.Stats().QuotaUnits - before; spent != 7 {
		t.Errorf("history.list spent %d units, want the override 7", spent)
	}
	costs, err := gmailfake.ParseCosts("history=3,profile=0")
	if err != nil || costs[gmailfake.MethodHistory] != 3 || costs[gmailfake.MethodProfile] != 0 {
		t.Errorf("ParseCosts: %v %v", costs, err)
	}
}
