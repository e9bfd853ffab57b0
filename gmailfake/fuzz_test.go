package gmailfake

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"
)

func FuzzParseQuery(f *testing.F) {
	for _, q := range []string{
		"", "rfc822msgid:<a@b>", "rfc822msgid:a@b OR rfc822msgid:c@d", "{rfc822msgid:a@b rfc822msgid:<c}d@e>}",
		"in:sent label:SENT", "(in:sent OR label:x) rfc822msgid:\"<q@r>\"", "{", "}", "(((", "OR", "a:b OR", "rfc822msgid:<",
		"from:x", "\"", "{()}", "rfc822msgid:<a@b>>",
		"after:1700000000", "before:2026/12/02", "after:2026/1/2 before:1800000000 rfc822msgid:a@b",
		"{after:1 rfc822msgid:a@b} OR older:9", "after:", "before:2026/13/40", "after:99999999999999999999",
	} {
		f.Add(q)
	}
	m := &stored{Message: Message{LabelIDs: []string{"SENT"}, StoredAt: time.Unix(1700000000, 0)}, msgIDKey: "a@b"}
	f.Fuzz(func(t *testing.T, q string) {
		n, err := parseQuery(q)
		if err != nil {
			if !errors.Is(err, errQuery) {
				t.Fatalf("error %v does not wrap errQuery", err)
			}
			return
		}
		if n == nil {
			t.Fatal("nil node without error")
		}
		n.match(m)
	})
}

func FuzzIntake(f *testing.F) {
	seeds := []string{
		"To: a@b\r\nSubject: x\r\nMessage-ID: <m@x>\r\n\r\nbody",
		"To: a@b\nFrom: \"Q\" <q@r>\nIn-Reply-To: <m@x>\nReferences: <m@x> <n@y>\n\nbody\n",
		"To: a@b\r\nContent-Type: multipart/mixed; boundary=X\r\n\r\n--X\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8=\r\n--X\r\nContent-Type: multipart/alternative; boundary=Y\r\n\r\n--Y\r\n\r\nqp=3D\r\n--Y--\r\n--X--\r\n",
		"Cc: broken <\r\n\r\n",
		"\r\n\r\n",
		" folded\r\nTo: a@b\r\n\tcontinued\r\n\r\n",
	}
	for _, s := range seeds {
		f.Add(base64.RawURLEncoding.EncodeToString([]byte(s)), "")
		f.Add(s, "")
	}
	f.Add("!!!", "1234")
	f.Fuzz(func(t *testing.T, field, threadID string) {
		s := New(Options{Now: func() time.Time { return time.Unix(1700000000, 0) }})
		raw, err := decodeRaw(field)
		if err != nil {
			raw = []byte(field) // exercise the MIME intake with the bytes themselves too
		}
		m := parseRFC822(raw)
		m.bytes()
		buildPayload(m)
		res, e := s.storeMessage(s.accounts[0], raw, threadID, true)
		if e != nil {
			if e.code != 400 && e.code != 413 {
				t.Fatalf("intake answered %d", e.code)
			}
			return
		}
		got := s.Messages("")
		if len(got) != 2 || got[0].ID != res.ID {
			t.Fatalf("stored %d messages, first %v, answered %s", len(got), got, res.ID)
		}
		// What was stored must parse again to the same Message-ID.
		if id := parseRFC822(got[0].Raw).get("Message-ID"); normalizeMsgID(id) != normalizeMsgID(got[0].MessageID) {
			t.Fatalf("stored Message-ID %q, header reads back %q", got[0].MessageID, id)
		}
	})
}
