package relay_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writers are the packages above the log that change jobs' states.
var writers = []string{".", "../sweeper", "../outbox", "../retention", "../api", "../console"}

// TestStateChangesGoThroughMove: no package above the log sets a job's
// State or builds a line with a State by hand; every state change is
// gmailrelay.Move, which sets both together (a job's state is the fold of
// its lines). It reads the packages' sources, not their behaviour: a new
// `j.State = …` or `gmailrelay.Line{…, State: …}` fails it.
func TestStateChangesGoThroughMove(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range writers {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(fset, path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, pos := range handWrittenStates(f) {
				t.Errorf("%s: a state set by hand; use gmailrelay.Move", fset.Position(pos))
			}
		}
	}
}

// handWrittenStates returns where f assigns a .State field or gives an
// gmailrelay.Line literal (also an elided one in a []gmailrelay.Line) a
// State.
func handWrittenStates(f *ast.File) []token.Pos {
	var out []token.Pos
	isLine := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Line" {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == "acceptlog"
	}
	checkLit := func(lit *ast.CompositeLit) {
		for _, el := range lit.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "State" {
					out = append(out, kv.Pos())
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for _, lhs := range n.Lhs {
				if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "State" {
					out = append(out, sel.Pos())
				}
			}
		case *ast.CompositeLit:
			if isLine(n.Type) {
				checkLit(n)
			}
			if arr, ok := n.Type.(*ast.ArrayType); ok && isLine(arr.Elt) {
				for _, el := range n.Elts {
					if inner, ok := el.(*ast.CompositeLit); ok && inner.Type == nil {
						checkLit(inner)
					}
				}
			}
		}
		return true
	})
	return out
}
