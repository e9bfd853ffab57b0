package gmailfake_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"

	"github.com/gmailrelay/gmailrelay/dsn"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

// inbox lists the ids of the INBOX messages matching q (newest first).
func inbox(t *testing.T, svc *gmail.Service, q string) []string {
	t.Helper()
	var ids []string
	err := svc.Users.Messages.List("me").LabelIds("INBOX").Q(q).Pages(context.Background(), func(r *gmail.ListMessagesResponse) error {
		for _, m := range r.Messages {
			ids = append(ids, m.Id)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list INBOX %q: %v", q, err)
	}
	return ids
}

// rawOf gets message id in format raw and decodes it.
func rawOf(t *testing.T, svc *gmail.Service, id string) []byte {
	t.Helper()
	m, err := svc.Users.Messages.Get("me", id).Format("raw").Do()
	if err != nil {
		t.Fatalf("get %s raw: %v", id, err)
	}
	raw, err := base64.URLEncoding.DecodeString(m.Raw)
	if err != nil {
		t.Fatalf("get %s raw: %v", id, err)
	}
	return raw
}

// groundTruth reads GET /_emulator/messages?rfc822msgid=id.
func groundTruth(t *testing.T, base, id string) map[string]any {
	t.Helper()
	code, out := do(t, http.MethodGet, base+"/_emulator/messages?rfc822msgid="+url.QueryEscape(id), "")
	if code != http.StatusOK {
		t.Fatalf("ground truth for %s: %d %v", id, code, out)
	}
	return out
}

// Emulator results: a send to ok@example.org and x@bounce.test is accepted
// (200, SENT, one delivery, bounced for x@bounce.test only); the report
// arrives in INBOX when the emulator's clock passes the bounce delay, reads
// as a failed 5.1.1 for x@bounce.test naming the sent Message-ID and job,
// and is listed, gettable in every format and in history with INBOX.
func TestEmulatorBounceReport(t *testing.T) {
	clk := testclock.New()
	srv, svc, base := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: plenty})
	id := msgID(1)
	sent := send(t, svc, rawMessage(id, "ok@example.org, x@bounce.test", "invoice", "X-Gmailrelay-Job: 3f2a9c1b7e"))
	if !slices.Equal(sent.LabelIds, []string{"SENT"}) {
		t.Errorf("sent labels %v, want [SENT]", sent.LabelIds)
	}
	if got := srv.Deliveries(id); got != 1 {
		t.Errorf("deliveries %d, want 1", got)
	}
	if got := srv.Bounced(id); !slices.Equal(got, []string{"x@bounce.test"}) {
		t.Errorf("Bounced %v, want [x@bounce.test]", got)
	}
	gt := groundTruth(t, base, id)
	if gt["deliveries"] != 1.0 || gt["undelivered"] != false || !jsonList(gt["bounced"], "x@bounce.test") {
		t.Errorf("ground truth %v, want deliveries 1, bounced [x@bounce.test], undelivered false", gt)
	}

	clk.Advance(gmailfake.DefaultBounceDelay - time.Second)
	if got := inbox(t, svc, ""); len(got) != 0 {
		t.Fatalf("INBOX before the bounce delay: %v", got)
	}
	clk.Advance(time.Second)
	later := send(t, svc, rawMessage(msgID(2), "ok@example.org", "later")) // after the report fell due
	got := inbox(t, svc, "from:mailer-daemon@googlemail.com")
	if len(got) != 1 {
		t.Fatalf("INBOX from mailer-daemon after the delay: %v, want one report", got)
	}
	if all := inbox(t, svc, ""); !slices.Equal(all, got) {
		t.Errorf("INBOX %v, want only the report %v", all, got)
	}
	rep, err := dsn.Parse(rawOf(t, svc, got[0]))
	if err != nil {
		t.Fatalf("dsn.Parse: %v", err)
	}
	if rep.Kind != dsn.KindDSN || len(rep.Recipients) != 1 {
		t.Fatalf("report %+v, want one recipient of a DSN", rep)
	}
	r := rep.Recipients[0]
	if r.Address != "x@bounce.test" || r.Action != dsn.ActionFailed || r.Status != "5.1.1" || !strings.HasPrefix(r.Diagnostic, "550 5.1.1 ") {
		t.Errorf("recipient %+v, want x@bounce.test failed 5.1.1 550 5.1.1 …", r)
	}
	if !slices.Contains(rep.MessageIDs, id) || !slices.Equal(rep.Jobs, []string{"3f2a9c1b7e"}) {
		t.Errorf("returned ids %v jobs %v, want %s and job 3f2a9c1b7e", rep.MessageIDs, rep.Jobs, id)
	}

	full, err := svc.Users.Messages.Get("me", got[0]).Do()
	if err != nil {
		t.Fatal(err)
	}
	if full.ThreadId != sent.ThreadId || !slices.Equal(full.LabelIds, []string{"INBOX", "UNREAD"}) {
		t.Errorf("report thread %s labels %v, want the sent thread %s and [INBOX UNREAD]", full.ThreadId, full.LabelIds, sent.ThreadId)
	}
	var types []string
	for _, p := range full.Payload.Parts {
		types = append(types, p.MimeType)
	}
	if full.Payload.MimeType != "multipart/report" || !slices.Equal(types, []string{"text/plain", "message/delivery-status", "text/rfc822-headers"}) {
		t.Errorf("payload %s with parts %v", full.Payload.MimeType, types)
	}
	meta, err := svc.Users.Messages.Get("me", got[0]).Format("metadata").MetadataHeaders("From", "Subject").Do()
	if err != nil {
		t.Fatal(err)
	}
	hs := map[string]string{}
	for _, h := range meta.Payload.Headers {
		hs[h.Name] = h.Value
	}
	if hs["From"] != gmailfake.MailerDaemon || hs["Subject"] != "Delivery Status Notification (Failure)" {
		t.Errorf("metadata headers %v", hs)
	}
	if meta.InternalDate != clk.Now().UnixMilli() || full.HistoryId >= later.HistoryId {
		t.Errorf("report dated %d history %d; want the due time %d, before the later send's history %d",
			meta.InternalDate, full.HistoryId, clk.Now().UnixMilli(), later.HistoryId)
	}

	recs, _, _ := history(t, svc.Users.History.List("me").StartHistoryId(sent.HistoryId).LabelId("INBOX"))
	if ids := addedIDs(recs); !slices.Equal(ids, got) {
		t.Fatalf("history with INBOX after the send: added %v, want the report %v", ids, got)
	}
	if labels := recs[0].MessagesAdded[0].Message.LabelIds; !slices.Contains(labels, "INBOX") {
		t.Errorf("history record labels %v, want INBOX", labels)
	}
	if st := srv.Stats(); st.Deliveries != 2 || st.Reports != 1 {
		t.Errorf("stats deliveries %d reports %d, want 2 and 1", st.Deliveries, st.Reports)
	}
}

// Emulator results: a recipient at delay.test gets a delay report (4.4.1,
// Action: delayed) after the configured delay; bounced recipients of the
// same send get their own failure report.
func TestEmulatorDelayReport(t *testing.T) {
	clk := testclock.New()
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: plenty, BounceDelay: 2 * time.Minute})
	id := msgID(1)
	send(t, svc, rawMessage(id, "slow@delay.test", "later", "Cc: Gone <GONE@Bounce.test>"))
	if d, b := srv.Delayed(id), srv.Bounced(id); !slices.Equal(d, []string{"slow@delay.test"}) || !slices.Equal(b, []string{"GONE@Bounce.test"}) {
		t.Errorf("delayed %v bounced %v", d, b)
	}
	clk.Advance(time.Minute)
	if got := inbox(t, svc, ""); len(got) != 0 {
		t.Fatalf("INBOX before --bounce-delay: %v", got)
	}
	clk.Advance(time.Minute)
	want := map[string]dsn.Recipient{
		"Delivery Status Notification (Delay)":   {Address: "slow@delay.test", Action: dsn.ActionDelayed, Status: "4.4.1"},
		"Delivery Status Notification (Failure)": {Address: "GONE@Bounce.test", Action: dsn.ActionFailed, Status: "5.1.1"},
	}
	ids := inbox(t, svc, "")
	if len(ids) != len(want) {
		t.Fatalf("INBOX %v, want %d reports", ids, len(want))
	}
	for _, mid := range ids {
		raw := rawOf(t, svc, mid)
		rep, err := dsn.Parse(raw)
		if err != nil {
			t.Fatalf("dsn.Parse: %v", err)
		}
		subject := regexp.MustCompile(`(?m)^Subject: (.*)\r$`).FindSubmatch(raw)
		w, ok := want[string(subject[1])]
		if !ok || len(rep.Recipients) != 1 {
			t.Fatalf("report %q: %+v", subject[1], rep)
		}
		r := rep.Recipients[0]
		r.Diagnostic = ""
		if r != w || !slices.Contains(rep.MessageIDs, id) {
			t.Errorf("report %q: %+v ids %v, want %+v naming %s", subject[1], r, rep.MessageIDs, w, id)
		}
	}
}

// Emulator results: with a daily limit of 3 and a lag of 2, five sends are
// all answered 200 and stored in SENT, the last two undelivered; one
// nobody@gmail.com notice arrives after the delay; a sixth send is refused
// as without the lag.
func TestEmulatorDailyLimitLag(t *testing.T) {
	clk := testclock.New()
	srv, svc, base := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: plenty, DailySendLimit: 3, DailyLimitLag: 2})
	for i := 1; i <= 5; i++ {
		m := send(t, svc, rawMessage(msgID(i), "a@example.org", "n"))
		if !slices.Contains(m.LabelIds, "SENT") {
			t.Errorf("send %d labels %v", i, m.LabelIds)
		}
		lagged := i > 3
		if srv.Count(msgID(i)) != 1 || srv.Undelivered(msgID(i)) != lagged || srv.Deliveries(msgID(i)) != map[bool]int{false: 1, true: 0}[lagged] {
			t.Errorf("send %d: count %d undelivered %v deliveries %d, want 1 %v", i,
				srv.Count(msgID(i)), srv.Undelivered(msgID(i)), srv.Deliveries(msgID(i)), lagged)
		}
		clk.Advance(time.Second)
	}
	if gt := groundTruth(t, base, msgID(4)); gt["undelivered"] != true || gt["deliveries"] != 0.0 || gt["count"] != 1.0 {
		t.Errorf("ground truth of a lagged send: %v", gt)
	}
	_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(6), "a@example.org", "n"))}).Do()
	ge := apiError(t, err, http.StatusTooManyRequests, "rateLimitExceeded")
	if !strings.HasPrefix(ge.Message, "Daily user sending limit exceeded. Retry after ") || srv.Count(msgID(6)) != 0 {
		t.Errorf("sixth send: %q, stored %d", ge.Message, srv.Count(msgID(6)))
	}
	if st := srv.Stats(); st.Deliveries != 3 || st.Undelivered != 2 || st.DailyLimited != 1 {
		t.Errorf("stats %+v, want 3 deliveries, 2 undelivered, 1 refused", st)
	}

	clk.Advance(gmailfake.DefaultBounceDelay)
	notices := inbox(t, svc, "from:nobody@gmail.com")
	if all := inbox(t, svc, ""); len(notices) != 1 || !slices.Equal(all, notices) {
		t.Fatalf("INBOX %v, notices %v: want one nobody@gmail.com notice", all, notices)
	}
	rep, err := dsn.Parse(rawOf(t, svc, notices[0]))
	if err != nil || rep.Kind != dsn.KindSendingLimit || len(rep.MessageIDs) != 0 {
		t.Errorf("notice: %+v %v, want a sending-limit notice naming no message", rep, err)
	}

	// A day after the first send, it leaves the rolling window: the burst
	// is over, one send goes out, the next is lagged and gets its own
	// notice.
	clk.Advance(24*time.Hour - 5*time.Second - gmailfake.DefaultBounceDelay)
	send(t, svc, rawMessage(msgID(7), "a@example.org", "n"))
	send(t, svc, rawMessage(msgID(8), "a@example.org", "n"))
	if srv.Undelivered(msgID(7)) || !srv.Undelivered(msgID(8)) {
		t.Errorf("after the window freed: undelivered %v %v, want false true", srv.Undelivered(msgID(7)), srv.Undelivered(msgID(8)))
	}
	clk.Advance(gmailfake.DefaultBounceDelay)
	if got := inbox(t, svc, "from:nobody@gmail.com"); len(got) != 2 {
		t.Errorf("notices after the second burst: %v, want 2", got)
	}
}

// A lagged send made after the burst's notice arrived schedules another
// notice: every lagged send is followed by one within the bounce delay.
func TestEmulatorLimitNoticePerBurst(t *testing.T) {
	clk := testclock.New()
	_, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: plenty, DailySendLimit: 1, DailyLimitLag: 3})
	send(t, svc, rawMessage(msgID(1), "a@example.org", "n"))
	send(t, svc, rawMessage(msgID(2), "a@example.org", "n")) // lagged: notice due in 30 s
	clk.Advance(10 * time.Second)
	send(t, svc, rawMessage(msgID(3), "a@example.org", "n")) // shares it
	clk.Advance(20 * time.Second)
	if got := inbox(t, svc, ""); len(got) != 1 {
		t.Fatalf("INBOX %v, want the burst's one notice", got)
	}
	send(t, svc, rawMessage(msgID(4), "a@example.org", "n")) // after it: a new one
	clk.Advance(gmailfake.DefaultBounceDelay)
	if got := inbox(t, svc, ""); len(got) != 2 {
		t.Errorf("INBOX %v, want a second notice", got)
	}
}

// With NoRecipients nothing bounces; Reset drops reports not yet arrived;
// an undelivered send never bounces.
func TestEmulatorBounceOffAndReset(t *testing.T) {
	clk := testclock.New()
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: plenty, BounceRecipients: gmailfake.NoRecipients, DelayRecipients: gmailfake.NoRecipients})
	send(t, svc, rawMessage(msgID(1), "x@bounce.test, y@delay.test", "n"))
	clk.Advance(time.Hour)
	if got := inbox(t, svc, ""); len(got) != 0 || srv.Bounced(msgID(1)) != nil || srv.Delayed(msgID(1)) != nil {
		t.Errorf("bounces off: INBOX %v bounced %v delayed %v", got, srv.Bounced(msgID(1)), srv.Delayed(msgID(1)))
	}

	srv2, svc2, _ := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: plenty, DailySendLimit: 1, DailyLimitLag: 1})
	send(t, svc2, rawMessage(msgID(1), "x@bounce.test", "n"))
	srv2.Reset()
	clk.Advance(time.Hour)
	if got := inbox(t, svc2, ""); len(got) != 0 {
		t.Errorf("INBOX after Reset: %v, want the pending report dropped", got)
	}
	send(t, svc2, rawMessage(msgID(2), "a@example.org", "n"))
	send(t, svc2, rawMessage(msgID(3), "x@bounce.test", "n")) // lagged: not delivered, so no bounce
	clk.Advance(time.Hour)
	if got := inbox(t, svc2, "from:mailer-daemon"); len(got) != 0 || srv2.Bounced(msgID(3)) != nil {
		t.Errorf("an undelivered send bounced: %v %v", got, srv2.Bounced(msgID(3)))
	}
}

// jsonList reports whether v is a JSON list of exactly want.
func jsonList(v any, want ...string) bool {
	l, ok := v.([]any)
	if !ok || len(l) != len(want) {
		return false
	}
	for i, x := range l {
		if x != want[i] {
			return false
		}
	}
	return true
}
