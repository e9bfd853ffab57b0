package console_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/relay"
)

const threeMailboxes = `
mailboxes:
  support: {address: support@example.com}
  billing: {address: billing@example.com}
  shop: {address: shop@example.com}
channels:
  default: {on_unknown: retry}
`

var mailboxRowRE = regexp.MustCompile(`(?s)<tr data-testid="mailbox-row">\s*<td data-testid="mailbox-name">([^<]*)</td>\s*<td>([^<]*)</td>`)

// The overview lists every mailbox with its address, and the job list and
// the job page name each job's mailbox (emulator results: each send landed
// in its own account).
func TestMailboxesShowEverywhere(t *testing.T) {
	e := newEnv(t, envOpts{mailboxes: threeMailboxes})
	ids := map[string]string{}
	for _, box := range []string{"support", "billing", "shop"} {
		p, err := relay.Prepare(relay.SendRequest{Key: "k-" + box, Mailbox: box, To: relay.AddressList{"customer@example.com"},
			Subject: "s", Text: "t"}, "", domain, e.Clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Service.Send(context.Background(), p, relay.SendOptions{})
		if err != nil || res.Job.Mailbox != box {
			t.Fatalf("send in %s: %+v %v", box, res.Job, err)
		}
		if got := e.Emulator.Lookup(box+"@example.com", p.MessageID).Deliveries; got != 1 {
			t.Fatalf("emulator result: %s delivered %d times to %s, want 1", p.MessageID, got, box)
		}
		ids[box] = p.MessageID
	}
	c := e.client()
	c.mustSignIn(apiToken)
	ov := c.get("/ui/")
	rows := mailboxRowRE.FindAllStringSubmatch(ov.body, -1)
	got := map[string]string{}
	for _, r := range rows {
		got[r[1]] = r[2]
	}
	if len(rows) != 3 {
		t.Fatalf("overview shows %d mailbox rows, want 3:\n%s", len(rows), ov.body)
	}
	for _, box := range []string{"support", "billing", "shop"} {
		if got[box] != box+"@example.com" {
			t.Errorf("overview row of %s: address %q, want %s@example.com", box, got[box], box)
		}
	}
	list := c.get("/ui/jobs")
	if n := strings.Count(list.body, `data-testid="job-mailbox"`); n != 3 {
		t.Errorf("job list shows %d mailbox cells, want 3", n)
	}
	for box, id := range ids {
		if !strings.Contains(list.body, `<td data-testid="job-mailbox">`+box+`</td>`) {
			t.Errorf("job list does not show mailbox %s", box)
		}
		jp := c.get(jobPath(id))
		if jp.status != 200 || !strings.Contains(jp.body, "/ "+box+"</dd>") {
			t.Errorf("job page of %s (%d) does not name mailbox %s", id, jp.status, box)
		}
	}
}
