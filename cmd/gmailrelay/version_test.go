package main

import (
	"bytes"
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestReadBuildInfo(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	tests := []struct {
		name         string
		linkV, linkC string
		bi           *debug.BuildInfo
		ok           bool
		wantV, wantC string
		wantGo       string
	}{
		{"nothing known", "", "", nil, false, "devel", "unknown", runtime.Version()},
		{"go build in a checkout", "", "", vcs("0123abcd", "false"), true, "devel", "0123abcd", "go1.99.1"},
		{"dirty checkout", "", "", vcs("0123abcd", "true"), true, "devel", "0123abcd+modified", "go1.99.1"},
		{"-ldflags -X wins", "v1.2.3", "feedbeef", vcs("0123abcd", "true"), true, "v1.2.3", "feedbeef", "go1.99.1"},
		{"go install module@version", "", "", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v0.4.0"}}, true, "v0.4.0", "unknown", "go1.99.1"},
		{"-buildvcs=false", "", "", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}}, true, "devel", "unknown", "go1.99.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readBuildInfo(tt.linkV, tt.linkC, tt.bi, tt.ok)
			if got.Version != tt.wantV || got.Commit != tt.wantC || got.Go != tt.wantGo {
				t.Errorf("got %+v, want version %q commit %q go %q", got, tt.wantV, tt.wantC, tt.wantGo)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "gmailrelay ") || !strings.HasPrefix(lines[1], "commit ") ||
			!strings.HasPrefix(lines[2], "go "+runtime.Version()) {
			t.Errorf("%v: got %q, want gmailrelay VERSION / commit C / go VERSION lines", args, stdout.String())
		}
	}
	var usage bytes.Buffer
	run(context.Background(), []string{"help"}, &usage, &usage)
	if !strings.Contains(usage.String(), "  version ") {
		t.Errorf("help does not list version:\n%s", usage.String())
	}
	wantExit2(t, runVersion, []string{"extra"}, `unexpected argument "extra"`)
}
