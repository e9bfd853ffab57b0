package api_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/relay"
)

// Issue 20: requests an attacker makes — from a web page the operator
// visits, through a rebinding host name, with slow or huge bodies. Every
// test here fails on the relay before the fix.

func tokenless(c *api.Config) { c.APIToken, c.AdminToken = "", "" }

// call is one request with exactly the headers a test gives (Host too).
type call struct {
	method, path, token, ct, body, host string
	header                              map[string]string
}

func (e *env) call(c call) reply {
	e.t.Helper()
	var rd io.Reader
	if c.body != "" {
		rd = strings.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, e.url+c.path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if c.ct != "" {
		req.Header.Set("Content-Type", c.ct)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	if c.host != "" {
		req.Host = c.host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, header: resp.Header}
	r.raw, _ = io.ReadAll(resp.Body)
	_ = json.Unmarshal(r.raw, &r.body)
	return r
}

func sendJSON(key string) string {
	b, _ := json.Marshal(sendBody(key))
	return string(b)
}

func (e *env) wantNothingSent(key string) {
	e.t.Helper()
	if n := e.Emulator.Deliveries(""); n != 0 {
		e.t.Fatalf("the emulator has %d deliveries; a refused request sent one", n)
	}
	jobs, _, err := e.Log.List(e.t.Context(), gmailrelay.ListOptions{})
	if err != nil || len(jobs) != 0 {
		e.t.Fatalf("the log holds %d jobs (%v) after a refused request", len(jobs), err)
	}
}

func errorCode(r reply) string {
	if m, ok := r.body["error"].(map[string]any); ok {
		s, _ := m["code"].(string)
		return s
	}
	return ""
}

func TestTokenlessRelayAnswersOnlyLoopbackHosts(t *testing.T) {
	e := newEnv(t, envOpts{configure: tokenless})
	for _, host := range []string{
		"rebind.attacker.example", "rebind.attacker.example:8080", "127.0.0.1.nip.io", "localhost.attacker.example",
		"10.0.0.5:8080", "[::ffff:127.0.0.1]:8080", "::ffff:127.0.0.1:80", "::ffff:7f00:1:", "0.0.0.0:8080", "127.0.0.1:99999", "[fe80::1]",
	} {
		for _, c := range []call{
			{method: "POST", path: "/v1/send", ct: "application/json", body: sendJSON("k1")},
			{method: "GET", path: "/v1/jobs"},
			{method: "POST", path: "/admin/faults", ct: "application/json", body: `{"mode":"fail-before-forward"}`},
		} {
			c.host = host
			r := e.call(c)
			if r.status != http.StatusForbidden || !strings.Contains(string(r.raw), "loopback") {
				t.Errorf("Host %s, %s %s: %d %s; want 403 naming the Host rule", host, c.method, c.path, r.status, r.raw)
			}
		}
	}
	e.wantNothingSent("k1")
	for _, host := range []string{"localhost", "LOCALHOST:8080", "127.0.0.1", "127.1.2.3:1", "[::1]", "[::1]:8080"} {
		if r := e.call(call{method: "GET", path: "/v1/jobs", host: host}); r.status != http.StatusOK {
			t.Errorf("Host %s: %d %s; want 200", host, r.status, r.raw)
		}
	}
}

// With tokens the Host may be any name (a proxy, a container name), but the
// Origin rule still holds.
func TestRelayWithTokensTakesAnyHost(t *testing.T) {
	e := newEnv(t, envOpts{})
	if r := e.call(call{method: "GET", path: "/v1/jobs", token: apiToken, host: "relay.internal:8080"}); r.status != 200 {
		t.Fatalf("tokens, Host relay.internal: %d %s", r.status, r.raw)
	}
}

// The headers browsers send on a cross-site form or fetch: an Origin of
// another site, Sec-Fetch-Site cross-site (or same-site: another port of
// localhost is another origin), Origin null from sandboxed frames.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	for _, mode := range []struct {
		name  string
		opts  envOpts
		token string
	}{{"tokenless", envOpts{configure: tokenless}, ""}, {"with tokens", envOpts{}, adminToken}} {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t, mode.opts)
			own := strings.TrimPrefix(e.url, "http://")
			for _, h := range []map[string]string{
				{"Origin": "http://attacker.example"},
				{"Origin": "https://attacker.example", "Sec-Fetch-Site": "cross-site"},
				{"Origin": "null"},
				{"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},
				{"Origin": "http://" + own + ".attacker.example"},
				{"Origin": "https://relay.example", "X-Forwarded-Host": "other.example"},
				{"Sec-Fetch-Site": "cross-site"},
				{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate"},
			} {
				for _, c := range []call{
					{method: "POST", path: "/v1/send", ct: "text/plain", body: sendJSON("k1")},
					{method: "POST", path: "/v1/send", ct: "application/json", body: sendJSON("k1")},
					{method: "POST", path: "/admin/faults", ct: "text/plain", body: `{"mode":"fail-before-forward"}`},
					{method: "GET", path: "/v1/jobs"},
				} {
					c.header, c.token = h, mode.token
					r := e.call(c)
					if r.status != http.StatusForbidden || errorCode(r) != "forbidden" || !strings.Contains(string(r.raw), "cross-origin") {
						t.Errorf("%v %s %s: %d %s; want 403 forbidden naming the cross-origin rule", h, c.method, c.path, r.status, r.raw)
					}
				}
			}
			e.wantNothingSent("k1")
			// The relay's own origin, and requests the user made themselves.
			for _, h := range []map[string]string{
				{"Origin": "http://" + own, "Sec-Fetch-Site": "same-origin"},
				// Behind a TLS proxy that forwards the browser's host.
				{"Origin": "https://relay.example", "X-Forwarded-Host": "relay.example", "Sec-Fetch-Site": "same-origin"},
				{"Sec-Fetch-Site": "none"},
				{},
			} {
				r := e.call(call{method: "GET", path: "/v1/jobs", token: mode.token, header: h})
				if r.status != http.StatusOK {
					t.Errorf("%v: %d %s; want 200", h, r.status, r.raw)
				}
			}
		})
	}
}

// Browsers send text/plain, form and multipart bodies across sites without
// a preflight; every JSON endpoint takes application/json only.
func TestJSONEndpointsRequireJSONContentType(t *testing.T) {
	e := newEnv(t, envOpts{configure: tokenless})
	bad := []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonp"}
	for _, ct := range bad {
		for _, c := range []call{
			{method: "POST", path: "/v1/send", body: sendJSON("k1")},
			{method: "POST", path: "/admin/faults", body: `{"mode":"fail-before-forward"}`},
			{method: "POST", path: "/v1/jobs/%3Ca@b%3E/resolve", body: `{"action":"abandon"}`},
			{method: "POST", path: "/admin/sweep", body: `{}`},
		} {
			c.ct = ct
			r := e.call(c)
			if r.status != http.StatusUnsupportedMediaType || errorCode(r) != "unsupported_media_type" {
				t.Errorf("Content-Type %q, %s %s: %d %s; want 415", ct, c.method, c.path, r.status, r.raw)
			}
		}
		r := e.call(call{method: "POST", path: "/gmail/v1/users/me/messages/send", ct: ct, body: `{"raw":"eA"}`})
		if m, _ := r.body["error"].(map[string]any); r.status != http.StatusUnsupportedMediaType || m["code"] != 415.0 {
			t.Errorf("Gmail path, Content-Type %q: %d %s; want 415 in Gmail's error JSON", ct, r.status, r.raw)
		}
		r = e.call(call{method: "POST", path: "/upload/gmail/v1/users/me/messages/send?uploadType=media", ct: ct, body: rawMessage("<u@x.example>")})
		if r.status != http.StatusUnsupportedMediaType {
			t.Errorf("upload path, Content-Type %q: %d %s; want 415", ct, r.status, r.raw)
		}
	}
	e.wantNothingSent("k1")
	if r := e.call(call{method: "POST", path: "/v1/send", ct: "application/json; charset=utf-8", body: sendJSON("k1")}); r.status != 200 {
		t.Errorf("application/json; charset=utf-8: %d %s", r.status, r.raw)
	}
	if r := e.call(call{method: "POST", path: "/v1/send", ct: "message/rfc822", body: rawMessage("<r@x.example>")}); r.status != 200 {
		t.Errorf("message/rfc822: %d %s", r.status, r.raw)
	}
	if r := e.call(call{method: "POST", path: "/upload/gmail/v1/users/me/messages/send?uploadType=media", ct: "message/rfc822", body: rawMessage("<u@x.example>")}); r.status != 200 {
		t.Errorf("upload media message/rfc822: %d %s", r.status, r.raw)
	}
	if r := e.call(call{method: "POST", path: "/admin/sweep"}); r.status != 200 {
		t.Errorf("POST /admin/sweep without a body: %d %s", r.status, r.raw)
	}
}

func rawMessage(id string) string {
	return "Message-ID: " + id + "\r\nTo: customer@example.org\r\nSubject: s\r\n\r\nbody\r\n"
}

func TestDuplicateKeysAndInvalidUTF8AreRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, body := range []string{
		`{"key":"k1","key":"k2","to":"customer@example.org","text":"t"}`,
		"{\"key\":\"k\xff\",\"to\":\"customer@example.org\",\"text\":\"t\"}",
		`{"key":"k\udc00","to":"customer@example.org","text":"t"}`,
		`{"key":"k1","to":"customer@example.org","subject":"a\u2028Bcc: x@evil.example","text":"t"}`,
		`{"key":"k1","to":"\"A\u0085\" <customer@example.org>","text":"t"}`,
		`{"job":{"customer_id":"a:b","event_type":"c","order_id":"d"},"to":"customer@example.org","text":"t"}`,
	} {
		r := e.call(call{method: "POST", path: "/v1/send", token: apiToken, ct: "application/json", body: body})
		if r.status != 400 {
			t.Errorf("%q: %d %s; want 400", body, r.status, r.raw)
		}
	}
	e.wantNothingSent("")
	r := e.call(call{method: "POST", path: "/admin/faults", token: adminToken, ct: "application/json",
		body: `{"mode":"fail-before-forward","mode":"forward-then-drop-response"}`})
	if r.status != 400 {
		t.Errorf("duplicate mode in a fault rule: %d %s", r.status, r.raw)
	}
	// Two whole messages under "raw" and "Raw": encoding/json folds case and
	// keeps the last, another reader the first.
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	r = e.call(call{method: "POST", path: "/gmail/v1/users/me/messages/send", token: apiToken, ct: "application/json",
		body: `{"raw":"` + b64(rawMessage("<d1@x.example>")) + `","Raw":"` + b64(rawMessage("<d2@x.example>")) + `"}`})
	if r.status != 400 {
		t.Errorf("duplicate raw on the Gmail path: %d %s", r.status, r.raw)
	}
	r = e.call(call{method: "POST", path: "/gmail/v1/users/me/messages/send", token: apiToken, ct: "application/json",
		body: `{"raw":"` + b64(rawMessage("<d3@x.example>")) + `","threadId":"\ud800"}`})
	if r.status != 400 {
		t.Errorf("unpaired surrogate on the Gmail path: %d %s", r.status, r.raw)
	}
	for _, id := range []string{"<d1@x.example>", "<d2@x.example>", "<d3@x.example>"} {
		if d := e.Emulator.Deliveries(id); d != 0 {
			t.Errorf("%s: %d deliveries after a refused request", id, d)
		}
	}
}

// rawConn opens a connection to the test server and writes head.
func (e *env) rawConn(head string) (net.Conn, *bufio.Reader) {
	e.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		e.t.Fatal(err)
	}
	// A deadline, not a wait: before the fix the server never answered.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	return conn, bufio.NewReader(conn)
}

// wantAnswerThenClose reads one answer and then the end of the connection.
func wantAnswerThenClose(t *testing.T, rd *bufio.Reader, status int) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatalf("no answer while the body is still outstanding: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("status %d %s, want %d", resp.StatusCode, body, status)
	}
	if _, err := rd.ReadByte(); err != io.EOF {
		t.Fatalf("the connection stays open after the refusal (%v): a slow body could hold it", err)
	}
	return resp
}

// An unauthenticated client sending its body one byte at a time used to be
// drained before it got its 401.
func TestAuthIsDecidedBeforeTheBodyIsRead(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, framing := range []string{"Content-Length: 100000\r\n", "Transfer-Encoding: chunked\r\n"} {
		_, rd := e.rawConn("POST /v1/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\nContent-Type: application/json\r\n" +
			framing + "\r\n" + map[bool]string{true: "1\r\n{\r\n", false: "{"}[strings.HasPrefix(framing, "Transfer")])
		wantAnswerThenClose(t, rd, http.StatusUnauthorized)
	}
}

// A 50 MB body used to be read to about 29 MB before 413.
func TestOversizeContentLengthIs413BeforeReading(t *testing.T) {
	e := newEnv(t, envOpts{})
	for path, ct := range map[string]string{
		"/v1/send": "application/json", "/gmail/v1/users/me/messages/send": "application/json",
		"/upload/gmail/v1/users/me/messages/send?uploadType=media": "message/rfc822",
	} {
		_, rd := e.rawConn("POST " + path + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + apiToken +
			"\r\nContent-Type: " + ct + "\r\nContent-Length: 50000000\r\n\r\n")
		wantAnswerThenClose(t, rd, http.StatusRequestEntityTooLarge)
	}
	// message/rfc822 bodies may be larger than JSON ones, up to Gmail's 35 MB.
	_, rd := e.rawConn("POST /v1/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + apiToken +
		"\r\nContent-Type: message/rfc822\r\nContent-Length: 36700161\r\n\r\n")
	wantAnswerThenClose(t, rd, http.StatusRequestEntityTooLarge)
}

// Request bytes in flight are bounded by what bodies have delivered: a
// request that does not fit beside them is refused with 503 + Retry-After,
// before its body is read; requests without a body are never held back.
func TestRequestBytesInFlightAreBounded(t *testing.T) {
	reads := newBodyReads()
	e := newEnv(t, envOpts{bodyRead: reads.hook, configure: func(c *api.Config) { c.MaxInflightBytes = 1 << 20 }})
	big := sendJSON("k-big")
	big = big[:len(big)-1] + `,"html":"` + strings.Repeat("x", 800<<10) + `"}`
	conn, rd := e.rawConn(fmt.Sprintf("POST /v1/send HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", apiToken, len(big)))
	// 100 Continue comes when the handler reads the body: past the guard.
	resp, err := http.ReadResponse(rd, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("first request: %v %v; want 100 Continue", resp, err)
	}
	// All but its last byte: the relay holds 800 KB of it.
	if _, err := io.WriteString(conn, big[:len(big)-1]); err != nil {
		t.Fatal(err)
	}
	reads.reached(t, int64(len(big)-1), 1)
	second := sendJSON("k-second")
	second = second[:len(second)-1] + `,"html":"` + strings.Repeat("y", 400<<10) + `"}`
	r := e.call(call{method: "POST", path: "/v1/send", token: apiToken, ct: "application/json", body: second})
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("second request while 800 KB of 1 MB are in flight: %d %v %s; want 503 + Retry-After", r.status, r.header, r.raw)
	}
	if r := e.call(call{method: "GET", path: "/v1/stats", token: apiToken}); r.status != 200 {
		t.Fatalf("a request without a body was held back: %d", r.status)
	}
	if _, err := io.WriteString(conn, big[len(big)-1:]); err != nil {
		t.Fatal(err)
	}
	if resp, err = http.ReadResponse(rd, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	resp.Body.Close()
	if r := e.call(call{method: "POST", path: "/v1/send", token: apiToken, ct: "application/json", body: second}); r.status != 200 {
		t.Fatalf("second request after the first finished: %d %s", r.status, r.raw)
	}
	big1, second1 := e.Emulator.Deliveries(relay.MessageID("k-big", domain)), e.Emulator.Deliveries(relay.MessageID("k-second", domain))
	if all := e.Emulator.Deliveries(""); big1 != 1 || second1 != 1 || all != 2 {
		t.Fatalf("emulator deliveries: k-big %d, k-second %d, all %d; want 1, 1, 2", big1, second1, all)
	}
}

// An unauthenticated 900 KB path used to be logged whole.
func TestAccessLogTruncatesThePath(t *testing.T) {
	logs := &testenv.LockedBuffer{}
	e := newEnv(t, envOpts{logs: logs})
	long := "/v1/jobs/" + strings.Repeat("a", 900<<10)
	r := e.call(call{method: "GET", path: long})
	if r.status != 401 {
		t.Fatalf("status %d", r.status)
	}
	if len(r.raw) > 4096 {
		t.Errorf("the answer is %d bytes", len(r.raw))
	}
	out := []byte(logs.String())
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(line) > 4096 {
			t.Fatalf("a log line of %d bytes: the path is logged whole", len(line))
		}
	}
	if !bytes.Contains(out, []byte(`"path":"/v1/jobs/aaaa`)) {
		t.Fatalf("no access-log line with the path's start:\n%.500s", out)
	}
}
