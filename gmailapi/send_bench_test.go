package gmailapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// benchSend sends a message of size bytes to a server that reads and
// drops the body: B/op is what the client side costs per send.
func benchSend(b *testing.B, size int) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"1","threadId":"1","labelIds":["SENT"]}`)
	}))
	defer srv.Close()
	c, err := New(context.Background(), Config{Endpoint: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	head := "From: a@example.com\r\nTo: b@example.org\r\nSubject: x\r\n\r\n"
	raw := []byte(head + strings.Repeat("x", max(size-len(head), 1)))
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Send(context.Background(), "me", raw, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendSmall is a 1 KiB send: the cost of the upload path's
// multipart body for the common case.
func BenchmarkSendSmall(b *testing.B) { benchSend(b, 1<<10) }

// BenchmarkSend24MB is a 24 MB send: the upload streams the message, so
// the client holds no copy of it.
func BenchmarkSend24MB(b *testing.B) { benchSend(b, 24<<20) }
