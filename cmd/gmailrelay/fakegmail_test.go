package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

func TestFakeGmailBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"--index-lag", "soon"}, "index-lag"},
		{[]string{"--index-lag", "-1s"}, "--index-lag"},
		{[]string{"--latency", "-5ms"}, "--latency"},
		{[]string{"--quota-per-minute", "0"}, "--quota-per-minute"},
		{[]string{"--quota-per-minute", "lots"}, "quota-per-minute"},
		{[]string{"--account", "not an address"}, "--account"},
		{[]string{"--index-lag", "p50=2s"}, "--index-lag"},
		{[]string{"--index-lag", "p50=2m,p99=1s"}, "--index-lag"},
		{[]string{"--index-order", "lifo"}, "--index-order"},
		{[]string{"--history-lag", "soon"}, "--history-lag"},
		{[]string{"--history-lag", "p50=2m,p99=1s"}, "--history-lag"},
		{[]string{"--history-retention", "0s"}, "--history-retention"},
		{[]string{"--history-retention", "week"}, "history-retention"},
		{[]string{"--rewrite-message-id=sometimes"}, "--rewrite-message-id"},
		{[]string{"--rewrite-message-id=1.5"}, "--rewrite-message-id"},
		{[]string{"--rate-limit-status", "500"}, "--rate-limit-status"},
		{[]string{"--daily-send-limit", "-1"}, "--daily-send-limit"},
		{[]string{"--cost", "fetch=5"}, "--cost"},
		{[]string{"--cost", "get=-1"}, "--cost"},
		{[]string{"--token", "=a@b.c"}, "--token"},
		{[]string{"--account", "a@example.com", "--token", "t=b@example.com"}, "--token"},
		{[]string{"--seed", "x"}, "seed"},
		{[]string{"--send-as", "Alias <a@example.com>"}, "--send-as"},
		{[]string{"--send-as", "a@example.com=b@example.com"}, "--send-as"},
		{[]string{"extra"}, "unexpected argument"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			wantExit2(t, runFakeGmail, tc.args, tc.want)
		})
	}
}

// TestFakeGmailOnOffFlags: --sent-dedupe, --strict-queries and
// --rate-limit-header take off or on (docs/emulator.md#other-behaviours),
// Go's true/false/1/0 too, and alone mean on; anything else exits 2 naming the flag
// and the values.
func TestFakeGmailOnOffFlags(t *testing.T) {
	set := func(o gmailfake.Options) [3]bool { return [3]bool{o.SentDedupe, o.StrictQueries, o.RateLimitHeader} }
	cases := []struct {
		args []string
		want [3]bool
	}{
		{nil, [3]bool{}},
		{[]string{"--sent-dedupe", "--strict-queries", "--rate-limit-header"}, [3]bool{true, true, true}},
		{[]string{"--sent-dedupe=on", "--strict-queries=ON", "--rate-limit-header=on"}, [3]bool{true, true, true}},
		{[]string{"--sent-dedupe=off", "--strict-queries=off", "--rate-limit-header=Off"}, [3]bool{}},
		{[]string{"--sent-dedupe=true", "--strict-queries=1", "--rate-limit-header=false"}, [3]bool{true, true, false}},
		{[]string{"--sent-dedupe", "on", "--strict-queries", "off", "--rate-limit-header", "--seed", "3"}, [3]bool{true, false, true}},
		{[]string{"-sent-dedupe", "true", "--rate-limit-header", "0"}, [3]bool{true, false, false}},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			_, opts, code, ok := parseFakeGmail(tc.args, &stderr)
			if !ok {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if got := set(opts); got != tc.want {
				t.Errorf("sent-dedupe, strict-queries, rate-limit-header: got %v, want %v", got, tc.want)
			}
		})
	}
	for _, name := range []string{"sent-dedupe", "strict-queries", "rate-limit-header"} {
		t.Run(name+"=maybe", func(t *testing.T) {
			wantExit2(t, runFakeGmail, []string{"--" + name + "=maybe"}, "-"+name)
			wantExit2(t, runFakeGmail, []string{"--" + name + "=maybe"}, "on or off")
		})
	}
}

// --send-as ADDRESS is an alias of the primary account, ADDRESS=ACCOUNT
// one of that account; repeatable.
func TestFakeGmailSendAsFlag(t *testing.T) {
	var stderr bytes.Buffer
	_, opts, code, ok := parseFakeGmail([]string{"--account", "a@example.com", "--account", "b@example.com",
		"--send-as", "sales@example.com", "--send-as", "help@example.com=b@example.com"}, &stderr)
	if !ok {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := []gmailfake.Alias{{Address: "sales@example.com"}, {Account: "b@example.com", Address: "help@example.com"}}
	if fmt.Sprint(opts.SendAs) != fmt.Sprint(want) {
		t.Errorf("SendAs = %+v, want %+v", opts.SendAs, want)
	}
}

func TestFakeGmailServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- runFakeGmail(ctx, []string{"--addr", "127.0.0.1:0", "--quota-per-minute", "600", "--seed", "42",
			"--rewrite-message-id", "--account", "a@example.com", "--account", "b@example.com", "--index-lag", "p50=2s,p99=2m,max=20m"}, outW, &stderr)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	if !lines.Scan() {
		t.Fatalf("no output; stderr %q", stderr.String())
	}
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(lines.Text())
	if url == "" {
		t.Fatalf("first line %q carries no URL", lines.Text())
	}
	if !strings.Contains(lines.Text(), "seed 42") || !strings.Contains(lines.Text(), "a@example.com, b@example.com") {
		t.Errorf("first line %q does not print the seed and the accounts", lines.Text())
	}
	if !lines.Scan() || !strings.Contains(lines.Text(), "not a Gmail guarantee") {
		t.Errorf("second line %q does not say it is an emulator", lines.Text())
	}
	go io.Copy(io.Discard, outR)

	resp, err := http.Get(url + "/_emulator/stats")
	if err != nil {
		t.Fatal(err)
	}
	var stats map[string]any
	err = json.NewDecoder(resp.Body).Decode(&stats)
	resp.Body.Close()
	if err != nil || stats["quotaPerMinute"] != 600.0 || stats["seed"] != 42.0 {
		t.Errorf("stats: got %v (%v), want quotaPerMinute 600 from the flag", stats, err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit code after cancel: got %d, want 0; stderr %q", code, stderr.String())
	}
}

func TestBareRewriteFlag(t *testing.T) {
	cases := []struct{ in, want []string }{
		{[]string{"--rewrite-message-id"}, []string{"--rewrite-message-id=always"}},
		{[]string{"--rewrite-message-id", "--seed", "1"}, []string{"--rewrite-message-id=always", "--seed", "1"}},
		{[]string{"--rewrite-message-id", "never"}, []string{"--rewrite-message-id=never"}},
		{[]string{"-rewrite-message-id", "0.05"}, []string{"-rewrite-message-id=0.05"}},
		{[]string{"--rewrite-message-id=malformed"}, []string{"--rewrite-message-id=malformed"}},
		{[]string{"--", "--rewrite-message-id"}, []string{"--", "--rewrite-message-id"}},
	}
	for _, tc := range cases {
		if got := bareRewriteFlag(tc.in); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("bareRewriteFlag(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
