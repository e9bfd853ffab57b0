package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// maxReadmeLines bounds the README: a pitch, the two commands, a tour and
// links; everything else lives in docs/.
const maxReadmeLines = 200

func TestReadmeIsShort(t *testing.T) {
	readme := read(t, "README.md")
	if n := strings.Count(readme, "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move details to docs/", n, maxReadmeLines)
	}
}

// The README's first sh block holds the two set-up commands CI and a
// newcomer rely on, exactly.
func TestReadmeStartsWithTheTwoCommands(t *testing.T) {
	readme := read(t, "README.md")
	_, rest, ok := strings.Cut(readme, "```sh\n")
	if !ok {
		t.Fatal("README.md has no ```sh block")
	}
	block, _, _ := strings.Cut(rest, "```")
	for _, cmd := range []string{"go run ./cmd/gmailrelay serve", "go test -race ./..."} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(cmd) + `(\s|$)`).MatchString(block) {
			t.Errorf("README.md's first sh block does not start a line with %q:\n%s", cmd, block)
		}
	}
}

// docs/architecture.md's package map names every top-level directory of
// the repository as `dir/` (hidden directories and node_modules aside).
func TestArchitectureNamesEveryTopLevelDirectory(t *testing.T) {
	arch := read(t, "docs/architecture.md")
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || name == "node_modules" {
			continue
		}
		n++
		if !strings.Contains(arch, "`"+name+"/`") {
			t.Errorf("docs/architecture.md does not name the top-level directory %s (as `%s/`)", name, name)
		}
	}
	if n == 0 {
		t.Fatalf("no top-level directories found in %s", root)
	}
}

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// Every relative link in the README and in docs/*.md points at a file of
// the repository and, for a Markdown file, at a heading it has.
func TestDocLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = headingAnchors(string(data))
		return anchors[path]
	}
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(string(data)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which does not exist", rel(page), target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s links to %s: %s has no heading with that anchor", rel(page), target, rel(path))
			}
		}
	}
}

func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return r
}

// fence matches a fenced code block, inline code is matched by tick.
var (
	fence = regexp.MustCompile("(?ms)^```.*?^```")
	tick  = regexp.MustCompile("`[^`\n]*`")
)

// stripCode removes code blocks and inline code, whose brackets are not
// links.
func stripCode(s string) string {
	return tick.ReplaceAllString(fence.ReplaceAllString(s, ""), "")
}

// headingAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower case, punctuation dropped, spaces to hyphens, a -N
// suffix for repeats.
func headingAnchors(doc string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range strings.Split(fence.ReplaceAllString(doc, ""), "\n") {
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
