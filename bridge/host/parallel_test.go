package host

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every test of the package runs beside the others, calling t.Parallel()
// before anything else (what it does before would overlap the sequential
// tests), or says why it cannot (a line "Not in parallel: why" in its doc
// comment; a test whose subtests run in parallel among themselves says so
// too). The tests here mostly
// wait on daemons and their processes: one at a time, the package took
// twice as long on two cores (issue 28). A test that changes what the
// whole process shares (the environment, a package variable every daemon
// reads, runner.KillAll's reach) is the exception, and the reason is what
// a reviewer checks. The system suites (systest) keep the same rule.
func TestEveryTestRunsInParallelOrSaysWhy(t *testing.T) {
	t.Parallel()
	var files []string
	for _, dir := range []string{".", "systest"} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), "_test.go") {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	fset := token.NewFileSet()
	tests := 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
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
			if !startsParallel(fd) {
				t.Errorf("%s (%s): call t.Parallel() first, or say in its doc comment \"Not in parallel: \" and why",
					fd.Name.Name, fset.Position(fd.Pos()))
			}
		}
	}
	if tests < 100 {
		t.Fatalf("found %d tests: the parse went wrong", tests)
	}
}

// startsParallel reports whether a test's first statement is t.Parallel().
func startsParallel(fd *ast.FuncDecl) bool {
	if len(fd.Body.List) == 0 || len(fd.Type.Params.List) != 1 || len(fd.Type.Params.List[0].Names) != 1 {
		return false
	}
	es, ok := fd.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok || len(call.Args) != 0 {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Parallel" {
		return false
	}
	recv, ok := sel.X.(*ast.Ident)
	return ok && recv.Name == fd.Type.Params.List[0].Names[0].Name
}
