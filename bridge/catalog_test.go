package bridge

import (
	"errors"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge/policy"
)

// CheckCall refuses what the host would, with the host's reason code and a
// hint an agent can act on; it never refuses the built-in ping.
func TestCatalogCheckCall(t *testing.T) {
	cat := &Catalog{Ops: []policy.OpInfo{
		{Name: "apply", MaxStdin: 100, Stdin: "required", StdinHint: "unified diff", Args: []policy.ArgInfo{}},
		{Name: "cat", MaxStdin: 0, Args: []policy.ArgInfo{{Name: "file", Type: "path", Required: true}}},
		{Name: "wc", MaxStdin: 10, Args: []policy.ArgInfo{}}, // no stdin field: optional
	}}
	none, file := CallInput{}, func(n int64) CallInput { return CallInput{Given: true, Len: n} }
	for _, c := range []struct {
		op     string
		args   map[string]string
		in     CallInput
		reason ReasonCode // "" = fine
		msg    string
		hint   string
	}{
		{"apply", nil, file(50), "", "", ""},
		{"apply", nil, file(-1), "", "", ""}, // a pipe: its length shows as it is read
		{"wc", nil, none, "", "", ""},
		{"wc", nil, file(10), "", "", ""},
		{PingOp, nil, none, "", "", ""},
		{"cta", map[string]string{"file": "x"}, none, "not-allowed", `op "cta" is not in the host's catalog`, `did you mean "cat"?`},
		{"cat", map[string]string{"fil": "x"}, none, "bad-argument", `did you mean "file"?`, "usage: bridge run cat file=<path>"},
		{"apply", nil, none, "bad-argument", `op "apply" needs standard input (unified diff) and none was given`, "usage: bridge run apply --stdin=FILE"},
		{"apply", nil, file(0), "bad-argument", "needs standard input", ""},
		{"cat", map[string]string{"file": "x"}, file(3), "too-large", `op "cat" takes no standard input`, "drop --stdin"},
		{"wc", nil, file(11), "too-large", "standard input is 11 bytes; op wc takes at most 10", "raise max_stdin"},
	} {
		err := cat.CheckCall(c.op, c.args, c.in)
		if c.reason == "" {
			if err != nil {
				t.Errorf("%s %v %+v: %v", c.op, c.args, c.in, err)
			}
			continue
		}
		var ce *CallError
		var he *HintError
		if !errors.As(err, &ce) || ce.Reason != c.reason || !strings.Contains(err.Error(), c.msg) ||
			!errors.As(err, &he) || !strings.Contains(he.Hint, c.hint) {
			t.Errorf("%s %v %+v: err = %v (%+v), want %s %q hint %q", c.op, c.args, c.in, err, ce, c.reason, c.msg, c.hint)
		}
	}
}

// ExampleLine shows every argument: required ones as NAME=<type>, then the
// optional ones (or with a default) in brackets, an enum by its first value.
func TestExampleLine(t *testing.T) {
	dflt := "."
	for _, c := range []struct {
		info policy.OpInfo
		want string
	}{
		{policy.OpInfo{Name: "test", Args: []policy.ArgInfo{{Name: "run", Type: "string", Default: &dflt}}},
			"bridge run test [run=<string>]"},
		{policy.OpInfo{Name: "build", Stdin: "optional", Args: []policy.ArgInfo{
			{Name: "level", Type: "enum", Values: []string{"quiet", "verbose"}},
			{Name: "pkg", Type: "path", Required: true},
			{Name: "v", Type: "bool"},
		}}, "bridge run build pkg=<path> [level=quiet] [v=<bool>] [--stdin=FILE]"},
		{policy.OpInfo{Name: "apply", Stdin: "required", Args: []policy.ArgInfo{}}, "bridge run apply --stdin=FILE"},
	} {
		if got := ExampleLine(&c.info); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}
