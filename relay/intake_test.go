package relay_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

const testDomain = "inbound.yourdomain.com"

// decode is the api's decoding of a POST /v1/send body: these tests give
// Prepare what a caller writes.
func decode(t *testing.T, body string) relay.SendRequest {
	t.Helper()
	req, err := api.DecodeSendRequest([]byte(body))
	if err != nil {
		t.Fatalf("DecodeSendRequest(%s): %v", body, err)
	}
	return req
}

func TestPrepareSameKeyFromEverySource(t *testing.T) {
	// The same job and content, asked for in different ways at different times.
	bodies := []struct{ name, body, headerKey string }{
		{"key", `{"key":"cus_123:order.shipped:ord_456","to":"a@x.com","subject":"S","text":"T"}`, ""},
		{"job", `{"job":{"customer_id":"cus_123","event_type":"order.shipped","order_id":"ord_456"},"to":["a@x.com"],"subject":"S","text":"T"}`, ""},
		{"Idempotency-Key", `{"text":"T","subject":"S","to":[" a@x.com "]}`, "cus_123:order.shipped:ord_456"},
		{"body alias and all three", `{"body":"T","key":"cus_123:order.shipped:ord_456","job":{"customer_id":"cus_123","event_type":"order.shipped","order_id":"ord_456"},"to":"<a@x.com>","subject":"S"}`, "cus_123:order.shipped:ord_456"},
	}
	var first relay.Prepared
	for i, b := range bodies {
		t.Run(b.name, func(t *testing.T) {
			now := testDate.Add(time.Duration(i) * time.Hour)
			p, err := relay.Prepare(decode(t, b.body), b.headerKey, testDomain, now)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := p.MessageID, testID; got != want {
				t.Errorf("MessageID = %q, want %q", got, want)
			}
			if p.Key != "cus_123:order.shipped:ord_456" || p.Channel != relay.DefaultChannel {
				t.Errorf("Key, Channel = %q, %q", p.Key, p.Channel)
			}
			if got, err := relay.ReadMessageID(p.Raw); err != nil || got != testID {
				t.Errorf("ReadMessageID(Raw) = %q, %v; want %q", got, err, testID)
			}
			if i == 0 {
				first = p
				return
			}
			if p.Fingerprint != first.Fingerprint {
				t.Errorf("Fingerprint = %s, want %s (same content as %q)", p.Fingerprint, first.Fingerprint, bodies[0].name)
			}
		})
	}

	// And a content change changes the fingerprint.
	for _, body := range []string{
		`{"key":"cus_123:order.shipped:ord_456","to":"a@x.com","subject":"S","text":"T2"}`,
		`{"key":"cus_123:order.shipped:ord_456","to":"a@x.com, b@x.com","subject":"S","text":"T"}`,
		`{"key":"cus_123:order.shipped:ord_456","cc":"a@x.com","subject":"S","text":"T"}`,
		`{"key":"cus_123:order.shipped:ord_456","to":"A <a@x.com>","subject":"S","text":"T"}`,
		`{"key":"cus_123:order.shipped:ord_456","to":"a@x.com","subject":"S","html":"T"}`,
		`{"key":"cus_123:order.shipped:ord_456","to":"a@x.com","subject":"S","text":"T","channel":"billing"}`,
		`{"key":"cus_123:order.shipped:ord_456","to":"a@x.com","subject":"S","text":"T","headers":{"X-A":"1"}}`,
	} {
		p, err := relay.Prepare(decode(t, body), "", testDomain, testDate)
		if err != nil {
			t.Fatal(err)
		}
		if p.Fingerprint == first.Fingerprint {
			t.Errorf("%s has the fingerprint of different content", body)
		}
	}
}

func TestPrepareRefusals(t *testing.T) {
	raw := base64.URLEncoding.EncodeToString([]byte("To: a@x.com\r\nSubject: s\r\n\r\nhi"))
	tests := []struct {
		name, body, headerKey, field string
	}{
		{"no key", `{"to":"a@x.com","text":"T"}`, "", "key"},
		{"key and job differ", `{"key":"a:b:c","job":{"customer_id":"a","event_type":"b","order_id":"d"},"to":"a@x.com"}`, "", "job"},
		{"key and header differ", `{"key":"k1","to":"a@x.com"}`, "k2", "Idempotency-Key"},
		{"incomplete job", `{"job":{"customer_id":"a","event_type":"b"},"to":"a@x.com"}`, "", "job.order_id"},
		{"blank key", `{"key":"  ","to":"a@x.com"}`, "", "key"},
		{"body and text differ", `{"key":"k","to":"a@x.com","text":"a","body":"b"}`, "", "body"},
		{"no recipient", `{"key":"k","text":"a"}`, "", "to"},
		{"bad channel", `{"key":"k","to":"a@x.com","channel":"a b"}`, "", "channel"},
		{"bad thread id", `{"key":"k","to":"a@x.com","thread_id":"a\r\nb"}`, "", "thread_id"},
		{"raw and parts", `{"key":"k","raw":"` + raw + `","subject":"s"}`, "", "raw"},
		{"raw not base64", `{"key":"k","raw":"!!!"}`, "", "raw"},
		{"CRLF in subject", `{"key":"k","to":"a@x.com","subject":"s\r\nBcc: e@x.com"}`, "", "subject"},
		{"LF in to", `{"key":"k","to":"a@x.com\nBcc: e@x.com"}`, "", "to"},
		{"CR in from", `{"key":"k","to":"a@x.com","from":"f@x.com\rBcc: e@x.com"}`, "", "from"},
		{"CRLF in cc list", `{"key":"k","to":"a@x.com","cc":["c@x.com","d@x.com\r\nBcc: e@x.com"]}`, "", "cc"},
		{"CRLF in bcc", `{"key":"k","to":"a@x.com","bcc":"b@x.com\r\nTo: e@x.com"}`, "", "bcc"},
		{"CRLF in reply_to", `{"key":"k","to":"a@x.com","reply_to":"r@x.com\r\nBcc: e@x.com"}`, "", "reply_to"},
		{"CRLF in display name", `{"key":"k","to":"\"A\r\nBcc: e@x.com\" <a@x.com>"}`, "", "to"},
		{"CRLF in header name", `{"key":"k","to":"a@x.com","headers":{"X-A\r\nBcc":"e@x.com"}}`, "", "headers"},
		{"CRLF in header value", `{"key":"k","to":"a@x.com","headers":{"X-A":"1\r\nBcc: e@x.com"}}`, "", "headers.X-A"},
		{"colon in customer_id", `{"job":{"customer_id":"a:b","event_type":"c","order_id":"d"},"to":"a@x.com"}`, "", "job.customer_id"},
		{"colon in event_type", `{"job":{"customer_id":"a","event_type":"b:c","order_id":"d"},"to":"a@x.com"}`, "", "job.event_type"},
		{"colon in order_id", `{"job":{"customer_id":"a","event_type":"b","order_id":"c:d"},"to":"a@x.com"}`, "", "job.order_id"},
		{"C1 control in subject", `{"key":"k","to":"a@x.com","subject":"s\u0085Bcc: e@x.com"}`, "", "subject"},
		{"C1 control U+009F in subject", `{"key":"k","to":"a@x.com","subject":"s\u009f"}`, "", "subject"},
		{"U+2028 in subject", `{"key":"k","to":"a@x.com","subject":"s\u2028Bcc: e@x.com"}`, "", "subject"},
		{"U+2029 in header value", `{"key":"k","to":"a@x.com","headers":{"X-A":"1\u2029Bcc: e@x.com"}}`, "", "headers.X-A"},
		{"C1 control in from", `{"key":"k","to":"a@x.com","from":"F\u0080 <f@x.com>"}`, "", "from"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := relay.Prepare(decode(t, tt.body), tt.headerKey, testDomain, testDate)
			testenv.WantInvalid(t, err, tt.field)
		})
	}
	t.Run("bad domain is the relay's fault", func(t *testing.T) {
		_, err := relay.Prepare(decode(t, `{"key":"k","to":"a@x.com"}`), "", "bad domain", testDate)
		if got := relay.ErrorCode(err); got != relay.CodeInternal {
			t.Fatalf("code = %s (%v), want %s", got, err, relay.CodeInternal)
		}
	})
}

const rawNoID = "From: Shop <shop@example.com>\r\nTo: a@x.com\r\nSubject: Hi\r\n\r\nHello\r\n"

func rawWithID(id string) string { return "Message-ID: " + id + "\r\n" + rawNoID }

func TestPrepareRaw(t *testing.T) {
	const key = "cus_123:order.shipped:ord_456"

	t.Run("matching Message-ID", func(t *testing.T) {
		in := rawWithID(testID)
		p, err := relay.PrepareRaw([]byte(in), key, "", testDomain)
		if err != nil {
			t.Fatal(err)
		}
		if p.MessageID != testID || p.Key != key || string(p.Raw) != in || p.Channel != "default" {
			t.Fatalf("Prepared = %+v", p)
		}
	})

	t.Run("mismatching Message-ID", func(t *testing.T) {
		_, err := relay.PrepareRaw([]byte(rawWithID("<other@example.com>")), key, "", testDomain)
		testenv.WantInvalid(t, err, "raw")
		if !strings.Contains(err.Error(), "Message-ID mismatch") {
			t.Fatalf("err = %v, want Message-ID mismatch", err)
		}
	})

	t.Run("no Message-ID, key: injected", func(t *testing.T) {
		p, err := relay.PrepareRaw([]byte(rawNoID), key, "billing", testDomain)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(p.Raw), "Message-ID: "+testID+"\r\n"+rawNoID; got != want {
			t.Fatalf("Raw = %q, want %q", got, want)
		}
		msg, err := mail.ReadMessage(bytes.NewReader(p.Raw))
		if err != nil {
			t.Fatal(err)
		}
		if got := msg.Header.Get("Message-ID"); got != testID || p.MessageID != testID || p.Channel != "billing" {
			t.Fatalf("Message-ID header %q, Prepared %+v; want %s", got, p, testID)
		}
		if got := msg.Header.Get("To"); got != "a@x.com" {
			t.Fatalf("To = %q after injection", got)
		}
	})

	t.Run("no Message-ID, no key", func(t *testing.T) {
		_, err := relay.PrepareRaw([]byte(rawNoID), "", "", testDomain)
		testenv.WantInvalid(t, err, "raw")
	})

	t.Run("Message-ID is the key when no key is given", func(t *testing.T) {
		p, err := relay.PrepareRaw([]byte(rawWithID("<abc@client.example>")), "", "", testDomain)
		if err != nil {
			t.Fatal(err)
		}
		if p.Key != "<abc@client.example>" || p.MessageID != "<abc@client.example>" {
			t.Fatalf("Key, MessageID = %q, %q; want <abc@client.example>", p.Key, p.MessageID)
		}
	})

	t.Run("bare LF", func(t *testing.T) {
		lf := strings.ReplaceAll(rawNoID, "\r\n", "\n")
		p, err := relay.PrepareRaw([]byte(lf), key, "", testDomain)
		if err != nil {
			t.Fatal(err)
		}
		want := "Message-ID: " + testID + "\r\n" + rawNoID
		if string(p.Raw) != want {
			t.Fatalf("Raw = %q, want %q", p.Raw, want)
		}
		crlf, err := relay.PrepareRaw([]byte(rawNoID), key, "", testDomain)
		if err != nil {
			t.Fatal(err)
		}
		if p.Fingerprint != crlf.Fingerprint {
			t.Fatalf("bare-LF and CRLF copies have different fingerprints")
		}
	})

	t.Run("too large", func(t *testing.T) {
		big := rawNoID + strings.Repeat("x", relay.MaxMessageBytes)
		_, err := relay.PrepareRaw([]byte(big), key, "", testDomain)
		if got := relay.ErrorCode(err); got != relay.CodeTooLarge {
			t.Fatalf("code = %s (%v), want %s", got, err, relay.CodeTooLarge)
		}
	})

	bad := []struct{ name, raw string }{
		{"NUL byte", rawNoID + "\x00"},
		{"no recipients", "Subject: hi\r\n\r\nbody"},
		{"only Reply-To", "Reply-To: a@x.com\r\n\r\nbody"},
		{"empty", ""},
		{"not a message", "hello world\r\n\r\n"},
		{"initial continuation line", " To: a@x.com\r\n\r\n"},
		{"two To headers", "To: a@x.com\r\nTo: b@x.com\r\n\r\n"},
		{"two Message-IDs", "Message-ID: " + testID + "\r\n" + rawWithID(testID)},
		{"obsolete Message-ID name", "Message-ID : " + testID + "\r\n" + rawWithID(testID)},
		{"obsolete To name", "To : b@x.com\r\n" + rawNoID},
		{"malformed To", "To: nope\r\n\r\n"},
		{"bare CR in header", "To: a@x.com\rBcc: e@x.com\r\n\r\n"},
		{"encoded LF in display name", "To: =?utf-8?q?A=0ABcc:_e@x.com?= <a@x.com>\r\n\r\n"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := relay.PrepareRaw([]byte(tt.raw), key, "", testDomain)
			testenv.WantInvalid(t, err, "raw")
		})
	}
	// A Message-ID of the wrong shape is named by its own field.
	for _, tt := range []struct{ name, raw string }{
		{"malformed Message-ID", "Message-ID: <a b@c>\r\nTo: a@x.com\r\n\r\n"},
		{"empty Message-ID", "Message-ID:\r\nTo: a@x.com\r\n\r\n"},
		{"Message-ID without brackets", "Message-ID: a@c.example\r\nTo: a@x.com\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := relay.PrepareRaw([]byte(tt.raw), "", "", testDomain)
			testenv.WantInvalid(t, err, "message_id")
		})
	}
}

func TestPrepareRawField(t *testing.T) {
	msg := []byte(rawNoID)
	encodings := map[string]string{
		"base64url padded":   base64.URLEncoding.EncodeToString(msg),
		"base64url unpadded": base64.RawURLEncoding.EncodeToString(msg),
		"std base64":         base64.StdEncoding.EncodeToString(msg),
		"wrapped std base64": wrap(base64.StdEncoding.EncodeToString(msg)),
	}
	want, err := relay.PrepareRaw(msg, "k", "", testDomain)
	if err != nil {
		t.Fatal(err)
	}
	for name, enc := range encodings {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				body, headerKey string
			}{
				{`{"key":"k","raw":"` + enc + `","thread_id":"18c0ffee"}`, ""},
				{`{"raw":"` + enc + `","thread_id":"18c0ffee"}`, "k"},
			} {
				p, err := relay.Prepare(decode(t, tc.body), tc.headerKey, testDomain, testDate)
				if err != nil {
					t.Fatal(err)
				}
				if p.Fingerprint != want.Fingerprint || !bytes.Equal(p.Raw, want.Raw) || p.ThreadID != "18c0ffee" {
					t.Fatalf("Prepared = %+v, want raw and fingerprint of PrepareRaw", p)
				}
			}
		})
	}
	t.Run("raw with its own Message-ID and no key", func(t *testing.T) {
		enc := base64.RawURLEncoding.EncodeToString([]byte(rawWithID("<x@y.z>")))
		p, err := relay.Prepare(decode(t, `{"raw":"`+enc+`"}`), "", testDomain, testDate)
		if err != nil || p.Key != "<x@y.z>" || p.MessageID != "<x@y.z>" {
			t.Fatalf("Prepare = %+v, %v; want key <x@y.z>", p, err)
		}
	})
}

// wrap breaks base64 into 76-character lines, as MIME encoders do, with the
// line breaks escaped for a JSON string.
func wrap(s string) string {
	var b strings.Builder
	for len(s) > 76 {
		b.WriteString(s[:76] + `\r\n`) // JSON-escaped CRLF
		s = s[76:]
	}
	return b.String() + s
}

func TestReadMessageID(t *testing.T) {
	tests := []struct{ name, raw, want string }{
		{"present", rawWithID(" <a@b.c> "), "<a@b.c>"},
		{"any case", "message-id: <a@b.c>\nTo: x@y.z\n\n", "<a@b.c>"},
		{"none", rawNoID, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := relay.ReadMessageID([]byte(tt.raw))
			if err != nil || got != tt.want {
				t.Fatalf("ReadMessageID = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	for _, bad := range []struct{ raw, field string }{
		{"Message-ID: <a b>\r\n\r\n", "message_id"},
		{"Message-ID: a@b.c\r\n\r\n", "message_id"},
		{" x\r\n\r\n", "raw"},
		{"Message-ID: <c@d>\r\n" + rawWithID("<a@b>"), "raw"},
	} {
		_, err := relay.ReadMessageID([]byte(bad.raw))
		var e *relay.Error
		if !errors.As(err, &e) || e.Field != bad.field {
			t.Errorf("ReadMessageID(%q) = %v, want an error with field %s", bad.raw, err, bad.field)
		}
	}
}
