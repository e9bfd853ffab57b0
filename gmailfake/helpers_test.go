package gmailfake_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
)

// emulator starts an emulator with an injected clock (unless opts has one)
// and returns it with a Google client pointed at it.
func emulator(t *testing.T, opts gmailfake.Options) (*gmailfake.Server, *gmail.Service, string) {
	t.Helper()
	srv, url := gmailfake.NewTestServer(t, opts)
	return srv, client(t, url), url
}

func client(t *testing.T, url string, extra ...option.ClientOption) *gmail.Service {
	t.Helper()
	opts := append([]option.ClientOption{option.WithEndpoint(url + "/")}, extra...)
	if len(extra) == 0 {
		opts = append(opts, option.WithoutAuthentication())
	}
	svc, err := gmail.NewService(context.Background(), opts...)
	if err != nil {
		t.Fatalf("gmail.NewService: %v", err)
	}
	return svc
}

// rawMessage builds an RFC 5322 message with CRLF line endings.
func rawMessage(msgID, to, subject string, extra ...string) string {
	var b strings.Builder
	b.WriteString("From: Shop <shop@example.com>\r\n")
	if to != "" {
		b.WriteString("To: " + to + "\r\n")
	}
	b.WriteString("Subject: " + subject + "\r\n")
	if msgID != "" {
		b.WriteString("Message-ID: " + msgID + "\r\n")
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nYour order has shipped.\r\n")
	return b.String()
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func send(t *testing.T, svc *gmail.Service, raw string) *gmail.Message {
	t.Helper()
	m, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: b64(raw)}).Do()
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return m
}

func msgID(i int) string { return fmt.Sprintf("<job-%032x@inbound.example.com>", i) }

// search lists every id matching q, following pages.
func search(t *testing.T, svc *gmail.Service, q string) []string {
	t.Helper()
	var ids []string
	err := svc.Users.Messages.List("me").Q(q).Pages(context.Background(), func(r *gmail.ListMessagesResponse) error {
		for _, m := range r.Messages {
			ids = append(ids, m.Id)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list %q: %v", q, err)
	}
	return ids
}

// apiError asserts err is a *googleapi.Error with code and reason.
func apiError(t *testing.T, err error, code int, reason string) *googleapi.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %d %s", code, reason)
	}
	ge, ok := errors.AsType[*googleapi.Error](err)
	if !ok {
		t.Fatalf("got %T %v, want *googleapi.Error", err, err)
	}
	if ge.Code != code {
		t.Errorf("code: got %d, want %d (%v)", ge.Code, code, err)
	}
	if len(ge.Errors) == 0 {
		t.Fatalf("no Errors items in %v", err)
	}
	if got := ge.Errors[0].Reason; got != reason {
		t.Errorf("reason: got %q, want %q (%v)", got, reason, err)
	}
	return ge
}

// do makes a plain HTTP request and decodes a JSON answer into a map.
func do(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s %s: answer is not a JSON object: %q", method, url, data)
	}
	return resp.StatusCode, out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
