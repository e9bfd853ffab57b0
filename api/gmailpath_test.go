package api_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
)

func TestEmulatorGmailCompatiblePathWithGoogleClient(t *testing.T) {
	e := newEnv(t, envOpts{})
	svc := e.gmailClient()
	id := "<compat-1@example.org>"
	raw := "To: a@example.org\r\nSubject: compat\r\nMessage-ID: " + id + "\r\n\r\nhi\r\n"
	m, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
	if err != nil {
		t.Fatal(err)
	}
	if m.Id == "" || len(m.LabelIds) == 0 || m.LabelIds[0] != "SENT" {
		t.Errorf("answer %+v, want a Gmail message with SENT", m)
	}
	// Same message again: replayed, not resent.
	m2, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
	if err != nil || m2.Id != m.Id {
		t.Errorf("second send: %v %v, want the same id %s", m2, err, m.Id)
	}
	// Upload path (multipart) through .Media().
	id2 := "<compat-2@example.org>"
	raw2 := "To: a@example.org\r\nSubject: upload\r\nMessage-ID: " + id2 + "\r\n\r\nhi\r\n"
	if _, err := svc.Users.Messages.Send("me", &gmail.Message{}).Media(strings.NewReader(raw2), googleapi.ContentType("message/rfc822")).Do(); err != nil {
		t.Fatalf("upload: %v", err)
	}
	// No Message-ID: Gmail-style 400.
	_, err = svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte("To: a@example.org\r\n\r\nx"))}).Do()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != 400 || len(gerr.Errors) == 0 || gerr.Errors[0].Reason != "invalidArgument" {
		t.Errorf("no Message-ID: %v, want googleapi 400 invalidArgument", err)
	}
	if e.Emulator.Count(id) != 1 || e.Emulator.Count(id2) != 1 {
		t.Errorf("emulator holds %d and %d, want 1 and 1", e.Emulator.Count(id), e.Emulator.Count(id2))
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// gmailClient is Google's own Gmail client pointed at the relay's
// Gmail-compatible path, sending the API token.
func (e *env) gmailClient() *gmail.Service {
	e.t.Helper()
	svc, err := gmail.NewService(context.Background(), option.WithEndpoint(e.url+"/"), option.WithHTTPClient(&http.Client{
		Transport: bearer{token: apiToken}}))
	if err != nil {
		e.t.Fatal(err)
	}
	return svc
}

func TestEmulatorGmailPathDrop504IsGatewayTimeout(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.addFault(map[string]any{"mode": "forward-then-drop-response", "drop": "504"})
	svc := e.gmailClient()
	raw := "To: a@example.org\r\nSubject: drop\r\nMessage-ID: <drop-504@example.org>\r\n\r\nhi\r\n"
	_, err := svc.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString([]byte(raw))}).Do()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != 504 {
		t.Fatalf("err = %v, want a googleapi 504", err)
	}
	if got := e.Emulator.Count("<drop-504@example.org>"); got != 1 {
		t.Errorf("emulator holds %d, want 1 (Gmail got it; only the answer was dropped)", got)
	}
}
