package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/gmailfake"
)

var seenRE = regexp.MustCompile(`name="expect_attempts" value="([0-9]+)"`)

// A decision sent again from a page that is out of date (a second tab, the
// Back button, a second reviewer) is refused once the job has made another
// attempt: the first retry ended unknown (Gmail delivered and answered 500),
// and the same form again would resend an ambiguous job without the search
// that must come first. Were it accepted, both retries would go out: three
// deliveries of one Message-ID (emulator ground truth) and two resolved
// lines. The
// second POST is 409, the log and the mailbox are as the first left them.
func TestEmulatorStaleRetryFormIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_3:charge:ord_3", "Your invoice")
	c := e.client()
	c.mustSignIn(adminToken)
	jp := c.get(jobPath(id))
	m := seenRE.FindStringSubmatch(jp.body)
	if m == nil {
		t.Fatalf("the decision form carries no expect_attempts field:\n%s", jp.body)
	}
	form := url.Values{"csrf": {csrf(t, jp)}, "expect_attempts": {m[1]}, "action": {"retry"}, "note": {"resend it"}}
	if _, err := e.Emulator.AddFault(gmailfake.Fault{Method: gmailfake.MethodSend, Action: gmailfake.ActionAcceptThenError, Status: 500}); err != nil {
		t.Fatal(err)
	}
	if p := c.do(http.MethodPost, jobPath(id)+"/resolve", form); p.status != http.StatusSeeOther {
		t.Fatalf("first retry: got %d, want 303:\n%s", p.status, p.body)
	}
	after := e.Job(id)
	if after.State != gmailrelay.StateUnknown || after.Attempts != 2 {
		t.Fatalf("after the first retry: %s with %d attempts, want unknown with 2", after.State, after.Attempts)
	}
	deliveries := e.Emulator.Deliveries(id)
	if deliveries != 2 {
		t.Fatalf("deliveries after the first retry = %d, want 2 (the dropped answer's and the retry's)", deliveries)
	}

	p := c.do(http.MethodPost, jobPath(id)+"/resolve", form)
	if p.status != http.StatusConflict || !strings.Contains(p.body, "attempts") {
		t.Errorf("the same form again: got %d, want 409 naming the attempts:\n%s", p.status, p.body)
	}
	if got := e.Emulator.Deliveries(id); got != deliveries {
		t.Errorf("deliveries after the stale form = %d, want %d (no resend of an ambiguous job)", got, deliveries)
	}
	if got := e.Job(id); got.State != after.State || got.Attempts != after.Attempts {
		t.Errorf("job after the stale form: %s with %d attempts, want it unchanged (%s, %d)", got.State, got.Attempts, after.State, after.Attempts)
	}
	if r := resolvedLines(e.lines(id)); len(r) != 1 {
		t.Errorf("resolved lines = %d, want 1 (the stale decision writes none)", len(r))
	}
}
