package gmailapi

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/option"
)

// wireRequest is what a server sees of one request.
type wireRequest struct {
	Method, URI, Proto string
	Header             http.Header
	ContentLength      int64
	TransferEncoding   []string
	Body               string
	RemoteAddr         string
}

// captureServer answers every request like Gmail's send and keeps what it saw.
func captureServer(t *testing.T) (*httptest.Server, func() []wireRequest) {
	var mu sync.Mutex
	var got []wireRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, wireRequest{Method: r.Method, URI: r.RequestURI, Proto: r.Proto, Header: r.Header.Clone(),
			ContentLength: r.ContentLength, TransferEncoding: r.TransferEncoding, Body: string(b), RemoteAddr: r.RemoteAddr})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"1","threadId":"1","labelIds":["SENT"]}`)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []wireRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// TestRelayedSendIsTheDirectClientsRequest: the request the relay's Gmail
// call puts on the wire is the one Google's client makes when a caller
// sends the same message to Gmail directly (the bench harness's direct
// path: gmail.NewService with an endpoint and a plain transport): same
// method, path and query, the same headers except Accept-Encoding (the
// relay's transport asks for no gzip: PooledTransport), the same body byte
// for byte, the same framing (Content-Length, no chunking, no Expect:
// 100-continue), and connections reused on both. So the emulator's extra
// CPU per relayed send is not the request's.
func TestRelayedSendIsTheDirectClientsRequest(t *testing.T) {
	ctx := context.Background()
	raw := []byte("From: a@example.com\r\nTo: b@example.org\r\nSubject: x\r\nMessage-ID: <m1@example.com>\r\n\r\nhello\r\n")

	relaySrv, relayGot := captureServer(t)
	c, err := New(ctx, Config{Endpoint: relaySrv.URL})
	if err != nil {
		t.Fatal(err)
	}
	directSrv, directGot := captureServer(t)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 8, MaxIdleConnsPerHost: 8}}
	direct, err := gmail.NewService(ctx, option.WithEndpoint(directSrv.URL+"/"), option.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Send(ctx, "me", raw, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := direct.Users.Messages.Send("me", &gmail.Message{Raw: base64.URLEncoding.EncodeToString(raw)}).Context(ctx).Do(); err != nil {
			t.Fatal(err)
		}
	}
	rs, ds := relayGot(), directGot()
	if len(rs) != 3 || len(ds) != 3 {
		t.Fatalf("requests: relayed %d, direct %d; want 3 each (no extra calls)", len(rs), len(ds))
	}
	for i := range rs {
		r, d := rs[i], ds[i]
		if r.Method != d.Method || r.URI != d.URI || r.Proto != d.Proto {
			t.Errorf("request %d: relayed %s %s %s, direct %s %s %s", i, r.Method, r.URI, r.Proto, d.Method, d.URI, d.Proto)
		}
		if r.Body != d.Body {
			t.Errorf("request %d: bodies differ:\nrelayed %q\ndirect  %q", i, r.Body, d.Body)
		}
		if r.ContentLength != d.ContentLength || len(r.TransferEncoding) != 0 || len(d.TransferEncoding) != 0 {
			t.Errorf("request %d: framing relayed CL %d TE %v, direct CL %d TE %v", i, r.ContentLength, r.TransferEncoding, d.ContentLength, d.TransferEncoding)
		}
		for _, h := range []http.Header{r.Header, d.Header} {
			if h.Get("Expect") != "" {
				t.Errorf("request %d: Expect %q", i, h.Get("Expect"))
			}
		}
		names := func(h http.Header) []string {
			return slices.Sorted(func(yield func(string) bool) {
				for k := range h {
					if !yield(k) {
						return
					}
				}
			})
		}
		if r.Header.Get("Accept-Encoding") != "" || d.Header.Get("Accept-Encoding") != "gzip" {
			t.Errorf("request %d: Accept-Encoding relayed %q (want none), direct %q", i, r.Header.Get("Accept-Encoding"), d.Header.Get("Accept-Encoding"))
		}
		d.Header.Del("Accept-Encoding")
		if !slices.Equal(names(r.Header), names(d.Header)) {
			t.Errorf("request %d: header names differ:\nrelayed %v\ndirect  %v", i, names(r.Header), names(d.Header))
		}
		for k, v := range r.Header {
			if dv := d.Header[k]; strings.Join(dv, ",") != strings.Join(v, ",") {
				t.Logf("request %d: header %s: relayed %q, direct %q", i, k, v, dv)
			}
		}
	}
	for name, got := range map[string][]wireRequest{"relayed": rs, "direct": ds} {
		if got[1].RemoteAddr != got[0].RemoteAddr || got[2].RemoteAddr != got[0].RemoteAddr {
			t.Errorf("%s: connections not reused: %s, %s, %s", name, got[0].RemoteAddr, got[1].RemoteAddr, got[2].RemoteAddr)
		}
	}
	t.Logf("relayed headers %v", rs[0].Header)
	t.Logf("direct headers  %v", ds[0].Header)
}
