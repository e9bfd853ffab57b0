package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserDoubleClickSendsOneDecision: a double click on Retry sends
// one decision: the browser posts the form once, the page says it is done
// (before, the second click posted it again and the page was the 409 the
// server answers a stale decision with) and the log holds one resolved
// line. The console is reached through a proxy that counts the decisions
// posted and holds each for a second, so that both clicks, 150 ms apart as
// a person's are, land on the job page before its answer arrives.
func TestBrowserDoubleClickSendsOneDecision(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_7:charge:ord_7", "Your invoice")
	backend, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(backend)
	var posts atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/resolve") {
			posts.Add(1)
			time.Sleep(time.Second)
			// As a server does, carry on with a decision whose browser
			// went on to another request.
			r = r.WithContext(context.WithoutCancel(r.Context()))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	ctx := newBrowser(t)
	signIn(t, ctx, front.URL, adminToken)
	do(t, ctx, "open the job", chromedp.Navigate(front.URL+jobPath(id)), chromedp.WaitVisible(tid("resolve-note")),
		chromedp.SendKeys(tid("resolve-note"), "The customer asked for it again."))
	at := eval[[]float64](t, ctx, `(() => {
		const b = document.querySelector('[data-testid="resolve-retry"]');
		b.scrollIntoView({block: "center"});
		const r = b.getBoundingClientRect();
		return [r.x + r.width / 2, r.y + r.height / 2]; })()`)
	do(t, ctx, "double click Retry",
		chromedp.MouseClickXY(at[0], at[1]),
		chromedp.Sleep(150*time.Millisecond),
		chromedp.MouseClickXY(at[0], at[1], chromedp.ClickCount(2)))
	wait, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = chromedp.Do(wait, chromedp.WaitVisible(tid("resolve-done")))
	cancel()
	if err != nil {
		t.Errorf("after the double click the page says %q, want the decision done (%v)",
			eval[string](t, ctx, `document.querySelector("main").innerText`), err)
	}

	if got := posts.Load(); got != 1 {
		t.Errorf("decisions posted: got %d, want 1", got)
	}
	if r := resolvedLines(e.lines(id)); len(r) != 1 || r[0].Reason != "retry" {
		t.Errorf("resolved lines in the log: got %+v, want one retry", r)
	}
}
