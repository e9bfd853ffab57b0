package gmailfake_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
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
