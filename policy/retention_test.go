package policy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gmailrelay/gmailrelay/policy"
)

func TestRetention(t *testing.T) {
	const chans = "channels: {default: {on_unknown: retry}}\n"
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"90d", 90 * 24 * time.Hour, ""},
		{"1d", 24 * time.Hour, ""},
		{"36h", 36 * time.Hour, ""},
		{"1h", time.Hour, ""},
		{"59m", 0, "at least 1h"},
		{"0d", 0, "at least 1h"},
		{"-1d", 0, "number of days"},
		{"d", 0, "number of days"},
		{"ninety days", 0, "number of days"},
		{"99999999999999999999d", 0, "too many days"},
		{"36501d", 0, "too many days"},
	} {
		p, err := policy.Parse([]byte("retention: " + tc.in + "\n" + chans))
		if tc.wantErr == "" {
			if err != nil || p.Retention != tc.want {
				t.Errorf("retention %q: got %v, %v; want %v", tc.in, p, err, tc.want)
			}
			continue
		}
		var fe *policy.FieldError
		if !errors.As(err, &fe) || fe.Field != "retention" || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("retention %q: got %v; want a retention field error containing %q", tc.in, err, tc.wantErr)
		}
	}
	if p, err := policy.Parse([]byte(chans)); err != nil || p.Retention != 0 {
		t.Errorf("without retention: got %v, %v; want 0 (keep forever)", p.Retention, err)
	}
	p := policy.Default()
	p.Retention = time.Minute
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "retention") {
		t.Errorf("Validate with retention 1m: %v, want a retention error", err)
	}
}

func TestGraceAtLeastOneSecond(t *testing.T) {
	for _, g := range []string{"1ns", "999ms"} {
		_, err := policy.Parse([]byte("channels:\n  default: {on_unknown: retry, grace: " + g + "}\n"))
		var fe *policy.FieldError
		if !errors.As(err, &fe) || fe.Field != "channels.default.grace" || !strings.Contains(err.Error(), "at least 1s") {
			t.Errorf("grace %s: got %v; want a channels.default.grace error saying at least 1s", g, err)
		}
	}
	if _, err := policy.Parse([]byte("channels:\n  default: {on_unknown: retry, grace: 1s}\n")); err != nil {
		t.Errorf("grace 1s: %v", err)
	}
	p := policy.Default()
	c := p.Channels["default"]
	c.Grace = time.Millisecond
	p.Channels["default"] = c
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "grace") {
		t.Errorf("Validate with grace 1ms: %v, want a grace error", err)
	}
}
