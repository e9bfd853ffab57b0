package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// The delivery-report flags (docs/emulator.md#bounces-and-late-refusals):
// defaults, values, and an empty expression for none.
func TestFakeGmailBounceFlags(t *testing.T) {
	cases := []struct {
		args                []string
		bounces, notBounces string // an address the bounce expression matches, one it does not
		delays              string // an address the delay expression matches ("" none tried)
		delay               time.Duration
		lag                 int
	}{
		{nil, "x@bounce.test", "x@bounce.test.example", "y@delay.test", gmailfake.DefaultBounceDelay, 0},
		{[]string{"--bounce-recipients", `^gone@`, "--delay-recipients", `@slow\.example$`, "--bounce-delay", "2m",
			"--daily-send-limit", "3", "--daily-limit-lag", "2"}, "gone@example.org", "x@bounce.test", "a@slow.example", 2 * time.Minute, 2},
		{[]string{"--bounce-recipients=", "--delay-recipients="}, "", "x@bounce.test", "", gmailfake.DefaultBounceDelay, 0},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			_, opts, code, ok := parseFakeGmail(tc.args, &stderr)
			if !ok {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if tc.bounces != "" && !opts.BounceRecipients.MatchString(tc.bounces) {
				t.Errorf("--bounce-recipients %v does not match %s", opts.BounceRecipients, tc.bounces)
			}
			if opts.BounceRecipients.MatchString(tc.notBounces) {
				t.Errorf("--bounce-recipients %v matches %s", opts.BounceRecipients, tc.notBounces)
			}
			if tc.delays != "" && !opts.DelayRecipients.MatchString(tc.delays) {
				t.Errorf("--delay-recipients %v does not match %s", opts.DelayRecipients, tc.delays)
			}
			if tc.delays == "" && opts.DelayRecipients.MatchString("y@delay.test") {
				t.Errorf("--delay-recipients '' matches y@delay.test")
			}
			if opts.BounceDelay != tc.delay || opts.DailyLimitLag != tc.lag {
				t.Errorf("delay %v lag %d, want %v %d", opts.BounceDelay, opts.DailyLimitLag, tc.delay, tc.lag)
			}
		})
	}
}

func TestFakeGmailBounceFlagsRefused(t *testing.T) {
	cases := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"--bounce-recipients", "@bounce(.test"}, "--bounce-recipients"},
		{[]string{"--delay-recipients", "[z-a]"}, "--delay-recipients"},
		{[]string{"--bounce-delay", "0s"}, "--bounce-delay"},
		{[]string{"--bounce-delay", "soon"}, "bounce-delay"},
		{[]string{"--daily-send-limit", "3", "--daily-limit-lag", "-1"}, "--daily-limit-lag"},
		{[]string{"--daily-limit-lag", "2"}, "--daily-limit-lag"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			wantExit2(t, runFakeGmail, tc.args, tc.want)
		})
	}
}

// Emulator results through the command: the flags reach the emulator. A
// bounce delay of 1ns makes the reports due by the next call, so nothing
// waits.
func TestFakeGmailBouncesThroughFlags(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- runFakeGmail(ctx, []string{"--addr", "127.0.0.1:0", "--bounce-recipients", `@gone\.example$`,
			"--bounce-delay", "1ns", "--daily-send-limit", "1", "--daily-limit-lag", "1"}, outW, &stderr)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	if !lines.Scan() {
		t.Fatalf("no output; stderr %q", stderr.String())
	}
	base := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(lines.Text())
	go io.Copy(io.Discard, outR)

	getJSON := func(path string) map[string]any {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return out
	}
	for i, to := range []string{"ok@example.org, a@gone.example", "ok@example.org"} {
		raw := fmt.Sprintf("From: me@example.com\r\nTo: %s\r\nSubject: s\r\nMessage-ID: <m%d@example.com>\r\n\r\nhi\r\n", to, i)
		body := `{"raw":"` + base64.RawURLEncoding.EncodeToString([]byte(raw)) + `"}`
		resp, err := http.Post(base+"/gmail/v1/users/me/messages/send", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("send %d: %d, want 200", i, resp.StatusCode)
		}
	}
	if got := getJSON("/_emulator/messages?rfc822msgid=m0@example.com"); fmt.Sprint(got["bounced"]) != "[a@gone.example]" || got["deliveries"] != 1.0 {
		t.Errorf("first send's truth: %v, want deliveries 1, bounced [a@gone.example]", got)
	}
	if got := getJSON("/_emulator/messages?rfc822msgid=m1@example.com"); got["undelivered"] != true || got["deliveries"] != 0.0 {
		t.Errorf("second send's truth: %v, want undelivered past a daily limit of 1 with a lag of 1", got)
	}
	for _, from := range []string{"mailer-daemon@googlemail.com", "nobody@gmail.com"} {
		got := getJSON("/gmail/v1/users/me/messages?labelIds=INBOX&q=" + url.QueryEscape("from:"+from))
		if list, _ := got["messages"].([]any); len(list) != 1 {
			t.Errorf("INBOX from %s: %v, want one message", from, got)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit code after cancel: got %d, want 0; stderr %q", code, stderr.String())
	}
}
