package deploy_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the repository's module path.
const module = "github.com/gmailrelay/gmailrelay"

// The import graph keeps its layers (docs/architecture.md#import-graph):
// the domain links no storage library, the PostgreSQL log does not link
// bbolt, and the send path does not import the fault rules, which wrap its
// Gmail client from outside (faultmodes.Wrap). A forbidden path covers its
// packages below it.
func TestImportLayout(t *testing.T) {
	tests := []struct {
		pkg       string
		forbidden []string
	}{
		{".", []string{"go.etcd.io/bbolt", "github.com/jackc/pgx/v5"}},
		{"./pglog", []string{"go.etcd.io/bbolt"}},
		{"./relay", []string{module + "/faultmodes"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			deps := goListDeps(t, tt.pkg)
			if self := module + strings.TrimPrefix(tt.pkg, "."); !slices.Contains(deps, self) {
				t.Fatalf("go list -deps %s does not list %s itself: %v", tt.pkg, self, deps)
			}
			for _, dep := range deps {
				for _, f := range tt.forbidden {
					if dep == f || strings.HasPrefix(dep, f+"/") {
						t.Errorf("%s depends on %s", tt.pkg, dep)
					}
				}
			}
		})
	}
}

// goListDeps returns what `go list -deps pkg` prints, run at the
// repository's root: pkg and every package it imports, transitively
// (tests left out).
func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", pkg)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}
