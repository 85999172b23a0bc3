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

// TestDocOneModel: the manual page (bridge help --man), --help and
// CLI.md's synopsis come from the one command model: every command and every
// one of its flags appears in each.
func TestDocOneModel(t *testing.T) {
	parser, err := kong.New(&CLI{}, kong.Name("bridge"), kong.Vars{"version": "test"})
	if err != nil {
		t.Fatal(err)
	}
	var man, out, errOut strings.Builder
	if code := realMain([]string{"help", "--man"}, strings.NewReader(""), &man, &errOut); code != 0 || !strings.HasPrefix(man.String(), ".TH BRIDGE 1 ") {
		t.Fatalf("bridge help --man: exit %d, stderr %q", code, errOut.String())
	}
	doc := readCLIDoc(t)
	syn := doc[strings.Index(doc, "## SYNOPSIS"):]
	syn = syn[strings.Index(syn, "```")+3:]
	syn = syn[:strings.Index(syn, "```")]
	// Synopsis entries: a line starting "bridge", with its continuation
	// lines (indented).
	var entries []string
	for _, l := range strings.Split(syn, "\n") {
		if strings.HasPrefix(l, "bridge") {
			entries = append(entries, l)
		} else if strings.TrimSpace(l) != "" && len(entries) > 0 {
			entries[len(entries)-1] += " " + strings.TrimSpace(l)
		}
	}
	for _, n := range commandNodes(parser.Model.Node) {
		if !isCommand(n) {
			continue
		}
		path := cmdPath(n)
		words := strings.Fields(path)
		// The man page: a section of its own, with each flag.
		sec := man.String()
		i := strings.Index(sec, ".SS \"bridge "+roffText(path)+"\"\n")
		if i < 0 {
			t.Errorf("man page: no section for bridge %s", path)
			continue
		}
		sec = sec[i+4:]
		if j := strings.Index(sec, "\n.S"); j >= 0 {
			sec = sec[:j]
		}
		// --help of the command, as `bridge help PATH` prints it.
		out.Reset()
		errOut.Reset()
		if code := realMain(append(slices.Clone(words), "--help"), strings.NewReader(""), &out, &errOut); code != 0 {
			t.Errorf("bridge %s --help: exit %d: %s", path, code, errOut.String())
		}
		help := out.String()
		var helpCmd strings.Builder
		if code := realMain(append([]string{"help"}, words...), strings.NewReader(""), &helpCmd, &errOut); code != 0 || helpCmd.String() != help {
			t.Errorf("bridge help %s: exit %d, not what bridge %s --help prints", path, code, path)
		}
		// The synopsis: an entry for the command whose words include the
		// subcommand's.
		entry := ""
		for _, e := range entries {
			if strings.HasPrefix(e+" ", "bridge "+words[0]+" ") && containsWords(e, words[1:]) {
				entry = e
				break
			}
		}
		if words[0] == "version" && strings.Contains(syn, "| version\n") {
			entry = "bridge version"
		}
		if entry == "" {
			t.Errorf("docs/CLI.md SYNOPSIS: no line for bridge %s", path)
		}
		for _, f := range n.Flags {
			if f.Hidden {
				continue
			}
			if !strings.Contains(sec, roffText("--"+f.Name)) {
				t.Errorf("man page, bridge %s: no --%s", path, f.Name)
			}
			if !strings.Contains(help, "--"+f.Name) {
				t.Errorf("bridge %s --help: no --%s", path, f.Name)
			}
			short := f.Short != 0 && strings.Contains(entry, "-"+string(f.Short)+"|--"+f.Name)
			nudge := strings.HasPrefix(f.Name, "syncthing-") && strings.Contains(entry, "[--syncthing-*]") && strings.Contains(syn, "--"+f.Name+" ")
			if entry != "" && !strings.Contains(entry, "--"+f.Name) && !short && !nudge {
				t.Errorf("docs/CLI.md SYNOPSIS, bridge %s: no --%s", path, f.Name)
			}
		}
	}
}

// containsWords: every word appears in s as a word (between spaces, |, [ or ]).
func containsWords(s string, words []string) bool {
	fields := strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(" |[]", r) })
	for _, w := range words {
		if !slices.Contains(fields, w) {
			return false
		}
	}
	return true
}
