package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/console"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// chromium finds the browser: $GMAILRELAY_CHROMIUM, else Debian's
// chromium on PATH (or Google's names for it).
func chromium() string {
	if p := os.Getenv("GMAILRELAY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser starts a headless Chromium for the test. Without one, the test
// skips locally and fails in CI (CI=true), where .ci/run installs it.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		const how = "install Debian's chromium (apt-get update && apt-get install -y chromium) or set GMAILRELAY_CHROMIUM"
		if os.Getenv("CI") == "true" {
			t.Fatal("browser tests need Chromium in CI: " + how)
		}
		t.Skip("browser tests skipped: Chromium not found; " + how)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc(); cancel() })
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start Chromium %s: %v", path, err)
	}
	return bctx
}

// shotDir is where screenshots go: $GMAILRELAY_SCREENSHOTS, else a
// temporary directory of the test.
func shotDir(t *testing.T) string {
	if d := os.Getenv("GMAILRELAY_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func tid(id string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + id + `"]`) }

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

func signIn(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx, "sign in",
		chromedp.Navigate(base+"/ui/login"),
		chromedp.WaitVisible(tid("login-token")),
		chromedp.SendKeys(tid("login-token"), token),
		chromedp.Click(tid("login-submit")),
		chromedp.WaitVisible(tid("count-review")))
}

// TestBrowserReviewFlow: the admin signs in, opens the review queue,
// resolves a job with "mark sent" and a note, and the acceptance log shows
// the resolved line by actor ui with the note. Then the API token's session
// sees no decision buttons, and its forged POST (valid session, valid CSRF
// token) is refused and changes nothing.
func TestBrowserReviewFlow(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_1042:invoice.paid:ord_88123", "Your invoice INV-88123")
	other := e.reviewJobVia("cus_2077:invoice.paid:ord_90410", "Your invoice INV-90410",
		&gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionError, Status: 500})
	e.reviewJobVia("cus_3310:refund.issued:ord_77002", "Your refund for order 77002",
		&gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionDuplicate})
	for i := range 4 {
		e.send("cus_51"+string(rune('0'+i))+":order.shipped:ord_6"+string(rune('0'+i)), "default", "Your order has shipped", "")
	}
	dir := shotDir(t)
	ctx := newBrowser(t)

	signIn(t, ctx, e.url, adminToken)
	if got := eval[string](t, ctx, `document.querySelector('[data-testid="count-review"]').textContent`); got != "3" {
		t.Errorf("count-review: got %q, want 3", got)
	}
	screenshot(t, ctx, dir, "console-overview.png")

	do(t, ctx, "open the review queue", chromedp.Navigate(e.url+"/ui/review"), chromedp.WaitVisible(tid("review-row")))
	if n := eval[int](t, ctx, `document.querySelectorAll('[data-testid="review-row"]').length`); n != 3 {
		t.Errorf("review rows: got %d, want 3", n)
	}
	screenshot(t, ctx, dir, "console-review.png")

	note := "Customer confirmed one copy of INV-88123 arrived."
	row := chromedp.CSS(`[data-testid="review-row"][data-message-id="` + id + `"] a`)
	do(t, ctx, "open the job", chromedp.Click(row), chromedp.WaitVisible(tid("resolve-note")))
	if n := eval[int](t, ctx, `document.querySelectorAll('[data-testid="job-line"]').length`); n != len(e.lines(id)) {
		t.Errorf("job lines shown: got %d, want %d", n, len(e.lines(id)))
	}
	screenshot(t, ctx, dir, "console-job.png")
	do(t, ctx, "mark sent with a note",
		chromedp.SendKeys(tid("resolve-note"), note),
		chromedp.Click(tid("resolve-mark-sent")),
		chromedp.WaitVisible(tid("resolve-done")))

	// The acceptance log itself, not the page.
	r := resolvedLines(e.lines(id))
	if len(r) != 1 || r[0].Actor != console.Actor || r[0].Note != note || r[0].Reason != "mark-sent" {
		t.Fatalf("resolved lines in the log: got %+v, want one mark-sent by %q with the note", r, console.Actor)
	}
	if got := e.state(id); got != gmailrelay.StateSent {
		t.Errorf("state in the log: got %s, want sent", got)
	}
	do(t, ctx, "sign out", chromedp.Click(tid("sign-out")), chromedp.WaitVisible(tid("login-token")))

	// The API token, in a browser context of its own (its own cookies).
	viewer, cancel := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
	defer cancel()
	signIn(t, viewer, e.url, apiToken)
	do(t, viewer, "open a job as viewer", chromedp.Navigate(e.url+jobPath(other)), chromedp.WaitVisible(tid("read-only")))
	if n := eval[int](t, viewer, `document.querySelectorAll('[data-testid^="resolve-"]').length`); n != 0 {
		t.Errorf("viewer sees %d resolve controls, want 0", n)
	}
	status := eval[int](t, viewer, `(async () => {
		const csrf = document.querySelector('input[name=csrf]').value;
		const r = await fetch(location.pathname + '/resolve', {method: 'POST',
			body: new URLSearchParams({csrf: csrf, action: 'mark-sent', note: 'forged'})});
		return r.status; })()`, chromedp.EvalAwaitPromise)
	if status != 403 {
		t.Errorf("forged POST with the viewer's session and CSRF token: got %d, want 403", status)
	}
	if got := e.state(other); got != gmailrelay.StateReview {
		t.Errorf("state after the forged POST: got %s, want review", got)
	}
	if r := resolvedLines(e.lines(other)); len(r) != 0 {
		t.Errorf("resolved lines after the forged POST: %+v", r)
	}
}

// TestBrowserEscapesPayloads: a key and a subject carrying script and
// attribute-breaking payloads render as text: no script runs (the payload
// would set window.__xss) and no element is injected.
func TestBrowserEscapesPayloads(t *testing.T) {
	e := newEnv(t, envOpts{})
	payload := scriptPayload + imgPayload
	id := e.reviewJob("cus_x:"+payload, "Receipt "+payload)
	ctx := newBrowser(t)
	signIn(t, ctx, e.url, adminToken)
	for _, path := range []string{"/ui/review", jobPath(id), "/ui/jobs?state=review"} {
		do(t, ctx, "open "+path, chromedp.Navigate(e.url+path), chromedp.WaitReady(chromedp.CSS("main")))
		if ran := eval[bool](t, ctx, `typeof window.__xss !== "undefined"`); ran {
			t.Errorf("%s: the payload's script ran", path)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll('img, script:not([src])').length`); n != 0 {
			t.Errorf("%s: %d injected elements", path, n)
		}
		if n := eval[int](t, ctx, `document.querySelectorAll('script').length`); n != 1 {
			t.Errorf("%s: %d script elements, want only console.js", path, n)
		}
		if text := eval[string](t, ctx, `document.querySelector('main').innerText`); !strings.Contains(text, payload) {
			t.Errorf("%s: the payload is not shown as text", path)
		}
		if path == jobPath(id) {
			if got := eval[string](t, ctx, `document.querySelector('[data-testid="job-key"]').textContent`); got != "cus_x:"+payload {
				t.Errorf("job key: got %q, want it as text", got)
			}
		}
	}
}
