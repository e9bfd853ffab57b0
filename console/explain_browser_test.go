package console_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserReviewQueueShowsMessage: each row of the review queue names
// the message by its subject and recipient, not only by its Message-ID.
func TestBrowserReviewQueueShowsMessage(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_1042:invoice.paid:ord_88123", "Your invoice INV-88123")
	ctx := newBrowser(t)
	signIn(t, ctx, e.url, adminToken)
	do(t, ctx, "open the review queue", chromedp.Navigate(e.url+"/ui/review"), chromedp.WaitVisible(tid("review-row")))
	row := `document.querySelector('[data-testid="review-row"][data-message-id="` + id + `"]')`
	if got := eval[string](t, ctx, row+`.querySelector('[data-testid="review-subject"]').innerText`); got != "Your invoice INV-88123" {
		t.Errorf("subject in the queue: got %q", got)
	}
	if got := eval[string](t, ctx, row+`.querySelector('[data-testid="review-to"]').innerText`); !strings.Contains(got, "customer@example.com") {
		t.Errorf("recipient in the queue: got %q, want customer@example.com", got)
	}
}

// TestBrowserDecisionHint: while the decision buttons are disabled for
// want of a note, the reason is shown beside them; it goes once a note is
// typed and comes back when the note is erased.
func TestBrowserDecisionHint(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_7:invoice.paid:ord_7", "Your invoice INV-7")
	ctx := newBrowser(t)
	signIn(t, ctx, e.url, adminToken)
	do(t, ctx, "open the job", chromedp.Navigate(e.url+jobPath(id)), chromedp.WaitVisible(tid("resolve-note")))
	type view struct {
		Disabled bool   `json:"disabled"`
		Shown    bool   `json:"shown"`
		Text     string `json:"text"`
	}
	look := func() view {
		return eval[view](t, ctx, `(() => {
			const h = document.querySelector('[data-testid="resolve-hint"]');
			const b = document.querySelector('[data-testid="resolve-mark-sent"]');
			const r = h.getBoundingClientRect(), br = b.getBoundingClientRect();
			return {disabled: b.disabled, shown: !h.hidden && r.width > 0 && r.height > 0 && Math.abs(r.top - br.top) < br.height,
				text: h.innerText}; })()`)
	}
	if v := look(); !v.Disabled || !v.Shown || !strings.Contains(v.Text, "Type a note") {
		t.Errorf("before a note: %+v, want disabled buttons and the hint beside them", v)
	}
	do(t, ctx, "type a note", chromedp.SendKeys(tid("resolve-note"), "checked"))
	if v := look(); v.Disabled || v.Shown {
		t.Errorf("with a note: %+v, want enabled buttons and no hint", v)
	}
	eval[bool](t, ctx, `(() => { const n = document.querySelector('[data-testid="resolve-note"]');
		n.value = ""; return n.dispatchEvent(new Event("input")); })()`)
	if v := look(); !v.Disabled || !v.Shown {
		t.Errorf("note erased: %+v, want the hint back", v)
	}
}

// TestBrowserChannelTable: every row of "By channel" has one cell per
// header, and each number sits under its own header: the text of the
// review count overlaps the text of the "review" header horizontally. The
// empty table's row spans every column too.
func TestBrowserChannelTable(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := newBrowser(t)
	signIn(t, ctx, e.url, adminToken)
	spans := `[...document.querySelectorAll('[data-testid="channel-table"] tr')].map(r =>
		[...r.cells].reduce((n, c) => n + c.colSpan, 0))`
	if got := eval[[]int](t, ctx, spans); len(got) != 2 || got[0] != 8 || got[1] != 8 {
		t.Errorf("empty table: columns per row %v, want [8 8]", got)
	}

	e.reviewJob("cus_1:invoice.paid:ord_1", "Your invoice INV-1")
	for i := range 3 {
		e.send("cus_5"+string(rune('0'+i))+":order.shipped:ord_6", "default", "Shipped", "")
	}
	do(t, ctx, "reload", chromedp.Navigate(e.url+"/ui/"), chromedp.WaitVisible(tid("channel-table")))
	got := eval[[]int](t, ctx, spans)
	if len(got) != 3 {
		t.Fatalf("rows: %v, want a header and two channels", got)
	}
	for i, n := range got {
		if n != got[0] {
			t.Errorf("row %d has %d columns, the header %d", i, n, got[0])
		}
	}
	// textBox is the horizontal extent of an element's text as drawn.
	under := eval[map[string]bool](t, ctx, `(() => {
		const textBox = el => { const r = document.createRange(); r.selectNodeContents(el); return r.getBoundingClientRect(); };
		const table = document.querySelector('[data-testid="channel-table"]');
		const heads = [...table.tHead.rows[0].cells].map(c => c.innerText.trim());
		const out = {};
		for (const row of table.tBodies[0].rows) {
			const name = row.cells[0].innerText.trim();
			for (const [state, want] of [["review", name === "billing" ? "1" : "0"], ["sent", name === "default" ? "3" : "0"]]) {
				const col = heads.indexOf(state), cell = row.cells[col], h = textBox(table.tHead.rows[0].cells[col]), c = textBox(cell);
				out[name + "/" + state] = cell.innerText.trim() === want && c.left < h.right && c.right > h.left;
			}
		}
		return out; })()`)
	for _, k := range []string{"billing/review", "billing/sent", "default/review", "default/sent"} {
		if !under[k] {
			t.Errorf("%s: the count is not drawn under its header (%v)", k, under)
		}
	}
}

// TestBrowserLegend: the overview, the review queue and a job's page each
// explain the jargon they show, and the overview's legend names effects,
// handle trusted and units.
func TestBrowserLegend(t *testing.T) {
	e := newEnv(t, envOpts{})
	id := e.reviewJob("cus_9:invoice.paid:ord_9", "Your invoice INV-9")
	ctx := newBrowser(t)
	signIn(t, ctx, e.url, adminToken)
	for path, want := range map[string][]string{
		"/ui/":       {"effects", "handle trusted", "units", "unknown", "review"},
		"/ui/review": {"effects", "attempts", "search"},
		jobPath(id):  {"effects", "attempts", "search"},
	} {
		do(t, ctx, "open "+path, chromedp.Navigate(e.url+path), chromedp.WaitVisible(tid("legend")))
		terms := eval[[]string](t, ctx, `[...document.querySelectorAll('[data-testid="legend-term"]')].filter(e => e.offsetParent).map(e => e.innerText)`)
		for _, w := range want {
			found := false
			for _, term := range terms {
				found = found || term == w
			}
			if !found {
				t.Errorf("%s: legend %v lacks %q", path, terms, w)
			}
		}
	}
}
