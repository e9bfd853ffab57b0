package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// graphLine is one "pkg ─► a, b (why), c" line of the import graph,
// continued on the indented lines under it.
var graphLine = regexp.MustCompile(`^(\S+)\s+─►\s*(.*)$`)

// docGraph reads the import graph of docs/architecture.md: package →
// the repository's packages it imports (parenthesised words dropped).
func docGraph(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "## Import graph")
	if start < 0 {
		t.Fatal("docs/architecture.md has no Import graph section")
	}
	block := text[start:]
	block = block[strings.Index(block, "```")+3:]
	block = block[:strings.Index(block, "```")]
	graph := map[string][]string{}
	var cur string
	paren := regexp.MustCompile(`\([^)]*\)`)
	for _, l := range strings.Split(block, "\n") {
		if m := graphLine.FindStringSubmatch(l); m != nil {
			cur = m[1]
			graph[cur] = nil
			l = m[2]
		} else if cur == "" || strings.TrimSpace(l) == "" || !strings.HasPrefix(l, " ") {
			continue
		}
		for _, name := range strings.Split(paren.ReplaceAllString(l, ""), ",") {
			if name = strings.TrimSpace(name); name != "" {
				graph[cur] = append(graph[cur], name)
			}
		}
	}
	return graph
}

// The import graph in docs/architecture.md is what go list says: each
// package it draws imports exactly the repository's packages it lists,
// and every package of the product (not tests' helpers, benchmarks or
// examples) is drawn.
func TestArchitectureImportGraphIsTrue(t *testing.T) {
	graph := docGraph(t)
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	short := func(p string) string {
		if p == module {
			return "gmailrelay"
		}
		return strings.TrimPrefix(p, module+"/")
	}
	helper := regexp.MustCompile(`(^|/)(bench|e2e|examples|deploy|acceptlogtest|logtest|faulttest|pgtest|testenv|testclock)(/|$)|^bench|^internal/(fielderr|jsonpos|gctune|lifecycle|rfc5322|testclock|testenv|tmpfs)$`)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := short(f[0])
		if helper.MatchString(pkg) || strings.HasPrefix(pkg, "integrations/") {
			continue // tests' helpers, and Go code npm installs under node_modules
		}
		var want []string
		for _, imp := range f[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				want = append(want, short(imp))
			}
		}
		got, drawn := graph[pkg]
		if !drawn {
			t.Errorf("docs/architecture.md's import graph does not draw %s (imports %v)", pkg, want)
			continue
		}
		slices.Sort(want)
		got = slices.Clone(got)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("docs/architecture.md draws %s ─► %v; go list says %v", pkg, got, want)
		}
	}
}
