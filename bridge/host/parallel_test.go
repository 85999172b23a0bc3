package host

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// Every test of the package runs beside the others, or says why it cannot
// (a line "Not in parallel: why" in its comment). The tests here mostly
// wait on daemons and their processes: one at a time, the package took
// twice as long on two cores (issue 28). A test that changes what the
// whole process shares (the environment, a package variable every daemon
// reads, runner.KillAll's reach) is the exception, and the reason is what
// a reviewer checks.
func TestEveryTestRunsInParallelOrSaysWhy(t *testing.T) {
	t.Parallel()
	ents, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	tests := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "Test") || fd.Name.Name == "TestMain" {
				continue
			}
			tests++
			if fd.Doc != nil && strings.Contains(fd.Doc.Text(), "Not in parallel: ") {
				continue
			}
			parallel := false
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Parallel" {
					parallel = true
				}
				return !parallel
			})
			if !parallel {
				t.Errorf("%s (%s): call t.Parallel(), or say in its comment \"Not in parallel: \" and why",
					fd.Name.Name, fset.Position(fd.Pos()))
			}
		}
	}
	if tests < 100 {
		t.Fatalf("found %d tests: the parse went wrong", tests)
	}
}
