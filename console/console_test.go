package console_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/console"
	"github.com/gmailrelay/gmailrelay/faultmodes"
)

func TestSessionCookieFlags(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, tc := range []struct {
		name       string
		headers    []string
		wantSecure bool
	}{
		{"plain http", nil, false},
		{"behind a TLS proxy", []string{"X-Forwarded-Proto", "https"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.client()
			login := c.do(http.MethodGet, "/ui/login", nil, tc.headers...)
			p := c.do(http.MethodPost, "/ui/login", url.Values{"csrf": {csrf(t, login)}, "token": {adminToken}}, tc.headers...)
			if p.status != http.StatusSeeOther {
				t.Fatalf("sign-in: got %d, want 303", p.status)
			}
			resp := http.Response{Header: p.header}
			var got *http.Cookie
			for _, ck := range resp.Cookies() {
				if ck.Name == "gmailrelay_session" && ck.Value != "" {
					got = ck
				}
			}
			if got == nil {
				t.Fatalf("no session cookie set; Set-Cookie: %q", p.header.Values("Set-Cookie"))
			}
			if !got.HttpOnly || got.SameSite != http.SameSiteStrictMode || got.Secure != tc.wantSecure || got.Path != "/ui/" {
				t.Errorf("cookie: HttpOnly %v SameSite %v Secure %v Path %q; want true, Strict, %v, /ui/",
					got.HttpOnly, got.SameSite, got.Secure, got.Path, tc.wantSecure)
			}
			if len(got.Value) < 40 {
				t.Errorf("session id %d characters long; want 32 random bytes", len(got.Value))
			}
		})
	}
}

func TestSignInRefusals(t *testing.T) {
	e := newEnv(t, envOpts{})
	t.Run("wrong token", func(t *testing.T) {
		c := e.client()
		p := c.signIn("not-the-token")
		if p.status != http.StatusUnauthorized || !strings.Contains(p.body, "neither the relay") {
			t.Fatalf("got %d, want 401 with an explanation:\n%s", p.status, p.body)
		}
		if c.cookie("gmailrelay_session") != nil {
			t.Error("a wrong token got a session cookie")
		}
		if g := c.get("/ui/"); g.status != http.StatusSeeOther || g.header.Get("Location") != "/ui/login" {
			t.Errorf("overview without a session: got %d %q, want 303 to /ui/login", g.status, g.header.Get("Location"))
		}
	})
	t.Run("no CSRF token on the sign-in form", func(t *testing.T) {
		c := e.client()
		c.get("/ui/login")
		p := c.do(http.MethodPost, "/ui/login", url.Values{"token": {adminToken}})
		if p.status != http.StatusForbidden {
			t.Fatalf("got %d, want 403", p.status)
		}
		if c.cookie("gmailrelay_session") != nil {
			t.Error("sign-in without CSRF token got a session")
		}
	})
	t.Run("empty token", func(t *testing.T) {
		if p := e.client().signIn(""); p.status != http.StatusUnauthorized {
			t.Fatalf("got %d, want 401", p.status)
		}
	})
}

func TestPostNeedsCSRFToken(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_1:charge:ord_1", "Your invoice")
	c := e.client()
	good := c.mustSignIn(adminToken)
	wrong := "x" + good[1:]
	if good[0] == 'x' { // "x"+good[1:] would be the good token (1 in 64 runs)
		wrong = "y" + good[1:]
	}
	for _, tc := range []struct {
		name string
		form url.Values
	}{
		{"no token", url.Values{"action": {"mark-sent"}, "note": {"n"}}},
		{"wrong token", url.Values{"csrf": {wrong}, "action": {"mark-sent"}, "note": {"n"}}},
		{"empty token", url.Values{"csrf": {""}, "action": {"mark-sent"}, "note": {"n"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := c.do(http.MethodPost, jobPath(id)+"/resolve", tc.form)
			if p.status != http.StatusForbidden {
				t.Fatalf("got %d, want 403:\n%s", p.status, p.body)
			}
		})
	}
	t.Run("fault add and sign-out without token", func(t *testing.T) {
		for _, path := range []string{"/ui/faults", "/ui/logout"} {
			if p := c.do(http.MethodPost, path, url.Values{"mode": {"fail-before-forward"}}); p.status != http.StatusForbidden {
				t.Errorf("POST %s: got %d, want 403", path, p.status)
			}
		}
	})
	e.wantUntouched(t, id, "refused")
}

// TestPostChecksCSRFBeforeSession: a POST whose form carries no CSRF token
// is 403 whether or not a session exists (every POST carries one:
// docs/console.md#sessions-cookies-csrf); one that carries a token but has no session, or an ended one, is
// 401 "Not signed in"; a session with a wrong token stays 403.
func TestPostChecksCSRFBeforeSession(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_9:charge:ord_9", "Your invoice")
	resolve := jobPath(id) + "/resolve"
	expired := e.client()
	oldTok := expired.mustSignIn(adminToken)
	e.Clock.Advance(console.DefaultSessionTTL)
	signed := e.client()
	tok := signed.mustSignIn(adminToken) // signed in after the clock moved: still valid
	wrong := "x" + tok[1:]
	if tok[0] == 'x' {
		wrong = "y" + tok[1:]
	}
	anon := e.client()
	for _, tc := range []struct {
		name       string
		c          *client
		path       string
		form       url.Values
		wantStatus int
		wantText   string
	}{
		{"no session, no token", anon, resolve, url.Values{"action": {"abandon"}, "note": {"n"}}, http.StatusForbidden, "security token"},
		{"no session, empty token", anon, resolve, url.Values{"csrf": {""}, "action": {"abandon"}}, http.StatusForbidden, "security token"},
		{"no session, no token, fault", anon, "/ui/faults", url.Values{"mode": {"fail-before-forward"}}, http.StatusForbidden, "security token"},
		{"no session, no token, sign-out", anon, "/ui/logout", url.Values{}, http.StatusForbidden, "security token"},
		{"no session, a token", anon, resolve, url.Values{"csrf": {tok}, "action": {"abandon"}, "note": {"n"}}, http.StatusUnauthorized, "Not signed in"},
		{"ended session, its token", expired, resolve, url.Values{"csrf": {oldTok}, "action": {"abandon"}, "note": {"n"}}, http.StatusUnauthorized, "Not signed in"},
		{"session, no token", signed, resolve, url.Values{"action": {"abandon"}}, http.StatusForbidden, "security token"},
		{"session, wrong token", signed, resolve, url.Values{"csrf": {wrong}, "action": {"abandon"}}, http.StatusForbidden, "security token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.c.do(http.MethodPost, tc.path, tc.form)
			if p.status != tc.wantStatus || !strings.Contains(p.body, tc.wantText) {
				t.Errorf("got %d, want %d saying %q:\n%s", p.status, tc.wantStatus, tc.wantText, p.body)
			}
		})
	}
	e.wantUntouched(t, id, "refused")
}

// wantUntouched checks that the POSTs described by what changed nothing:
// job id is still in review with no resolved line, and no fault rule exists.
func (e *env) wantUntouched(t *testing.T, id, what string) {
	t.Helper()
	if got := e.state(id); got != gmailrelay.StateReview {
		t.Errorf("state after %s POSTs: got %s, want review", what, got)
	}
	if r := resolvedLines(e.lines(id)); len(r) != 0 {
		t.Errorf("resolved lines after %s POSTs: %+v", what, r)
	}
	if f := e.Faults.List(); len(f) != 0 {
		t.Errorf("fault rules after a %s POST: %+v", what, f)
	}
}

func TestAdminResolvesWithNote(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_2:charge:ord_2", "Your invoice")
	c := e.client()
	tok := c.mustSignIn(adminToken)
	jp := c.get(jobPath(id))
	// The job was found once in the mailbox (a review channel): the page
	// says a retry would deliver it again.
	for _, hook := range []string{`data-testid="resolve-note"`, `data-testid="resolve-mark-sent"`, `data-testid="resolve-retry"`, `data-testid="resolve-abandon"`, `data-testid="resolve-delivered"`} {
		if !strings.Contains(jp.body, hook) {
			t.Errorf("admin job page lacks %s", hook)
		}
	}
	note := "checked with the customer: one copy arrived"
	p := c.do(http.MethodPost, jobPath(id)+"/resolve", url.Values{"csrf": {tok}, "action": {"mark-sent"}, "note": {note}})
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), jobPath(id)) {
		t.Fatalf("resolve: got %d %q, want 303 to the job page:\n%s", p.status, p.header.Get("Location"), p.body)
	}
	r := resolvedLines(e.lines(id))
	if len(r) != 1 || r[0].Actor != console.Actor || r[0].Note != note || r[0].Reason != "mark-sent" || r[0].State != gmailrelay.StateSent {
		t.Fatalf("resolved lines: got %+v, want one mark-sent line by ui with the note", r)
	}
	if got := e.state(id); got != gmailrelay.StateSent {
		t.Errorf("state: got %s, want sent", got)
	}
	after := c.get(p.header.Get("Location"))
	if !strings.Contains(after.body, `data-testid="resolve-done"`) || strings.Contains(after.body, `data-testid="resolve-mark-sent"`) {
		t.Error("after the decision the page should confirm it and offer no more buttons")
	}
}

func TestViewerLooksButCannotAct(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_3:charge:ord_3", "Your invoice")
	c := e.client()
	tok := c.mustSignIn(apiToken)
	for _, path := range []string{"/ui/", "/ui/review", jobPath(id), "/ui/faults", "/ui/log", "/ui/jobs?state=review"} {
		p := c.get(path)
		if p.status != http.StatusOK {
			t.Errorf("GET %s as viewer: got %d, want 200", path, p.status)
		}
		for _, hook := range []string{"resolve-mark-sent", "resolve-retry", "resolve-abandon", "resolve-note", "fault-add"} {
			if strings.Contains(p.body, `data-testid="`+hook+`"`) {
				t.Errorf("GET %s as viewer shows %s", path, hook)
			}
		}
	}
	// A forged POST with a valid session and its valid CSRF token.
	for _, action := range []string{"mark-sent", "retry", "abandon"} {
		p := c.do(http.MethodPost, jobPath(id)+"/resolve", url.Values{"csrf": {tok}, "action": {action}, "note": {"forged"}})
		if p.status != http.StatusForbidden {
			t.Errorf("viewer POST resolve %s: got %d, want 403", action, p.status)
		}
	}
	if p := c.do(http.MethodPost, "/ui/faults", url.Values{"csrf": {tok}, "mode": {"fail-before-forward"}}); p.status != http.StatusForbidden {
		t.Errorf("viewer POST fault: got %d, want 403", p.status)
	}
	e.wantUntouched(t, id, "forged")
}

func TestSignOutEndsSession(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_4:charge:ord_4", "Your invoice")
	c := e.client()
	tok := c.mustSignIn(adminToken)
	old := *c.cookie("gmailrelay_session")
	p := c.do(http.MethodPost, "/ui/logout", url.Values{"csrf": {tok}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/login" {
		t.Fatalf("sign-out: got %d %q", p.status, p.header.Get("Location"))
	}
	// Replay the old cookie in a fresh client: the server must have ended it.
	replay := e.client()
	u, _ := url.Parse(e.url + "/ui/")
	replay.http.Jar.SetCookies(u, []*http.Cookie{{Name: old.Name, Value: old.Value, Path: "/ui/"}})
	if g := replay.get("/ui/review"); g.status != http.StatusSeeOther || g.header.Get("Location") != "/ui/login" {
		t.Errorf("GET with the old cookie: got %d %q, want 303 to sign-in", g.status, g.header.Get("Location"))
	}
	post := replay.do(http.MethodPost, jobPath(id)+"/resolve", url.Values{"csrf": {tok}, "action": {"abandon"}, "note": {"x"}})
	if post.status != http.StatusUnauthorized {
		t.Errorf("POST with the old cookie and its CSRF token: got %d, want 401", post.status)
	}
	if got := e.state(id); got != gmailrelay.StateReview {
		t.Errorf("state: got %s, want review", got)
	}
}

func TestSessionExpires(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client()
	c.mustSignIn(apiToken)
	e.Clock.Advance(console.DefaultSessionTTL - time.Second)
	if g := c.get("/ui/"); g.status != http.StatusOK {
		t.Fatalf("before expiry: got %d, want 200", g.status)
	}
	e.Clock.Advance(time.Second)
	if g := c.get("/ui/"); g.status != http.StatusSeeOther {
		t.Fatalf("after expiry: got %d, want 303 to sign-in", g.status)
	}
}

func TestNoTokensAnySignInIsAdmin(t *testing.T) {
	e := newEnv(t, envOpts{noTokens: true})
	id := e.reviewJob("cus_5:charge:ord_5", "Your invoice")
	c := e.client()
	login := c.get("/ui/login")
	if !strings.Contains(login.body, "any sign-in is admin") {
		t.Errorf("the sign-in page does not say what sign-in means without tokens:\n%s", login.body)
	}
	tok := c.mustSignIn("")
	p := c.do(http.MethodPost, jobPath(id)+"/resolve", url.Values{"csrf": {tok}, "action": {"abandon"}, "note": {"test order"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("resolve: got %d, want 303:\n%s", p.status, p.body)
	}
	if got := e.state(id); got != gmailrelay.StateAbandoned {
		t.Errorf("state: got %s, want abandoned", got)
	}
}

const (
	scriptPayload = `<script>window.__xss=1</script>`
	imgPayload    = `"><img src=x onerror="window.__xss=2">`
)

func TestOutsideValuesAreEscaped(t *testing.T) {
	e := newEnv(t, envOpts{})
	key := "cus_x:" + scriptPayload + ":" + imgPayload
	id := e.reviewJob(key, "Receipt "+scriptPayload+" "+imgPayload)
	c := e.client()
	c.mustSignIn(adminToken)
	if _, err := e.Faults.Add(faultmodes.Spec{Mode: faultmodes.FailBeforeForward, Key: key}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/ui/review", jobPath(id), "/ui/faults", "/ui/log", "/ui/jobs?state=review"} {
		p := c.get(path)
		if p.status != http.StatusOK {
			t.Fatalf("GET %s: %d", path, p.status)
		}
		for _, raw := range []string{"<script>window", "<img src=x", `"><img`} {
			if strings.Contains(p.body, raw) {
				t.Errorf("GET %s: the page contains %q unescaped", path, raw)
			}
		}
		if path != "/ui/log" && !strings.Contains(p.body, "&lt;script&gt;window.__xss=1&lt;/script&gt;") { // log lines carry no key
			t.Errorf("GET %s: the payload is not shown as escaped text", path)
		}
	}
	if p := c.get(jobPath(id)); !strings.Contains(p.body, `data-testid="job-subject">Receipt &lt;script&gt;`) {
		t.Errorf("job page does not show the subject as text")
	}
}

func TestNotFoundAndBadInput(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_6:charge:ord_6", "Your invoice")
	sent := e.send("cus_7:receipt:ord_7", "default", "Receipt", "")
	c := e.client()
	tok := c.mustSignIn(adminToken)
	for _, tc := range []struct {
		name, method, path string
		form               url.Values
		want               int
		says               string
	}{
		{"missing job", "GET", jobPath("<job-0000@nowhere.example>"), nil, 404, "no job with that Message-ID"},
		{"not a Message-ID", "GET", "/ui/jobs/" + url.PathEscape("no at sign"), nil, 400, "not a Message-ID"},
		{"no such page", "GET", "/ui/nowhere", nil, 404, "no console page"},
		{"bad log cursor", "GET", "/ui/log?before=abc", nil, 400, "line number"},
		{"unknown state", "GET", "/ui/jobs?state=bogus", nil, 400, "Unknown state"},
		{"resolve a missing job", "POST", jobPath("<job-0000@nowhere.example>") + "/resolve",
			url.Values{"csrf": {tok}, "action": {"mark-sent"}, "note": {"n"}}, 404, "no job with that Message-ID"},
		{"resolve without a note", "POST", jobPath(id) + "/resolve", url.Values{"csrf": {tok}, "action": {"mark-sent"}, "note": {"  "}}, 400, "Write a note"},
		{"resolve with an unknown action", "POST", jobPath(id) + "/resolve", url.Values{"csrf": {tok}, "action": {"delete"}, "note": {"n"}}, 400, "Choose one"},
		{"resolve with a long note", "POST", jobPath(id) + "/resolve", url.Values{"csrf": {tok}, "action": {"abandon"}, "note": {strings.Repeat("x", 2001)}}, 400, "at most 2000"},
		{"resolve a sent job", "POST", jobPath(sent.MessageID) + "/resolve", url.Values{"csrf": {tok}, "action": {"abandon"}, "note": {"n"}}, 409, "only review, unknown or failed"},
		{"fault with a bad count", "POST", "/ui/faults", url.Values{"csrf": {tok}, "mode": {"fail-before-forward"}, "count": {"many"}}, 400, "count"},
		{"fault with an unknown mode", "POST", "/ui/faults", url.Values{"csrf": {tok}, "mode": {"explode"}}, 400, "mode"},
		{"fault on an unknown channel", "POST", "/ui/faults", url.Values{"csrf": {tok}, "mode": {"fail-before-forward"}, "channel": {"nope"}}, 400, "unknown channel"},
		{"crash fault not allowed", "POST", "/ui/faults", url.Values{"csrf": {tok}, "mode": {"crash-after-forward"}}, 400, "allow-crash-faults"},
		{"remove a missing fault", "POST", "/ui/faults/f99/remove", url.Values{"csrf": {tok}}, 404, "no fault rule"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := c.do(tc.method, tc.path, tc.form)
			if p.status != tc.want || !strings.Contains(p.body, `data-testid="error-message"`) ||
				!strings.Contains(strings.ToLower(p.body), strings.ToLower(tc.says)) {
				t.Fatalf("got %d, want %d with an error page saying %q:\n%s", p.status, tc.want, tc.says, p.body)
			}
		})
	}
	if got := e.state(id); got != gmailrelay.StateReview {
		t.Errorf("state after bad input: got %s, want review", got)
	}
	if got := e.state(sent.MessageID); got != gmailrelay.StateSent {
		t.Errorf("sent job after a refused resolve: got %s", got)
	}
}

func TestFaultsAddAndRemove(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client()
	tok := c.mustSignIn(adminToken)
	if p := c.get("/ui/faults"); !strings.Contains(p.body, "SANDBOX") {
		t.Error("faults page has no sandbox banner")
	}
	p := c.do(http.MethodPost, "/ui/faults", url.Values{"csrf": {tok}, "mode": {"forward-then-drop-response"},
		"channel": {"billing"}, "count": {"2"}, "ttl": {"10m"}, "drop": {"504"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("add: got %d:\n%s", p.status, p.body)
	}
	rules := e.Faults.List()
	if len(rules) != 1 || rules[0].Mode != faultmodes.ForwardThenDropResponse || rules[0].Channel != "billing" ||
		*rules[0].Count != 2 || rules[0].TTL != "10m" || rules[0].Drop != "504" {
		t.Fatalf("rules: %+v", rules)
	}
	if page := c.get("/ui/faults"); strings.Count(page.body, `data-testid="fault-row"`) != 1 {
		t.Errorf("faults page lists %d rules, want 1", strings.Count(page.body, `data-testid="fault-row"`))
	}
	if p := c.do(http.MethodPost, "/ui/faults/"+rules[0].ID+"/remove", url.Values{"csrf": {tok}}); p.status != http.StatusSeeOther {
		t.Fatalf("remove: got %d", p.status)
	}
	if rules := e.Faults.List(); len(rules) != 0 {
		t.Errorf("rules after remove: %+v", rules)
	}
}

func TestOverviewAndLogTail(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.reviewJob("cus_8:charge:ord_8", "Invoice")
	e.reviewJob("cus_9:charge:ord_9", "Invoice")
	for i := range 3 {
		e.send("cus_r:receipt:"+string(rune('a'+i)), "default", "Receipt", "")
	}
	c := e.client()
	c.mustSignIn(apiToken)
	p := c.get("/ui/")
	for hook, want := range map[string]string{"count-review": "2", "count-sent": "3", "count-queued": "0", "count-unknown": "0"} {
		if !strings.Contains(p.body, `data-testid="`+hook+`">`+want+`<`) {
			t.Errorf("overview: %s is not %s", hook, want)
		}
	}
	if !strings.Contains(p.body, "<svg") || !strings.Contains(p.body, "5 attempts handed to Gmail") {
		t.Errorf("overview chart missing or wrong:\n%s", p.body)
	}
	// Log tail: newest first; the first page holds the newest line.
	st, _ := e.Log.Stats(t.Context())
	lp := c.get("/ui/log")
	if n := strings.Count(lp.body, `data-testid="log-line"`); uint64(n) != st.Lines {
		t.Errorf("log page shows %d lines, want %d", n, st.Lines)
	}
	first := strings.Index(lp.body, `<td class="num">`+itoa(st.Lines)+`</td>`)
	second := strings.Index(lp.body, `<td class="num">`+itoa(st.Lines-1)+`</td>`)
	if first < 0 || second < first {
		t.Errorf("log page is not newest first")
	}
	older := c.get("/ui/log?before=3")
	if n := strings.Count(older.body, `data-testid="log-line"`); n != 2 {
		t.Errorf("log page before 3 shows %d lines, want 2", n)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestMountedByAPI(t *testing.T) {
	e := newEnv(t, envOpts{})
	c := e.client()
	if p := c.get("/ui"); p.status != http.StatusMovedPermanently || p.header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: got %d %q, want 301 to /ui/", p.status, p.header.Get("Location"))
	}
	p := c.get("/ui/login")
	if p.status != http.StatusOK || !strings.Contains(p.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("sign-in page: %d, CSP %q", p.status, p.header.Get("Content-Security-Policy"))
	}
	if p := c.get("/ui/static/console.css"); p.status != http.StatusOK {
		t.Errorf("embedded CSS: %d", p.status)
	}
	// The console's session is not a bearer token: the API stays closed.
	c.mustSignIn(adminToken)
	if p := c.get("/v1/stats"); p.status != http.StatusUnauthorized {
		t.Errorf("GET /v1/stats with only a console session: got %d, want 401", p.status)
	}
}
