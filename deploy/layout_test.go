package deploy_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Size limits a newcomer can read a file and a function within.
const (
	maxFileLines = 600 // a non-test .go file
	maxFuncLines = 100 // a non-test function, from "func" to its closing brace
)

// sizeExceptions are the non-test files ("path") and functions
// ("path:Name", "path:Type.Method") allowed over the limits, each with the
// reason. An entry that is no longer over its limit fails the test, so the
// list only holds what is still needed.
var sizeExceptions = map[string]string{}

// goFile is one .go file of the repository, parsed with its comments.
type goFile struct {
	path string // slash-separated, relative to the repository root
	fset *token.FileSet
	file *ast.File
}

// goFiles parses every .go file of the repository except those under
// hidden directories, testdata, node_modules and integrations/ (the n8n
// package and its tooling, not Go of this module).
func goFiles(t *testing.T) []goFile {
	t.Helper()
	var out []goFile
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rp := filepath.ToSlash(rel(p))
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || rp == "integrations") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		out = append(out, goFile{path: rp, fset: fset, file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no .go files found under %s", root)
	}
	return out
}

// funcName is a declaration's name as sizeExceptions spells it: Name, or
// Type.Method for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// oversized returns, for every non-test file over maxFileLines and every
// non-test function over maxFuncLines, its key (as sizeExceptions spells
// it) and its number of lines.
func oversized(files []goFile) map[string]int {
	over := map[string]int{}
	for _, f := range files {
		if strings.HasSuffix(f.path, "_test.go") {
			continue
		}
		if n := f.fset.File(f.file.Pos()).LineCount(); n > maxFileLines {
			over[f.path] = n
		}
		for _, d := range f.file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := f.fset.Position(fd.End()).Line - f.fset.Position(fd.Pos()).Line + 1
			if n > maxFuncLines {
				over[f.path+":"+funcName(fd)] = n
			}
		}
	}
	return over
}

func TestNoLongFilesOrFunctions(t *testing.T) {
	over := oversized(goFiles(t))
	checkExceptions(t, over, sizeExceptions, func(key string, n int) string {
		limit := maxFuncLines
		if !strings.Contains(key, ":") {
			limit = maxFileLines
		}
		return fmt.Sprintf("%s has %d lines, more than %d: split it (or list it, with the reason, in sizeExceptions)", key, n, limit)
	})
}

// checkExceptions fails for every key in found that exceptions does not
// list, and for every listed key that found no longer holds.
func checkExceptions(t *testing.T, found map[string]int, exceptions map[string]string, complaint func(string, int) string) {
	t.Helper()
	keys := make([]string, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := exceptions[k]; !ok {
			t.Error(complaint(k, found[k]))
		}
	}
	for k, why := range exceptions {
		if _, ok := found[k]; !ok {
			t.Errorf("exception %s (%s) is no longer needed: remove it from the list", k, why)
		}
	}
}

// specFileExceptions are the files allowed, for now, to have comments
// that cite the contract or design files, which are not in the
// repository: files other branches are changing at the same time, whose
// comments are rewritten there or at the merge.
var specFileExceptions = map[string]string{}

// specFile matches a comment's citation of the contract or design file.
var specFile = regexp.MustCompile(`\b(` + "CONTRACT" + `|` + "DESIGN" + `)\b`)

// docRef matches a comment's reference to a page of docs/, with its
// anchor if it has one: docs/design.md#the-outbox.
var docRef = regexp.MustCompile(`\bdocs/([a-z0-9-]+\.md)(?:#([a-z0-9_-]+))?`)

// Comments say where their reasoning is written down: a page of docs/,
// never the contract or design files the repository does not hold. Every
// docs/ page (and anchor) a comment names exists.
func TestCommentsCiteOnlyDocsThatExist(t *testing.T) {
	cites := map[string]int{}
	anchors := map[string]map[string]bool{}
	for _, f := range goFiles(t) {
		for _, cg := range f.file.Comments {
			for _, c := range cg.List {
				if specFile.MatchString(c.Text) {
					cites[f.path]++
				}
				for _, m := range docRef.FindAllStringSubmatch(c.Text, -1) {
					at := f.fset.Position(c.Pos())
					page, anchor := m[1], m[2]
					a, ok := anchors[page]
					if !ok {
						data, err := os.ReadFile(filepath.Join(root, "docs", page))
						if err != nil {
							t.Errorf("%s:%d cites docs/%s, which does not exist", f.path, at.Line, page)
							anchors[page] = nil
							continue
						}
						a = headingAnchors(string(data))
						anchors[page] = a
					}
					if a != nil && anchor != "" && !a[anchor] {
						t.Errorf("%s:%d cites %s: docs/%s has no heading with that anchor", f.path, at.Line, m[0], page)
					}
				}
			}
		}
	}
	checkExceptions(t, cites, specFileExceptions, func(path string, n int) string {
		return fmt.Sprintf("%s: %d comments cite files the repository does not hold: cite the page of docs/ that says it (write it there if none does)", path, n)
	})
}
