package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// wantExit2 runs a subcommand with args and checks that it exits 2 with a
// message on stderr that holds want (the flag or the problem it names).
// The context is already cancelled, so a command that wrongly accepts its
// flags and starts serving stops at once instead of hanging the test.
func wantExit2(t *testing.T, run func(ctx context.Context, args []string, stdout, stderr io.Writer) int, args []string, want string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	if got := run(ctx, args, &stdout, &stderr); got != 2 {
		t.Errorf("exit code: got %d, want 2", got)
	}
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not name %q", stderr.String(), want)
	}
}
