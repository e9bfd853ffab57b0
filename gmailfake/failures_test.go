package gmailfake_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"

	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testclock"
)

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
