package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version and commit are set at link time by release builds:
// go build -ldflags "-X main.version=v1.2.3 -X main.commit=abc123". Left
// empty, version reads the module version (go install …@v1.2.3) or
// "devel", and commit the VCS revision the go command stamps into builds
// from a git checkout, or "unknown".
var (
	version string
	commit  string
)

// buildInfo is what `gmailrelay version` prints.
type buildInfo struct {
	Version  string // v1.2.3, or "devel"
	Commit   string // VCS revision, "+modified" when the tree was dirty; or "unknown"
	Go       string // the Go toolchain that built the binary
	Platform string // GOOS/GOARCH
}

// readBuildInfo is the binary's buildInfo: the -X values first, then what
// the go command recorded (debug.ReadBuildInfo), then "devel"/"unknown".
func readBuildInfo(linkVersion, linkCommit string, bi *debug.BuildInfo, ok bool) buildInfo {
	b := buildInfo{Version: linkVersion, Commit: linkCommit, Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if ok && bi != nil {
		if bi.GoVersion != "" {
			b.Go = bi.GoVersion
		}
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		if b.Commit == "" {
			modified := false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					b.Commit = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if b.Commit != "" && modified {
				b.Commit += "+modified"
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// runVersion prints the version, the commit and the Go version, one a line.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", stderr, "gmailrelay version",
		"Prints the relay's version, the commit it was built from and the Go version.")
	if code, ok := parseNoArgs(fs, args, failer(stderr, "version")); !ok {
		return code
	}
	bi, ok := debug.ReadBuildInfo()
	b := readBuildInfo(version, commit, bi, ok)
	fmt.Fprintf(stdout, "gmailrelay %s\ncommit %s\ngo %s %s\n", b.Version, b.Commit, b.Go, b.Platform)
	return 0
}
