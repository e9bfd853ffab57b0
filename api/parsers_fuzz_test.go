package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"mime/multipart"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/relay"
)

// multipartBody is a multipart/related body of the parts, with boundary b.
func multipartBody(b string, parts ...string) string {
	var s strings.Builder
	for _, p := range parts {
		s.WriteString("--" + b + "\r\nContent-Type: application/octet-stream\r\n\r\n" + p + "\r\n")
	}
	return s.String() + "--" + b + "--\r\n"
}

// reparseBoundary is the boundary FuzzReadMultipartRelated writes an
// accepted upload back with.
const reparseBoundary = "relay-fuzz-3f9c1d"

// FuzzReadMultipartRelated: the Gmail upload path's multipart/related
// parser refuses a body only as a client error (400 or 413, never an
// internal one), and what it accepts, written back as a multipart body,
// reads back the same: the metadata and the message bytes.
func FuzzReadMultipartRelated(f *testing.F) {
	ct := "multipart/related; boundary=b1"
	f.Add(ct, []byte(multipartBody("b1", `{"threadId":"t1"}`, "From: a@x.com\r\nTo: b@y.com\r\nSubject: s\r\n\r\nbody\r\n")))
	f.Add(ct, []byte(multipartBody("b1", "", "From: a@x.com\r\n\r\nx")))
	f.Add(ct, []byte(multipartBody("b1", `{"threadId":"t1","threadid":"t2"}`, "x")))
	f.Add(ct, []byte(multipartBody("b1", strings.Repeat("[", 100), "x")))
	f.Add(ct, []byte(multipartBody("b1", `{"raw":"eA","labelIds":[],"relay":{}}`, "")))
	f.Add(ct, []byte(multipartBody("b1", `{}`)))
	f.Add(`multipart/related; boundary="a b"`, []byte(multipartBody("a b", "{}", "--a c\r\n")))
	f.Add("multipart/related", []byte(multipartBody("b1", "{}", "x")))
	f.Add("text/plain; boundary=b1", []byte("--b1--"))
	f.Add(ct, []byte("--b1\r\n\r\n{}\r\n--b1\r\n\r\nunterminated"))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		meta, raw, err := readMultipart(contentType, body)
		if err != nil {
			var re *relay.Error
			if !errors.As(err, &re) || (re.Code != relay.CodeInvalid && re.Code != relay.CodeTooLarge) {
				t.Fatalf("refused with %T %v, want an invalid or too-large *relay.Error", err, err)
			}
			return
		}
		m, _ := json.Marshal(meta)
		if bytes.Contains(raw, []byte(reparseBoundary)) || bytes.Contains(m, []byte(reparseBoundary)) {
			return
		}
		var again bytes.Buffer
		w := multipart.NewWriter(&again)
		if err := w.SetBoundary(reparseBoundary); err != nil {
			t.Fatal(err)
		}
		for _, p := range [][]byte{m, raw} {
			pw, _ := w.CreatePart(nil)
			_, _ = pw.Write(p)
		}
		_ = w.Close()
		meta2, raw2, err := readMultipart("multipart/related; boundary="+reparseBoundary, again.Bytes())
		if err != nil {
			t.Fatalf("accepted %q, but not written back: %v", body, err)
		}
		if m2, _ := json.Marshal(meta2); !bytes.Equal(m2, m) || !bytes.Equal(raw2, raw) {
			t.Fatalf("accepted %q as %s + %q; written back it reads %s + %q", body, m, raw, m2, raw2)
		}
	})
}

func readMultipart(contentType string, body []byte) (gmailMessage, []byte, error) {
	r, _ := http.NewRequest(http.MethodPost, "/upload/gmail/v1/users/me/messages/send?uploadType=multipart", bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	return readMultipartRelated(r)
}

// FuzzParseMediaType: parseMediaType's fast path for the exact strings
// clients send answers what mime.ParseMediaType does, and every type it
// returns reads back as itself (so the guard's types can be sent).
func FuzzParseMediaType(f *testing.F) {
	for _, s := range []string{"application/json", "APPLICATION/JSON", "application/json; charset=utf-8", "message/rfc822",
		"multipart/related; boundary=x", "multipart/related; boundary=", "text/plain;", "", "application/json ", ";", "a/b; c=\"d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got := parseMediaType(v)
		want := ""
		if mt, _, err := mime.ParseMediaType(v); err == nil {
			want = strings.ToLower(mt)
		}
		if got != want {
			t.Fatalf("parseMediaType(%q) = %q; mime.ParseMediaType: %q", v, got, want)
		}
		if got != "" && parseMediaType(got) != got {
			t.Fatalf("parseMediaType(%q) = %q, which reads back as %q", v, got, parseMediaType(got))
		}
	})
}

// FuzzBodyRuleFor: whatever the path, query and Content-Type, an
// endpoint's body rule takes some type a client can send, never more
// than the largest body the relay reads, JSON never more than
// MaxJSONBytes, and a message (message/rfc822, multipart/related) only on
// the send paths that take one.
func FuzzBodyRuleFor(f *testing.F) {
	for _, s := range [][3]string{
		{"/v1/send", "", "application/json"}, {"/v1/send", "", "message/rfc822"}, {"/v1/send", "", "Message/RFC822; x=y"},
		{"/upload/gmail/v1/users/me/messages/send", "uploadType=multipart", "multipart/related; boundary=b"},
		{"/upload/gmail/v1/users/me/messages/send", "uploadType=media", "message/rfc822"},
		{"/upload/gmail/v1/users/me/messages/send", "uploadType=resumable", ""},
		{"/gmail/v1/users/me/messages/send", "", "application/json"}, {"/admin/faults", "", "text/plain"},
		{"/v1/send/", "", "message/rfc822"}, {"/v1//send", "uploadType=media", "message/rfc822"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, path, query, contentType string) {
		r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}}
		r.Header.Set("Content-Type", contentType)
		rule := bodyRuleFor(r)
		if rule.limit <= 0 || rule.limit > relay.MaxMessageBytes+1<<20 {
			t.Fatalf("%s?%s: limit %d", path, query, rule.limit)
		}
		if len(rule.types) == 0 {
			t.Fatalf("%s?%s: no type is accepted", path, query)
		}
		sendPath := path == "/v1/send" || strings.HasPrefix(path, "/upload/gmail/")
		for _, typ := range rule.types {
			if parseMediaType(typ) != typ {
				t.Fatalf("%s?%s: takes %q, which no Content-Type reads as", path, query, typ)
			}
			if typ == "application/json" && rule.limit > MaxJSONBytes {
				t.Fatalf("%s?%s: JSON up to %d bytes", path, query, rule.limit)
			}
			if typ != "application/json" && !sendPath {
				t.Fatalf("%s?%s: takes %s", path, query, typ)
			}
		}
	})
}

// validHostByte is what net/http lets through in a Host header
// (golang.org/x/net/http/httpguts.ValidHostHeader): the guard never sees
// another byte in r.Host.
func validHostByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!$%&'()*+,-.:;=[]_~", c) >= 0
}

func reachableHost(h string) bool {
	for i := 0; i < len(h); i++ {
		if !validHostByte(h[i]) {
			return false
		}
	}
	return true
}

// portRule is the rule validPort implements, from RFC 3986: ":" then an
// optional port of at most five digits, at most 65535.
func portRule(s string) bool {
	digits, ok := strings.CutPrefix(s, ":")
	if !ok || len(digits) > 5 || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	n, _ := strconv.Atoi(digits)
	return n <= 65535
}

// FuzzValidPort: validPort is the port rule.
func FuzzValidPort(f *testing.F) {
	for _, s := range []string{":", ":0", ":8080", ":65535", ":65536", ":+80", ":-1", ":08080", ":000080", "8080", ":1_0", ": 80", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validPort(s), portRule(s); got != want {
			t.Fatalf("validPort(%q) = %v, want %v", s, got, want)
		}
	})
}

// loopbackRule is the rule sameOrigin states for a relay without tokens:
// the Host is localhost (any case), an IPv4 address in 127.0.0.0/8 or
// [::1], with or without a port.
func loopbackRule(host string) bool {
	if rest, ok := strings.CutPrefix(host, "["); ok {
		addr, port, ok := strings.Cut(rest, "]")
		if !ok || port != "" && !portRule(port) {
			return false
		}
		ip, err := netip.ParseAddr(addr)
		return err == nil && ip == netip.IPv6Loopback()
	}
	name := host
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		if !portRule(host[i:]) {
			return false
		}
		name = host[:i]
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip.Is4() && ip.As4()[0] == 127
}

// FuzzLoopbackHost: on any Host header net/http lets through,
// loopbackHost is the loopback rule (a tokenless relay answers nothing
// else: DNS rebinding).
func FuzzLoopbackHost(f *testing.F) {
	for _, s := range []string{"localhost", "LOCALHOST:8080", "127.0.0.1", "127.1.2.3:1", "[::1]", "[::1]:8080", "[::1]:",
		"rebind.attacker.example", "127.0.0.1.nip.io", "localhost.attacker.example", "10.0.0.5:8080", "[::ffff:127.0.0.1]:8080", "::ffff:127.0.0.1:80", "::ffff:7f00:1:",
		"0.0.0.0:8080", "127.0.0.1:99999", "[fe80::1]", "127.000.0.1", "::1", "[::1]x", "[::1%25lo]", "2130706433", "0x7f.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		if !reachableHost(host) {
			return
		}
		if got, want := loopbackHost(host), loopbackRule(host); got != want {
			t.Fatalf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	})
}

// FuzzOwnOrigin: an Origin ownOrigin accepts is an http or https origin
// (scheme and authority only) naming the very host the request went to,
// and the origin a browser sends from a page of the relay, in any letter
// case, is accepted.
func FuzzOwnOrigin(f *testing.F) {
	for _, s := range [][2]string{
		{"http://localhost:8080", "localhost:8080"}, {"HTTPS://LocalHost:8080", "localhost:8080"}, {"http://localhost:8080/", "localhost:8080"},
		{"http://localhost:3000", "localhost:8080"}, {"null", "localhost"}, {"http://", ""}, {"http://a@b", "a@b"},
		{"http://relay.example.attacker.example", "relay.example"}, {"ftp://localhost", "localhost"}, {"http://[::1]:80", "[::1]:80"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, origin, host string) {
		if !reachableHost(host) {
			return
		}
		if host != "" && (!ownOrigin("http://"+host, host) || !ownOrigin("HTTPS://"+strings.ToUpper(host), host)) {
			t.Fatalf("the relay's own origin is refused for Host %q", host)
		}
		if !ownOrigin(origin, host) {
			return
		}
		u, err := url.Parse(origin)
		if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Opaque != "" || u.User != nil ||
			u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
			t.Fatalf("ownOrigin(%q, %q) accepts what is not an http(s) origin (%v)", origin, host, err)
		}
		own, err := url.Parse("http://" + host)
		if err != nil || !strings.EqualFold(u.Host, own.Host) {
			t.Fatalf("ownOrigin(%q, %q): the origin names host %q (%v)", origin, host, u.Host, err)
		}
	})
}
