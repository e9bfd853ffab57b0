package gmailfake_test

import (
	"encoding/base64"
	"net/http"
	"slices"
	"testing"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

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
