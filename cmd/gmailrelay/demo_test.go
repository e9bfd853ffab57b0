package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestDemoAllRowsPassAgainstEmulator(t *testing.T) {
	var out, errb bytes.Buffer
	code := runDemo(context.Background(), nil, &out, &errb)
	if code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	s := out.String()
	if !strings.Contains(s, "EMULATOR RESULTS") {
		t.Errorf("demo output does not say these are emulator results:\n%s", s)
	}
	for _, mode := range []string{"fail-before-forward", "forward-then-drop-response", "forward-and-respond", "review channel", "crash", "trashes", "index lag", "rewrites"} {
		line := ""
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, mode) || strings.Contains(l, mode) {
				line = l
				break
			}
		}
		if !strings.HasSuffix(strings.TrimSpace(line), "PASS") {
			t.Errorf("row %q: %q, want PASS", mode, line)
		}
	}
}

func TestDemoBadFlagExits2(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runDemo(context.Background(), []string{"--nope"}, &out, &errb); code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
}
