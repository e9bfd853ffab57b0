package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/gmailfake"
)

// The delivery-report flags (docs/emulator.md#bounces-and-late-refusals):
// defaults, values, '' for none.
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
