package deploy_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
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
var sizeExceptions = map[string]string{
	"bench/table.go:Rows":                    "split in branch undo",
	"bench/sweep.go:Sweep":                   "split in branch undo",
	"relay/intakeraw.go:IDScheme.prepareRaw": "split in branch undo",
}

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
