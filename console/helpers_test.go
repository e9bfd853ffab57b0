package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/api"
	"github.com/gmailrelay/gmailrelay/console"
	"github.com/gmailrelay/gmailrelay/faultmodes"
	"github.com/gmailrelay/gmailrelay/gmailfake"
	"github.com/gmailrelay/gmailrelay/internal/testenv"
	"github.com/gmailrelay/gmailrelay/policy"
	"github.com/gmailrelay/gmailrelay/relay"
	"github.com/gmailrelay/gmailrelay/sweeper"
)

const (
	apiToken   = "api-secret-token"
	adminToken = "admin-secret-token"
	domain     = "inbound.example.com"
)

// env is the shared testenv harness (a relay over the Gmail emulator and a
// log), its API with the console mounted at /ui/ the way serve mounts it, on a real listener (for Chromium too).
type env struct {
	*testenv.Env
	t   *testing.T
	sw  *sweeper.Sweeper
	url string
}

type envOpts struct {
	noTokens bool
	// mailboxes, when set, is the policy (with a mailboxes: section); the
	// emulator serves each mailbox's address as an account.
	mailboxes string
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	pol := testenv.DefaultPolicy()
	var emu gmailfake.Options
	if o.mailboxes != "" {
		var err error
		if pol, err = policy.Parse([]byte(o.mailboxes)); err != nil {
			t.Fatal(err)
		}
		for _, m := range pol.MailboxList() {
			emu.Accounts = append(emu.Accounts, m.Address)
		}
	}
	pol.MsgIDDomain = domain
	te := testenv.New(t, testenv.Options{Policy: pol, Emulator: emu})
	e := &env{Env: te, t: t}
	e.sw = sweeper.New(e.SweeperConfig())
	api1, admin1 := apiToken, adminToken
	if o.noTokens {
		api1, admin1 = "", ""
	}
	ui := console.New(console.Config{Relay: console.Adapt(console.Backend{Log: e.Log, Policy: e.Policy, Faults: e.Faults,
		SendPath: e.Service, Now: e.Clock.Now, Mode: "sandbox"}),
		APIToken: api1, AdminToken: admin1, Now: e.Clock.Now, Logger: zerolog.Nop()})
	srv := httptest.NewServer(api.New(api.Config{Relay: e.Service, Log: e.Log, Policy: e.Policy, Faults: e.Faults, Now: e.Clock.Now, Sweeper: e.sw, APIToken: api1, AdminToken: admin1,
		MsgIDDomain: domain, Mode: "sandbox", Console: ui, Logger: zerolog.Nop()}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// send sends one message on channel; fault, when set, decides the attempt.
func (e *env) send(key, channel, subject string, fault faultmodes.Mode) gmailrelay.Job {
	e.t.Helper()
	p, err := relay.Prepare(relay.SendRequest{Key: key, Channel: channel, To: relay.AddressList{"customer@example.com"},
		Subject: subject, Text: "Your receipt."}, "", domain, e.Clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	if fault != "" {
		ctx = faultmodes.WithForced(ctx, faultmodes.Decision{Mode: fault, RuleID: faultmodes.HeaderRuleID})
	}
	res, err := e.Service.Send(ctx, p, relay.SendOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Job
}

// reviewJob puts a job in review the way production does: a billing send
// whose answer is dropped (so unknown), then the sweeper finds it once in
// the mailbox and, billing being review-only, hands it to a human.
func (e *env) reviewJob(key, subject string) string {
	e.t.Helper()
	return e.reviewJobVia(key, subject, nil)
}

// reviewJobVia is reviewJob with an emulator fault on the send instead of
// the relay's dropped answer: a 500 (unknown, nothing stored: the search
// misses) or a duplicate (sent twice: the verify pass finds two copies).
func (e *env) reviewJobVia(key, subject string, f *gmailfake.Fault) string {
	e.t.Helper()
	var j gmailrelay.Job
	if f == nil {
		j = e.send(key, "billing", subject, faultmodes.ForwardThenDropResponse)
	} else {
		if _, err := e.Emulator.AddFault(*f); err != nil {
			e.t.Fatal(err)
		}
		j = e.send(key, "billing", subject, "")
	}
	e.Clock.Advance(2 * time.Minute)
	if _, err := e.sw.RunOnce(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	got, err := e.Log.Get(context.Background(), j.MessageID)
	if err != nil {
		e.t.Fatal(err)
	}
	if got.State != gmailrelay.StateReview {
		e.t.Fatalf("state after the sweep: got %s, want review", got.State)
	}
	return j.MessageID
}

func (e *env) lines(id string) []gmailrelay.Line { return e.Lines(id) }

func (e *env) state(id string) gmailrelay.State { return e.Job(id).State }

func resolvedLines(lines []gmailrelay.Line) []gmailrelay.Line {
	var out []gmailrelay.Line
	for _, l := range lines {
		if l.Kind == gmailrelay.KindResolved {
			out = append(out, l)
		}
	}
	return out
}

func jobPath(id string) string { return "/ui/jobs/" + url.PathEscape(id) }

// client is a cookie-keeping HTTP client that does not follow redirects,
// so tests see every answer.
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func (e *env) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: e.t, base: e.url, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (c *client) do(method, path string, form url.Values, headers ...string) page {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", c.base) // as a browser does for a form POST
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return page{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

func (c *client) get(path string) page { return c.do(http.MethodGet, path, nil) }

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the first form on p.
func csrf(t *testing.T, p page) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no csrf field on the page (status %d):\n%s", p.status, p.body)
	}
	return m[1]
}

// signIn signs in with token through the form and returns the answer.
func (c *client) signIn(token string) page {
	c.t.Helper()
	login := c.get("/ui/login")
	return c.do(http.MethodPost, "/ui/login", url.Values{"csrf": {csrf(c.t, login)}, "token": {token}})
}

// mustSignIn signs in and returns the session's CSRF token.
func (c *client) mustSignIn(token string) string {
	c.t.Helper()
	if p := c.signIn(token); p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/" {
		c.t.Fatalf("sign-in: got %d %q, want 303 to /ui/", p.status, p.header.Get("Location"))
	}
	return csrf(c.t, c.get("/ui/"))
}

func (c *client) cookie(name string) *http.Cookie {
	u, _ := url.Parse(c.base + "/ui/")
	for _, ck := range c.http.Jar.Cookies(u) {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}
