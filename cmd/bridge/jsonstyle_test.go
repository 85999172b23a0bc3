package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/rogpeppe/go-internal/testscript"
)

// snakeKey is the one style of a key in bridge's JSON (docs/CLI.md, --json).
var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// cmdJSONStyle checks a file of --json output: `jsonstyle FILE [KEY...]`.
// FILE holds one or more JSON values (one document, or JSON lines); every
// object key is snake_case, and no value is null but those of the KEYs
// named (a list is [] when empty; a KEY names a field that is null on
// purpose, e.g. exit_code of an op that never ran). A KEY written KEY{}
// names an object keyed by data (agent names): its keys are not checked,
// its values are.
func cmdJSONStyle(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: jsonstyle FILE [NULLABLE-KEY...]")
	}
	if err := checkJSONStyle([]byte(ts.ReadFile(args[0])), args[1:]); err != nil {
		ts.Fatalf("jsonstyle %s: %v", args[0], err)
	}
}

func checkJSONStyle(data []byte, nullable []string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n := 0
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("not JSON: %v", err)
		}
		n++
		if err := walkJSON(v, "$", "", nullable); err != nil {
			return err
		}
	}
	if n == 0 {
		return errors.New("no JSON value")
	}
	return nil
}

func walkJSON(v any, path, key string, nullable []string) error {
	switch x := v.(type) {
	case nil:
		if !slices.Contains(nullable, key) {
			return fmt.Errorf("%s is null (a list is [] when empty; name the key if null is meant)", path)
		}
	case map[string]any:
		for k, e := range x {
			if !snakeKey.MatchString(k) && !slices.Contains(nullable, key+"{}") {
				return fmt.Errorf("%s: key %q is not snake_case", path, k)
			}
			if err := walkJSON(e, path+"."+k, k, nullable); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := walkJSON(e, fmt.Sprintf("%s[%d]", path, i), key, nullable); err != nil {
				return err
			}
		}
	}
	return nil
}

func TestCheckJSONStyle(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		null []string
	}{
		{`{"exit_code": 1, "argv": []}`, true, nil},
		{`{"a": {"b_c": [{"d2": "x"}]}}`, true, nil},
		{"{\"a\": 1}\n{\"b\": 2}\n", true, nil},
		{`{"ExitCode": 1}`, false, nil},
		{`{"exitCode": 1}`, false, nil},
		{`{"x": [{"Ref": 1}]}`, false, nil},
		{`{"argv": null}`, false, nil},
		{`[null]`, false, nil},
		{`{"exit_code": null}`, true, []string{"exit_code"}},
		{`{"agents": {"cloud-1": {"ops": []}}}`, true, []string{"agents{}"}},
		{`{"agents": {"cloud-1": {"Ops": []}}}`, false, []string{"agents{}"}},
		{`{"agents": {"cloud-1": 1}}`, false, nil},
		{`not json`, false, nil},
		{``, false, nil},
	} {
		err := checkJSONStyle([]byte(c.in), c.null)
		if (err == nil) != c.ok {
			t.Errorf("%q: err %v, want ok=%v", c.in, err, c.ok)
		}
	}
}

// noJSON names the commands whose --json output json.txt does not check,
// each with the reason docs/CLI.md gives (it must say it, in "JSON").
var noJSON = map[string]string{
	"serve": "--log-format=json",
	"mcp":   "MCP's JSON-RPC",
	"demo":  "a walk-through for a person",
	// Text for people and shells, as --help is.
	"help":       "`help` and `completion` print help, roff and shell scripts",
	"completion": "`help` and `completion` print help, roff and shell scripts",
}

// TestJSONEveryCommand: every command of the model is run with --json in
// testdata/json.txt (whose `jsonstyle` lines check the style), or is in
// noJSON with its reason in docs/CLI.md. A new command fails here until its
// --json output is checked.
func TestJSONEveryCommand(t *testing.T) {
	script, err := os.ReadFile("testdata/json.txt")
	if err != nil {
		t.Fatal(err)
	}
	var runs []string // the command words of each `bridge ... --json ...` line
	for _, line := range strings.Split(string(script), "\n") {
		f := strings.Fields(line)
		i := slices.Index(f, "bridge")
		if i < 0 || !slices.Contains(f, "--json") || strings.HasPrefix(line, "#") {
			continue
		}
		var words []string
		for j := i + 1; j < len(f); j++ {
			switch {
			case f[j] == "--home":
				j++
			case strings.HasPrefix(f[j], "-"):
			default:
				words = append(words, f[j])
			}
		}
		runs = append(runs, strings.Join(words, " ")+" ")
	}
	parser, err := kong.New(&CLI{}, kong.Name("bridge"), kong.Vars{"version": "test"})
	if err != nil {
		t.Fatal(err)
	}
	doc := readCLIDoc(t)
	for _, path := range leafCommands(parser.Model.Node) {
		if reason, ok := noJSON[path]; ok {
			if !strings.Contains(doc, reason) {
				t.Errorf("%s: docs/CLI.md does not give the reason it has no checked --json (%q)", path, reason)
			}
			continue
		}
		if !slices.ContainsFunc(runs, func(r string) bool { return strings.HasPrefix(r, path+" ") }) {
			t.Errorf("bridge %s: no `bridge --json %s` in testdata/json.txt", path, path)
		}
	}
}

// leafCommands lists the model's runnable commands as "keys rotate".
func leafCommands(n *kong.Node) []string {
	var out []string
	for _, c := range n.Children {
		if c.Type != kong.CommandNode || c.Hidden {
			continue
		}
		if isCommand(c) {
			out = append(out, strings.TrimPrefix(c.FullPath(), "bridge "))
		}
		out = append(out, leafCommands(c)...)
	}
	return out
}
