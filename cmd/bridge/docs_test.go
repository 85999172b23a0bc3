package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// docs/CLI.md is the contract scripts rely on; these tests keep it in step
// with the code.

func readCLIDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocExitCodes: the EXIT STATUS table lists exactly the exit* constants
// of main.go (read from the source, so a new constant fails here until it is
// documented).
func TestDocExitCodes(t *testing.T) {
	code := exitConstants(t)
	doc := readCLIDoc(t)
	sec := doc[strings.Index(doc, "## EXIT STATUS"):]
	sec = sec[:strings.Index(sec, "\n## ")]
	var documented []int
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+) \|`).FindAllStringSubmatch(sec, -1) {
		n2, _ := strconv.Atoi(m[1])
		documented = append(documented, n2)
	}
	slices.Sort(code)
	slices.Sort(documented)
	if !slices.Equal(code, documented) {
		t.Errorf("exit codes in main.go %v, in docs/CLI.md %v", code, documented)
	}
}

// exitConstants reads the exit* constants of main.go from the source.
func exitConstants(t *testing.T) []int {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var code []int
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "exit") {
			return true
		}
		lit, ok := vs.Values[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.INT {
			t.Fatalf("%s is not an integer literal", vs.Names[0].Name)
		}
		n2, _ := strconv.Atoi(lit.Value)
		code = append(code, n2)
		return true
	})
	if len(code) < 10 {
		t.Fatalf("found only %d exit constants in main.go", len(code))
	}
	return code
}

// TestDocCommands: every command and every one of its flags (with its
// default, where it has one) appears in docs/CLI.md.
func TestDocCommands(t *testing.T) {
	parser, err := kong.New(&CLI{}, kong.Name("bridge"), kong.Vars{"version": "test"})
	if err != nil {
		t.Fatal(err)
	}
	doc := readCLIDoc(t)
	global := map[string]bool{}
	for _, f := range parser.Model.Flags {
		global[f.Name] = true
		if !strings.Contains(doc, "`--"+f.Name) {
			t.Errorf("global flag --%s is not documented", f.Name)
		}
	}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, c := range n.Children {
			walk(c)
		}
		if n.Type != kong.CommandNode || len(n.Children) > 0 {
			return
		}
		path := n.FullPath()
		if !strings.Contains(doc, "**`"+path) {
			t.Errorf("%s has no entry in docs/CLI.md", path)
		}
		for _, f := range n.Flags {
			if global[f.Name] {
				continue
			}
			want := "--" + f.Name
			if f.Default != "" && f.Value.Target.Kind().String() != "bool" {
				want += "=" + f.Default
			}
			if !strings.Contains(doc, want) {
				t.Errorf("%s: flag %s is not documented", path, want)
			}
		}
	}
	walk(parser.Model.Node)
}
