package api_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay"
	"github.com/gmailrelay/gmailrelay/relay"
)

// TestLogCursorNeverGoesBack: GET /v1/log's next (and X-Next) is always
// the cursor to continue from, also on the last page: a reader pages to
// the end (next == after once caught up), then sees exactly the line
// appended since, and nothing of a mailbox it filtered out. Before, next
// was 0 on the last page, so a reader feeding it back started over.
func TestLogCursorNeverGoesBack(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		ndjson      bool
	}{
		{"json", "", false},
		{"ndjson", "", true},
		{"mailbox", "&mailbox=support", false},
		{"mailbox ndjson", "&mailbox=support", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{mailboxes: threeMailboxes})
			for _, k := range []string{"support-1", "shop-1", "support-2", "shop-2"} {
				if r := e.must("POST", "/v1/send", apiToken, mailboxSend(k, "", strings.Split(k, "-")[0])); r.status != 200 {
					t.Fatalf("send %s: %d %s", k, r.status, r.raw)
				}
			}
			read := func(after uint64) ([]gmailrelay.Line, uint64) {
				t.Helper()
				return e.logPage(t, after, tc.query, tc.ndjson)
			}
			var seen []gmailrelay.Line
			after := uint64(0)
			for page := 0; ; page++ {
				lines, next := read(after)
				if next < after || page == 100 {
					t.Fatalf("after=%d answered next %d (page %d): the cursor went back", after, next, page)
				}
				seen = append(seen, lines...)
				if next == after {
					break
				}
				after = next
			}
			all, _, err := e.Log.Lines(context.Background(), 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if last := all[len(all)-1].Seq; after != last {
				t.Errorf("caught up at %d, want the last line read, %d", after, last)
			}
			if want := e.mailboxLineCount(all, tc.query); len(seen) != want {
				t.Errorf("paged %d lines, want %d", len(seen), want)
			}
			// A line of another mailbox's job moves the cursor of a
			// filtered reader past it and returns nothing.
			other := e.appendLine(t, "shop-2")
			lines, next := read(after)
			if tc.query != "" && (len(lines) != 0 || next != other) {
				t.Errorf("after a shop line: %d lines, next %d; want none and %d", len(lines), next, other)
			}
			after = next
			seq := e.appendLine(t, "support-1")
			lines, next = read(after)
			if len(lines) != 1 || lines[0].Seq != seq || next != seq {
				t.Errorf("after=%d once line %d was appended: %d lines, next %d; want that line and next %d", after, seq, len(lines), next, seq)
			}
			if lines, again := read(next); len(lines) != 0 || again != next {
				t.Errorf("after=%d, nothing new: %d lines, next %d; want none and %d", next, len(lines), again, next)
			}
		})
	}
}

// logPage reads GET /v1/log after after, two lines a page, as JSON or
// NDJSON (the cursor then in X-Next).
func (e *env) logPage(t *testing.T, after uint64, query string, ndjson bool) ([]gmailrelay.Line, uint64) {
	t.Helper()
	var hdr []string
	if ndjson {
		hdr = []string{"Accept", "application/x-ndjson"}
	}
	r := e.must("GET", "/v1/log?limit=2&after="+strconv.FormatUint(after, 10)+query, apiToken, nil, hdr...)
	if r.status != 200 {
		t.Fatalf("log after %d: %d %s", after, r.status, r.raw)
	}
	var page struct {
		Lines []gmailrelay.Line `json:"lines"`
		Next  uint64            `json:"next"`
	}
	if !ndjson {
		if err := json.Unmarshal(r.raw, &page); err != nil {
			t.Fatalf("log page %s: %v", r.raw, err)
		}
		return page.Lines, page.Next
	}
	for _, row := range strings.Split(strings.TrimSpace(string(r.raw)), "\n") {
		if row == "" {
			continue
		}
		var l gmailrelay.Line
		if err := json.Unmarshal([]byte(row), &l); err != nil {
			t.Fatalf("ndjson row %q: %v", row, err)
		}
		page.Lines = append(page.Lines, l)
	}
	next, err := strconv.ParseUint(r.header.Get("X-Next"), 10, 64)
	if err != nil {
		t.Fatalf("X-Next %q: %v", r.header.Get("X-Next"), err)
	}
	return page.Lines, next
}

// appendLine appends one search line to the job of key and returns its Seq.
func (e *env) appendLine(t *testing.T, key string) uint64 {
	t.Helper()
	_, lines, err := e.Log.Mutate(context.Background(), relayID(key), func(*gmailrelay.Job) (gmailrelay.Change, error) {
		return gmailrelay.Change{Lines: []gmailrelay.Line{{Kind: gmailrelay.KindSearch}}}, nil
	})
	if err != nil || len(lines) != 1 {
		t.Fatalf("append a line to %s: %v %v", key, lines, err)
	}
	return lines[0].Seq
}

func relayID(key string) string { return relay.MessageID(key, domain) }

// mailboxLineCount is how many of lines a ?mailbox=support query keeps
// (all of them without one).
func (e *env) mailboxLineCount(lines []gmailrelay.Line, query string) int {
	if query == "" {
		return len(lines)
	}
	n := 0
	for _, l := range lines {
		if l.MessageID == relayID("support-1") || l.MessageID == relayID("support-2") {
			n++
		}
	}
	return n
}
