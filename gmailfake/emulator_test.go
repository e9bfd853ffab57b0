package gmailfake_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
)

var gmailID = regexp.MustCompile(`^[0-9a-f]{16}$`)

func TestEmulatorSendMetadataPath(t *testing.T) {
	encodings := []struct {
		name string
		enc  *base64.Encoding
	}{
		{"base64url unpadded", base64.RawURLEncoding},
		{"base64url padded", base64.URLEncoding},
		{"std base64", base64.StdEncoding},
	}
	for i, tc := range encodings {
		t.Run(tc.name, func(t *testing.T) {
			srv, svc, _ := emulator(t, gmailfake.Options{Now: testclock.New().Now})
			id := msgID(i)
			// A body long enough that the encodings differ (+, /, padding).
			raw := rawMessage(id, "a@example.org", "Shipped ~~~ ??? >>>", "X-Pad: "+strings.Repeat("\xff\xfe?>", 5))
			got, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: tc.enc.EncodeToString([]byte(raw))}).Do()
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			if !gmailID.MatchString(got.Id) {
				t.Errorf("id: got %q, want 16 hex digits", got.Id)
			}
			if got.ThreadId != got.Id {
				t.Errorf("threadId: got %q, want the id %q of a new thread", got.ThreadId, got.Id)
			}
			if want := []string{"SENT"}; !slices.Equal(got.LabelIds, want) {
				t.Errorf("labelIds: got %v, want %v", got.LabelIds, want)
			}
			if n := srv.Count(id); n != 1 {
				t.Errorf("Count(%s): got %d, want 1", id, n)
			}
			if n := srv.Count(strings.Trim(id, "<>")); n != 1 {
				t.Errorf("Count without brackets: got %d, want 1", n)
			}
			msgs := srv.Messages(id)
			if len(msgs) != 1 || msgs[0].ID != got.Id || msgs[0].MessageID != id {
				t.Fatalf("Messages(%s): got %+v", id, msgs)
			}
			if !bytes.Contains(msgs[0].Raw, []byte("Your order has shipped.")) {
				t.Errorf("stored raw lost the body: %q", msgs[0].Raw)
			}
		})
	}
}

func TestEmulatorSendRewritesForeignFrom(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{Account: "owner@example.net"})
	send(t, svc, rawMessage(msgID(1), "a@example.org", "hi"))
	raw := string(srv.Messages(msgID(1))[0].Raw)
	if !strings.Contains(raw, "From: \"Shop\" <owner@example.net>\r\n") {
		t.Errorf("From not rewritten to the account address:\n%s", raw)
	}
	if strings.Contains(raw, "shop@example.com") {
		t.Errorf("the foreign From address survived:\n%s", raw)
	}
}

func TestEmulatorSendUploadPath(t *testing.T) {
	t.Run("multipart via Media", func(t *testing.T) {
		srv, svc, _ := emulator(t, gmailfake.Options{})
		first := send(t, svc, rawMessage(msgID(1), "a@example.org", "Order 1"))
		reply := rawMessage(msgID(2), "a@example.org", "Re: Order 1", "In-Reply-To: "+msgID(1), "References: "+msgID(1))
		got, err := svc.Users.Messages.Send("me", &gmail.Message{ThreadId: first.ThreadId}).
			Media(strings.NewReader(reply), googleapi.ContentType("message/rfc822")).Do()
		if err != nil {
			t.Fatalf("send via Media: %v", err)
		}
		if !gmailID.MatchString(got.Id) || got.Id == first.Id {
			t.Errorf("id: got %q (first %q)", got.Id, first.Id)
		}
		if got.ThreadId != first.ThreadId {
			t.Errorf("threadId from the metadata part: got %q, want %q", got.ThreadId, first.ThreadId)
		}
		if n := srv.Count(msgID(2)); n != 1 {
			t.Errorf("Count: got %d, want 1", n)
		}
	})
	t.Run("uploadType media", func(t *testing.T) {
		srv, _, url := emulator(t, gmailfake.Options{})
		req, _ := http.NewRequest(http.MethodPost, url+"/upload/gmail/v1/users/me/messages/send?uploadType=media&alt=json&prettyPrint=false",
			strings.NewReader(rawMessage(msgID(3), "a@example.org", "media")))
		req.Header.Set("Content-Type", "message/rfc822")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status: got %d, want 200", resp.StatusCode)
		}
		if n := srv.Count(msgID(3)); n != 1 {
			t.Errorf("Count: got %d, want 1", n)
		}
	})
	t.Run("resumable answers 501", func(t *testing.T) {
		srv, svc, _ := emulator(t, gmailfake.Options{})
		big := rawMessage(msgID(4), "a@example.org", "big") + strings.Repeat("x", 300<<10)
		_, err := svc.Users.Messages.Send("me", &gmail.Message{}).
			Media(strings.NewReader(big), googleapi.ChunkSize(256<<10)).Do()
		apiError(t, err, http.StatusNotImplemented, "notImplemented")
		if n := srv.Count(msgID(4)); n != 0 {
			t.Errorf("Count: got %d, want 0", n)
		}
	})
}

func TestEmulatorThreads(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{})
	first := send(t, svc, rawMessage(msgID(1), "a@example.org", "Order 7"))
	cases := []struct {
		name     string
		threadID string
		raw      string
		same     bool
	}{
		{"reply with In-Reply-To", first.ThreadId, rawMessage(msgID(2), "a@example.org", "Re: Order 7", "In-Reply-To: "+msgID(1)), true},
		{"reply with References only", first.ThreadId, rawMessage(msgID(3), "a@example.org", "RE: order 7", "References: <x@y> "+msgID(1)), true},
		{"threadId without references", first.ThreadId, rawMessage(msgID(4), "a@example.org", "Order 7"), false},
		{"references without threadId", "", rawMessage(msgID(5), "a@example.org", "Order 7", "In-Reply-To: "+msgID(1)), false},
		{"unknown threadId", "ffffffffffffffff", rawMessage(msgID(6), "a@example.org", "Order 7", "In-Reply-To: "+msgID(1)), false},
		{"subject differs", first.ThreadId, rawMessage(msgID(7), "a@example.org", "Something else", "In-Reply-To: "+msgID(1)), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(tc.raw), ThreadId: tc.threadID}).Do()
			if err != nil {
				t.Fatal(err)
			}
			if tc.same && got.ThreadId != first.ThreadId {
				t.Errorf("threadId: got %q, want %q", got.ThreadId, first.ThreadId)
			}
			if !tc.same && got.ThreadId != got.Id {
				t.Errorf("threadId: got %q, want a new thread (%q)", got.ThreadId, got.Id)
			}
		})
	}
	if n := srv.Count(""); n != len(cases)+1 {
		t.Errorf("Count(\"\"): got %d, want %d", n, len(cases)+1)
	}
}

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
		{"from:me@example.com rfc822msgid:" + bare(3), []int{3}}, // the account: shop@ is no send-as alias
		{"from:SHOP in:sent", []int{4, 3, 2, 1}},                 // a word of the From field, any case
		{`from:"Shop <me@example.com>"`, []int{4, 3, 2, 1}},
		{"from:shop@example.com", nil},
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
		"subject:shipped",                    // unsupported operator
		"from:",                              // no value
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

func TestEmulatorGetFormats(t *testing.T) {
	clk := testclock.New()
	_, svc, url := emulator(t, gmailfake.Options{Now: clk.Now})
	raw := "Date: Sun, 01 Mar 2026 11:59:00 +0000\r\nFrom: me@example.com\r\nTo: a@example.org\r\nSubject: =?UTF-8?Q?Caf=C3=A9?=\r\nMessage-ID: " + msgID(1) +
		"\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=BB\r\n\r\n" +
		"--BB\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nHello caf=C3=A9\r\n" +
		"--BB\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>Hello</p>\r\n--BB--\r\n"
	sent := send(t, svc, raw)

	t.Run("minimal", func(t *testing.T) {
		m, err := svc.Users.Messages.Get("me", sent.Id).Format("minimal").Do()
		if err != nil {
			t.Fatal(err)
		}
		if m.Id != sent.Id || m.ThreadId != sent.ThreadId || !slices.Equal(m.LabelIds, []string{"SENT"}) {
			t.Errorf("got %+v", m)
		}
		if m.Payload != nil || m.Raw != "" {
			t.Errorf("minimal carries payload or raw")
		}
		if m.HistoryId == 0 || m.InternalDate != clk.Now().UnixMilli() {
			t.Errorf("historyId %d, internalDate %d: want non-zero and %d", m.HistoryId, m.InternalDate, clk.Now().UnixMilli())
		}
	})
	t.Run("metadata with metadataHeaders", func(t *testing.T) {
		m, err := svc.Users.Messages.Get("me", sent.Id).Format("metadata").MetadataHeaders("message-id", "Subject").Do()
		if err != nil {
			t.Fatal(err)
		}
		if m.Payload == nil {
			t.Fatal("no payload")
		}
		got := map[string]string{}
		for _, h := range m.Payload.Headers {
			got[h.Name] = h.Value
		}
		want := map[string]string{"Message-ID": msgID(1), "Subject": "Café"}
		if len(got) != len(want) || got["Message-ID"] != want["Message-ID"] || got["Subject"] != want["Subject"] {
			t.Errorf("headers: got %v, want %v", got, want)
		}
		if len(m.Payload.Parts) != 0 || m.Raw != "" {
			t.Errorf("metadata carries parts or raw")
		}
	})
	t.Run("metadata all headers", func(t *testing.T) {
		m, err := svc.Users.Messages.Get("me", sent.Id).Format("metadata").Do()
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, h := range m.Payload.Headers {
			names[h.Name] = true
		}
		for _, n := range []string{"From", "To", "Subject", "Message-ID"} {
			if !names[n] {
				t.Errorf("header %s missing from %v", n, names)
			}
		}
	})
	t.Run("raw", func(t *testing.T) {
		m, err := svc.Users.Messages.Get("me", sent.Id).Format("raw").Do()
		if err != nil {
			t.Fatal(err)
		}
		got, err := base64.URLEncoding.DecodeString(m.Raw)
		if err != nil {
			t.Fatalf("raw is not base64url: %v", err)
		}
		if string(got) != raw {
			t.Errorf("raw: got %q, want %q", got, raw)
		}
	})
	t.Run("full", func(t *testing.T) {
		m, err := svc.Users.Messages.Get("me", sent.Id).Format("full").Do()
		if err != nil {
			t.Fatal(err)
		}
		p := m.Payload
		if p == nil || p.MimeType != "multipart/alternative" || len(p.Parts) != 2 {
			t.Fatalf("payload: got %+v", p)
		}
		if p.Parts[0].PartId != "0" || p.Parts[0].MimeType != "text/plain" {
			t.Errorf("part 0: got %+v", p.Parts[0])
		}
		body, err := base64.URLEncoding.DecodeString(p.Parts[0].Body.Data)
		if err != nil || string(body) != "Hello café" {
			t.Errorf("part 0 body: got %q (%v)", body, err)
		}
		if m.Snippet != "Hello café" {
			t.Errorf("snippet: got %q", m.Snippet)
		}
	})
	t.Run("bad format", func(t *testing.T) {
		_, err := svc.Users.Messages.Get("me", sent.Id).Format("everything").Do()
		apiError(t, err, http.StatusBadRequest, "invalidArgument")
	})
	t.Run("strings on the wire", func(t *testing.T) {
		_, body := do(t, http.MethodGet, url+"/gmail/v1/users/me/messages/"+sent.Id+"?format=minimal", "")
		for _, k := range []string{"historyId", "internalDate"} {
			if _, ok := body[k].(string); !ok {
				t.Errorf("%s: got %T, want a JSON string", k, body[k])
			}
		}
	})
}

func TestEmulatorErrors(t *testing.T) {
	_, svc, _ := emulator(t, gmailfake.Options{})
	send(t, svc, rawMessage(msgID(1), "a@example.org", "x"))
	cases := []struct {
		name   string
		call   func() error
		code   int
		reason string
	}{
		{"no recipient", func() error {
			_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(2), "", "x"))}).Do()
			return err
		}, 400, "invalidArgument"},
		{"bad To", func() error {
			_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(2), "not an address <", "x"))}).Do()
			return err
		}, 400, "invalidArgument"},
		{"raw missing", func() error {
			_, err := svc.Users.Messages.Send("me", &gmail.Message{}).Do()
			return err
		}, 400, "badRequest"},
		{"raw undecodable", func() error {
			_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: "!!not base64!!"}).Do()
			return err
		}, 400, "badRequest"},
		{"unknown id", func() error {
			_, err := svc.Users.Messages.Get("me", "0123456789abcdef").Do()
			return err
		}, 404, "notFound"},
		{"malformed id", func() error {
			_, err := svc.Users.Messages.Get("me", "nothex").Do()
			return err
		}, 400, "invalidArgument"},
		{"other user", func() error {
			_, err := svc.Users.Messages.List("someone@else.example").Do()
			return err
		}, 403, "forbidden"},
		{"bad maxResults", func() error {
			_, err := svc.Users.Messages.List("me").MaxResults(-1).Do()
			return err
		}, 400, "invalidArgument"},
		{"bad pageToken", func() error {
			_, err := svc.Users.Messages.List("me").PageToken("zz").Do()
			return err
		}, 400, "invalidArgument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			apiError(t, tc.call(), tc.code, tc.reason)
		})
	}
	t.Run("no recipient message", func(t *testing.T) {
		_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(2), "", "x"))}).Do()
		if ge := apiError(t, err, 400, "invalidArgument"); ge.Message != "Recipient address required" {
			t.Errorf("message: got %q", ge.Message)
		}
	})
}

func TestEmulatorTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("36 MB upload")
	}
	srv, svc, _ := emulator(t, gmailfake.Options{})
	big := rawMessage(msgID(1), "a@example.org", "big") + strings.Repeat("x", 36<<20)
	_, err := svc.Users.Messages.Send("me", &gmail.Message{}).
		Media(strings.NewReader(big), googleapi.ChunkSize(0), googleapi.ContentType("message/rfc822")).Do()
	apiError(t, err, http.StatusRequestEntityTooLarge, "uploadTooLarge")
	if n := srv.Count(""); n != 0 {
		t.Errorf("stored: got %d, want 0", n)
	}
}

func TestEmulatorAuth(t *testing.T) {
	_, url := gmailfake.NewTestServer(t, gmailfake.Options{Token: "s3cret"})
	cases := []struct {
		name  string
		opts  []option.ClientOption
		allow bool
	}{
		{"no token", nil, false},
		{"wrong token", []option.ClientOption{option.WithHTTPClient(bearerClient("nope"))}, false},
		{"right token", []option.ClientOption{option.WithHTTPClient(bearerClient("s3cret"))}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client(t, url, tc.opts...).Users.Messages.List("me").Do()
			if tc.allow {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				return
			}
			apiError(t, err, http.StatusUnauthorized, "authError")
		})
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func bearerClient(token string) *http.Client { return &http.Client{Transport: bearer{token}} }

func TestEmulatorQuota(t *testing.T) {
	for _, tc := range []struct {
		status int
		reason string
	}{
		{0, "rateLimitExceeded"}, // default 429
		{http.StatusForbidden, "userRateLimitExceeded"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			clk := testclock.New()
			srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, QuotaPerMinute: 250, QuotaStatus: tc.status})
			send(t, svc, rawMessage(msgID(1), "a@example.org", "1"))
			send(t, svc, rawMessage(msgID(2), "a@example.org", "2")) // 50 units left
			_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(3), "a@example.org", "3"))}).Do()
			want := tc.status
			if want == 0 {
				want = http.StatusTooManyRequests
			}
			ge := apiError(t, err, want, tc.reason)
			if v := ge.Header.Get("Retry-After"); v != "" {
				t.Errorf("Retry-After header %q, want none (Gmail documents none)", v)
			}
			// 50 units left, 100 needed, 250/60 units a second: 12 s.
			if at := retryAfterInMessage(t, ge.Message); !at.Equal(clk.Now().Add(12 * time.Second)) {
				t.Errorf("retry time in %q: got %v, want %v", ge.Message, at, clk.Now().Add(12*time.Second))
			}
			if n := srv.Count(msgID(3)); n != 0 {
				t.Errorf("rate-limited send stored %d messages", n)
			}
			if _, err := svc.Users.Messages.List("me").Do(); err != nil { // 5 units still fit
				t.Errorf("list within budget: %v", err)
			}
			st := srv.Stats()
			if st.QuotaUnits != 205 || st.RateLimited != 1 || st.Calls["send"] != 3 {
				t.Errorf("stats: got %+v, want 205 units, 1 rate limited, 3 sends", st)
			}
			clk.Advance(30 * time.Second) // +125 units
			send(t, svc, rawMessage(msgID(3), "a@example.org", "3"))
			if n := srv.Count(msgID(3)); n != 1 {
				t.Errorf("after refill: Count %d, want 1", n)
			}
		})
	}
}

func TestEmulatorRewriteMessageID(t *testing.T) {
	clk := testclock.New()
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now, RewriteMessageID: true})
	sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "rw"))
	if n := srv.Count(msgID(1)); n != 0 {
		t.Errorf("Count(our id): got %d, want 0", n)
	}
	all := srv.Messages("")
	if len(all) != 1 {
		t.Fatalf("stored: got %d, want 1", len(all))
	}
	newID := all[0].MessageID
	if !regexp.MustCompile(`^<CA\+[A-Za-z0-9+/]+@mail\.gmail\.com>$`).MatchString(newID) {
		t.Errorf("rewritten Message-ID: got %q, want Gmail's shape", newID)
	}
	if got := search(t, svc, "rfc822msgid:"+msgID(1)); len(got) != 0 {
		t.Errorf("search by our id: got %v, want no hit", got)
	}
	if got := search(t, svc, "rfc822msgid:"+newID); !slices.Equal(got, []string{sent.Id}) {
		t.Errorf("search by Gmail's id: got %v, want [%s]", got, sent.Id)
	}
	m, err := svc.Users.Messages.Get("me", sent.Id).Format("metadata").MetadataHeaders("Message-ID").Do()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Payload.Headers) != 1 || m.Payload.Headers[0].Value != newID {
		t.Errorf("read back: got %+v, want %s", m.Payload.Headers, newID)
	}
	srv.SetRewriteMessageID(false)
	send(t, svc, rawMessage(msgID(2), "a@example.org", "kept"))
	if n := srv.Count(msgID(2)); n != 1 {
		t.Errorf("after switching rewriting off: Count %d, want 1", n)
	}
}

func TestEmulatorMissingMessageIDIsAdded(t *testing.T) {
	srv, svc, _ := emulator(t, gmailfake.Options{})
	send(t, svc, rawMessage("", "a@example.org", "no id"))
	m := srv.Messages("")
	if len(m) != 1 || !strings.HasSuffix(m[0].MessageID, "@mail.gmail.com>") {
		t.Fatalf("got %+v, want a Gmail-generated Message-ID", m)
	}
	if !bytes.Contains(m[0].Raw, []byte("Message-ID: "+m[0].MessageID)) {
		t.Errorf("generated Message-ID not in the stored raw")
	}
}

func TestEmulatorFaults(t *testing.T) {
	t.Run("accept-then-error", func(t *testing.T) {
		srv, svc, url := emulator(t, gmailfake.Options{})
		status, body := do(t, http.MethodPost, url+"/_emulator/faults", `{"method":"send","action":"accept-then-error"}`)
		if status != http.StatusOK || body["id"] == "" {
			t.Fatalf("add fault: %d %v", status, body)
		}
		_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(1), "a@example.org", "amb"))}).Do()
		apiError(t, err, http.StatusInternalServerError, "backendError")
		if n := srv.Count(msgID(1)); n != 1 {
			t.Errorf("stored despite the error: got %d, want 1", n)
		}
		send(t, svc, rawMessage(msgID(2), "a@example.org", "next")) // count 1: spent
	})
	t.Run("error stores nothing", func(t *testing.T) {
		srv, svc, _ := emulator(t, gmailfake.Options{})
		if _, err := srv.AddFault(gmailfake.Fault{Method: "send", Action: "error", Status: 503, Count: 2}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(1), "a@example.org", "x"))}).Do()
			apiError(t, err, http.StatusServiceUnavailable, "backendError")
		}
		if n := srv.Count(msgID(1)); n != 0 {
			t.Errorf("stored: got %d, want 0", n)
		}
		send(t, svc, rawMessage(msgID(1), "a@example.org", "x"))
		f := srv.Faults()
		if len(f) != 1 || f[0].Hits != 2 || f[0].Remaining != 0 {
			t.Errorf("faults: got %+v, want one spent rule with 2 hits", f)
		}
	})
	t.Run("duplicate", func(t *testing.T) {
		srv, svc, _ := emulator(t, gmailfake.Options{})
		if _, err := srv.AddFault(gmailfake.Fault{Method: "send", Action: "duplicate"}); err != nil {
			t.Fatal(err)
		}
		sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "dup"))
		msgs := srv.Messages(msgID(1))
		if len(msgs) != 2 || msgs[0].ID == msgs[1].ID || msgs[0].ID != sent.Id {
			t.Fatalf("got %+v, want two copies with distinct ids, the first answered", msgs)
		}
		if got := search(t, svc, "rfc822msgid:"+msgID(1)); len(got) != 2 {
			t.Errorf("search hits: got %d, want 2", len(got))
		}
	})
	t.Run("list and get errors", func(t *testing.T) {
		srv, svc, _ := emulator(t, gmailfake.Options{})
		sent := send(t, svc, rawMessage(msgID(1), "a@example.org", "x"))
		srv.AddFault(gmailfake.Fault{Method: "list", Action: "error", Status: 429})
		srv.AddFault(gmailfake.Fault{Method: "get", Action: "error"})
		_, err := svc.Users.Messages.List("me").Do()
		apiError(t, err, 429, "rateLimitExceeded")
		_, err = svc.Users.Messages.Get("me", sent.Id).Do()
		apiError(t, err, 500, "backendError")
		if _, err := svc.Users.Messages.Get("me", sent.Id).Do(); err != nil {
			t.Errorf("after the fault: %v", err)
		}
	})
	t.Run("latency past the client's deadline is an ambiguous send", func(t *testing.T) {
		srv, svc, _ := emulator(t, gmailfake.Options{})
		srv.AddFault(gmailfake.Fault{Method: "send", Action: "latency", Latency: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(1), "a@example.org", "slow"))}).Context(ctx).Do()
		if err == nil {
			t.Fatal("got an answer, want the client's deadline")
		}
		if n := srv.Count(msgID(1)); n != 1 {
			t.Errorf("stored: got %d, want 1 (the send took effect)", n)
		}
	})
	t.Run("clear keeps messages", func(t *testing.T) {
		srv, svc, url := emulator(t, gmailfake.Options{})
		send(t, svc, rawMessage(msgID(1), "a@example.org", "x"))
		srv.AddFault(gmailfake.Fault{Method: "send", Action: "error", Count: -1})
		if status, body := do(t, http.MethodDelete, url+"/_emulator/faults", ""); status != 200 || body["cleared"] != 1.0 {
			t.Fatalf("clear: %d %v", status, body)
		}
		send(t, svc, rawMessage(msgID(2), "a@example.org", "x"))
		if n := srv.Count(""); n != 2 {
			t.Errorf("messages: got %d, want 2", n)
		}
	})
}

func TestEmulatorLatencyOption(t *testing.T) {
	_, svc, _ := emulator(t, gmailfake.Options{Latency: 50 * time.Millisecond})
	start := time.Now()
	if _, err := svc.Users.Messages.List("me").Do(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("answer after %v, want at least 50ms", el)
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

func TestEmulatorSetters(t *testing.T) {
	clk := testclock.New()
	srv, svc, _ := emulator(t, gmailfake.Options{Now: clk.Now})

	srv.SetQuotaPerMinute(100) // one send a minute
	send(t, svc, rawMessage(msgID(1), "a@example.org", "1"))
	_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(rawMessage(msgID(2), "a@example.org", "2"))}).Do()
	apiError(t, err, http.StatusTooManyRequests, "rateLimitExceeded")
	srv.SetQuotaPerMinute(0) // back to the default, refilled
	send(t, svc, rawMessage(msgID(2), "a@example.org", "2"))

	srv.SetIndexLag(time.Minute) // applies to messages already stored
	if got := search(t, svc, "rfc822msgid:"+msgID(1)); len(got) != 0 {
		t.Errorf("after SetIndexLag: got %v, want no hit", got)
	}
	clk.Advance(time.Minute)
	if got := search(t, svc, "rfc822msgid:"+msgID(1)); len(got) != 1 {
		t.Errorf("a minute later: got %v, want one hit", got)
	}
}
