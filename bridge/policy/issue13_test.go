package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge/policy"
)

// An optional argument the request leaves out drops its element; right
// after an option that would let the next value slide into the option's
// slot ("curl -o URL" writes where the agent named the URL). Such a
// template is refused when the policy loads, with the way out.
func TestOptionalArgCannotSlideIntoOption(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	const args = `
[ops.get.args.out]
type = "string"
required = false
[ops.get.args.url]
type = "string"
[agents.a]
ops = ["get"]
`
	refused := []struct {
		name, argv, opt, hint string
	}{
		{"short option", `["curl", "-o", "{out}", "{url}"]`, `"-o"`, `"-o{out}"`},
		{"long option", `["curl", "--output", "{out}", "{url}"]`, `"--output"`, `"--output={out}"`},
		{"element with text", `["curl", "-o", "{out}.part", "{url}"]`, `"-o"`, `"-o{out}"`},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			_, err := policy.Parse("p.toml", []byte("[ops.get]\nargv = "+c.argv+"\n"+args))
			var pe *policy.PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("loaded; want a refusal (err %v)", err)
			}
			if pe.Key != "ops.get.argv" || pe.Line != 2 || !strings.Contains(pe.Msg, "is left out when the optional argument out is not given") ||
				!strings.Contains(pe.Msg, "as the value of "+c.opt) || !strings.Contains(pe.Hint, c.hint) || !strings.Contains(pe.Hint, "give out a default, or make it required") {
				t.Errorf("got %v", err)
			}
		})
	}
	// The same in reconcile.
	if _, err := policy.Parse("p.toml", []byte("[ops.get]\nargv = [\"curl\", \"{url}\", \"-o{out}\"]\nreconcile = [\"check\", \"-f\", \"{out}\", \"{url}\"]\n"+args)); err == nil ||
		!strings.Contains(err.Error(), "ops.get.reconcile: element 2") {
		t.Errorf("reconcile: %v", err)
	}

	fine := []struct{ name, argv, omitted string }{
		{"option and value in one element", `["curl", "-o{out}", "{url}"]`, "curl https://x"},
		{"long option with =", `["curl", "--output={out}", "{url}"]`, "curl https://x"},
		{"after the end of options", `["curl", "--", "{out}", "{url}"]`, "curl -- https://x"},
		{"after a positional", `["curl", "{url}", "{out}"]`, "curl https://x"},
		{"after a complete option", `["curl", "-Dk=v", "{out}", "{url}"]`, "curl -Dk=v https://x"},
		// Last: nothing follows that could take its place (a new user's
		// ["ls", "-l", "{path}"] was refused for nothing).
		{"last element", `["curl", "{url}", "-o", "{out}"]`, "curl https://x -o"},
	}
	for _, c := range fine {
		t.Run(c.name, func(t *testing.T) {
			p, err := policy.Parse("p.toml", []byte("[ops.get]\nargv = "+c.argv+"\n"+args))
			if err != nil {
				t.Fatal(err)
			}
			inv, err := p.Render("a", "get", map[string]string{"url": "https://x"}, policy.RenderContext{Env: pathEnv("/bin:/usr/bin")})
			if err != nil {
				if strings.Contains(err.Error(), "not found in PATH") {
					t.Skip("no curl here; the load is what matters")
				}
				t.Fatal(err)
			}
			if got := strings.Join(append([]string{"curl"}, inv.Argv[1:]...), " "); got != c.omitted {
				t.Errorf("rendered %q, want %q", got, c.omitted)
			}
		})
	}
	// A default or required = true means the element is never dropped.
	for _, arg := range []string{"type = \"string\"\ndefault = \"out.txt\"", "type = \"string\""} {
		src := "[ops.get]\nargv = [\"curl\", \"-o\", \"{out}\", \"{url}\"]\n[ops.get.args.out]\n" + arg + "\n[ops.get.args.url]\ntype = \"string\"\n"
		if _, err := policy.Parse("p.toml", []byte(src)); err != nil {
			t.Errorf("%q: %v", arg, err)
		}
	}
}

func pathEnv(path string) func(string) (string, bool) {
	return func(k string) (string, bool) { return path, k == "PATH" }
}

// Values starting with '@' (a response file to gcc, javac, ld) or '+' (a
// forced push in "git push origin +main") are refused like a leading '-',
// unless the argument allows them.
func TestLeadingAtAndPlus(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	src := `
[ops.push]
argv = ["/bin/echo", "push", "origin", "{branch}"]
[ops.push.args.branch]
type = "string"
[ops.cc]
argv = ["/bin/echo", "{file}", "{rev}", "{opt}"]
[ops.cc.args.file]
type = "string"
allow_at = true
[ops.cc.args.rev]
type = "string"
allow_plus = true
[ops.cc.args.opt]
type = "string"
allow_dash = true
[agents.a]
ops = ["push", "cc"]
`
	p, err := policy.Parse("p.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ value, reason string }{
		{"+main", "starts with '+' and could be read as a forced ref or an option (an argument takes one only with allow_plus = true in the host's policy)"},
		{"@/etc/passwd", "starts with '@' and could be read as a file of more arguments (an argument takes one only with allow_at = true in the host's policy)"},
		{"-f", "starts with '-' and could be read as an option (an argument takes one only with allow_dash = true in the host's policy)"},
	} {
		inv, err := p.Render("a", "push", map[string]string{"branch": c.value}, policy.RenderContext{})
		var ae *policy.ArgError
		if !errors.As(err, &ae) || !errors.Is(err, policy.ErrInvalidArg) || ae.Arg != "branch" || ae.Reason != c.reason {
			t.Errorf("%q: %v (argv %v)", c.value, err, inv)
		}
	}
	// Inside the value they mean nothing.
	if _, err := p.Render("a", "push", map[string]string{"branch": "a+b@c-d"}, policy.RenderContext{}); err != nil {
		t.Error(err)
	}
	// Each allow_ key lifts its own character only.
	inv, err := p.Render("a", "cc", map[string]string{"file": "@args", "rev": "+main", "opt": "-O2"}, policy.RenderContext{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(inv.Argv[1:], " "); got != "@args +main -O2" {
		t.Errorf("argv %q", got)
	}
	for _, c := range []struct{ arg, value string }{{"file", "+x"}, {"file", "-x"}, {"rev", "@x"}, {"opt", "@x"}, {"opt", "+x"}} {
		args := map[string]string{"file": "f", "rev": "r", "opt": "o", c.arg: c.value}
		if _, err := p.Render("a", "cc", args, policy.RenderContext{}); !errors.Is(err, policy.ErrInvalidArg) {
			t.Errorf("%s=%q accepted", c.arg, c.value)
		}
	}
	// A default must pass the same rule, and the keys belong to strings.
	for _, bad := range []string{
		"[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"string\"\ndefault = \"@x\"\n",
		"[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"int\"\nallow_plus = true\n",
	} {
		if _, err := policy.Parse("p.toml", []byte(bad)); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
	// The catalog tells the agent which leading characters an argument takes.
	for _, op := range p.Catalog() {
		if op.Name != "cc" {
			continue
		}
		for _, a := range op.Args {
			if got := [3]bool{a.AllowAt, a.AllowPlus, a.AllowDash}; got != map[string][3]bool{"file": {true, false, false}, "rev": {false, true, false}, "opt": {false, false, true}}[a.Name] {
				t.Errorf("catalog %s: %+v", a.Name, a)
			}
		}
	}
}

// max_stdin bounds the standard input a request may carry, per op (1 MiB
// by default; 0 takes none); the catalog shows it to the agent.
func TestMaxStdin(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	src := `
[defaults]
max_stdin = "64KiB"
[ops.big]
argv = ["/bin/cat"]
max_stdin = "8MiB"
[ops.none]
argv = ["/bin/true"]
max_stdin = 0
[ops.dflt]
argv = ["/bin/true"]
[ops.other]
argv = ["/bin/cat"]
max_stdin = "1GiB"
[agents.a]
ops = ["big", "none", "dflt"]
[agents.b]
ops = ["none"]
`
	p, err := policy.Parse("p.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		agent, op string
		want      int64
	}{
		{"a", "big", 8 << 20}, {"a", "none", 0}, {"a", "dflt", 64 << 10},
		{"a", "other", 8 << 20}, // not its op: the most any of its ops takes
		{"a", "", 8 << 20}, {"b", "", 0}, {"nobody", "big", 0},
	} {
		if got := p.MaxStdin(c.agent, c.op); got != c.want {
			t.Errorf("MaxStdin(%q, %q) = %d, want %d", c.agent, c.op, got, c.want)
		}
	}
	inv, err := p.Render("a", "none", nil, policy.RenderContext{})
	if err != nil || inv.MaxStdin != 0 || !strings.Contains(inv.String(), "max_stdin:   0\n") {
		t.Errorf("render none: %v %+v", err, inv)
	}
	for _, op := range p.Catalog() {
		want := map[string]int64{"big": 8 << 20, "none": 0, "dflt": 64 << 10, "other": 1 << 30}[op.Name]
		if op.MaxStdin != want {
			t.Errorf("catalog %s max_stdin %d, want %d", op.Name, op.MaxStdin, want)
		}
	}
	if ex, _ := p.Explain("big"); !strings.Contains(ex, "max_stdin:   8388608\n") {
		t.Errorf("explain:\n%s", ex)
	}
	// Without any setting: 1 MiB.
	p, err = policy.Parse("p.toml", []byte(ok+"[agents.a]\nops = [\"t\"]\n"))
	if err != nil || p.MaxStdin("a", "t") != 1<<20 {
		t.Errorf("default: %v %d", err, p.MaxStdin("a", "t"))
	}
	for _, bad := range []struct{ v, msg string }{
		{`-1`, "must not be negative"}, {`"5GiB"`, "too large"}, {`"lots"`, "bad size"}, {`true`, "want a size"},
	} {
		_, err := policy.Parse("p.toml", []byte(ok+"max_stdin = "+bad.v+"\n"))
		if err == nil || !strings.Contains(err.Error(), "p.toml:3: ops.t.max_stdin: ") || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("max_stdin = %s: %v", bad.v, err)
		}
	}
}
