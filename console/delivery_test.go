package console_test

import (
	"html"
	"strings"
	"testing"
)

// The job page says how the outcome became known and what delivery
// reports said: an answered send "known by response" and "no_report".
// Emulator result.
func TestJobPageShowsResolutionAndDelivery(t *testing.T) {
	e := newEnv(t, envOpts{})
	sent := e.send("cus_9:receipt:ord_9", "default", "Receipt", "")
	c := e.client()
	c.mustSignIn(adminToken)
	p := c.get(jobPath(sent.MessageID))
	body := html.UnescapeString(p.body)
	if p.status != 200 || !strings.Contains(body, `data-testid="job-resolved-by">response<`) ||
		!strings.Contains(body, `data-testid="job-delivery">no_report<`) {
		t.Errorf("job page %d: no resolution or delivery row:\n%s", p.status, p.body)
	}
}
