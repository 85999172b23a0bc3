package policy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge/policy"
)

// ok is a minimal valid op the error cases build on.
const ok = "[ops.t]\nargv = [\"/bin/true\"]\n"

func TestParseErrors(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	cases := []struct {
		name, src string
		line      int
		key       string
		msg, hint string
	}{
		// Decoder-level: unknown keys and TOML types.
		{"unknown top key", "bogus = 1\n" + ok, 1, "bogus", "unknown key", "valid keys here: version, defaults, ops, agents"},
		{"unknown op key typo", "[ops.t]\nargv = [\"/bin/true\"]\ntimout = \"1m\"\n", 3, "ops.t.timout", "unknown key", `did you mean "timeout"?`},
		{"unknown arg key typo", "[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"string\"\npatern = \"x\"\n", 5, "ops.t.args.a.patern", "unknown key", `did you mean "pattern"?`},
		{"unknown defaults key", "[defaults]\ncwd = \"/\"\n" + ok, 2, "defaults.cwd", "unknown key", "valid keys here: timeout, max_output, max_stdin, env"},
		{"unknown agent key", ok + "[agents.a]\nops = [\"t\"]\nop = [\"t\"]\n", 5, "agents.a.op", "unknown key", `did you mean "ops"?`},
		{"timeout as integer", "[ops.t]\nargv = [\"/bin/true\"]\ntimeout = 600\n", 3, "ops.t.timeout", "wrong type: got an integer, want a string", "Go duration"},
		{"argv as string", "[ops.t]\nargv = \"/bin/true\"\n", 2, "ops.t.argv", "wrong type: got a string, want an array of strings", "array of strings"},
		{"argv element not string", "[ops.t]\nargv = [\"/bin/true\", 3]\n", 2, "ops.t.argv", "wrong type: got an integer, want a string", "array of strings"},
		{"approve as string", "[ops.t]\nargv = [\"/bin/true\"]\napprove = \"yes\"\n", 3, "ops.t.approve", "want a boolean", "true or false"},
		{"ops not a table", "ops = 3\n", 1, "ops", "wrong type", "[ops.NAME]"},
		{"duplicate table", ok + "[ops.t]\n", 3, "ops.t", "already exists", "TOML syntax"},
		{"syntax error", "[ops.t\nargv = []\n", 1, "", "", "TOML syntax"},
		{"huge int", "version = 99999999999999999999\n", 1, "version", "too large", "TOML syntax"},

		// Semantic: values.
		{"version 2", "version = 2\n" + ok, 1, "version", "unsupported version 2", "version = 1"},
		{"unknown type", "[ops.t]\nargv = [\"/bin/echo\", \"{run}\"]\n[ops.t.args.run]\ntype = \"strng\"\n", 4, "ops.t.args.run.type", `unknown type "strng"`, "one of string, int, bool, enum, path"},
		{"missing type", "[ops.t]\nargv = [\"/bin/echo\", \"{run}\"]\n[ops.t.args.run]\ndescription = \"x\"\n", 3, "ops.t.args.run", "missing type", "add type"},
		{"negative timeout", "[ops.t]\nargv = [\"/bin/true\"]\ntimeout = \"-5m\"\n", 3, "ops.t.timeout", "not positive", "positive duration"},
		{"zero timeout", "[ops.t]\nargv = [\"/bin/true\"]\ntimeout = \"0s\"\n", 3, "ops.t.timeout", "not positive", "positive"},
		{"timeout too long", "[ops.t]\nargv = [\"/bin/true\"]\ntimeout = \"25h\"\n", 3, "ops.t.timeout", "too long", "24h"},
		{"bad duration", "[ops.t]\nargv = [\"/bin/true\"]\n\ntimeout = \"10 minutes\"\n", 4, "ops.t.timeout", "bad duration", "Go duration"},
		{"defaults timeout", "[defaults]\ntimeout = \"x\"\n" + ok, 2, "defaults.timeout", "bad duration", "Go duration"},
		{"missing argv", "\n\n[ops.t]\ndir = \"/\"\n", 3, "ops.t", "missing argv", "argv ="},
		{"empty argv", "[ops.t]\nargv = []\n", 2, "ops.t.argv", "empty", "name the program"},
		{"empty program", "[ops.t]\nargv = [\"\"]\n", 2, "ops.t.argv", "program (argv[0]) is empty", "name the program"},
		{"program template", "[ops.t]\nargv = [\"{cmd}\"]\n", 2, "ops.t.argv", "is a template", "fixed by the policy"},
		{"program relative", "[ops.t]\nargv = [\"./tool\"]\n", 2, "ops.t.argv", "relative path", "absolute path"},
		{"undeclared arg", "[ops.t]\nargv = [\"/bin/echo\", \"--x={nope}\"]\n", 2, "ops.t.argv", "undeclared argument {nope}", "[ops.t.args.nope]"},
		{"unmatched brace", "[ops.t]\nargv = [\"/bin/echo\", \"a}\"]\n", 2, "ops.t.argv", "unmatched }", "{{ and }}"},
		{"unclosed brace", "[ops.t]\nargv = [\"/bin/echo\", \"{run\"]\n", 2, "ops.t.argv", "unclosed {", "{{ and }}"},
		{"bad reference", "[ops.t]\nargv = [\"/bin/echo\", \"{Run}\"]\n", 2, "ops.t.argv", "bad reference {Run}", "{{ and }}"},
		{"reconcile empty", "[ops.t]\nargv = [\"/bin/true\"]\nreconcile = []\n", 3, "ops.t.reconcile", "empty", "name the program"},
		{"bad pattern", "[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"string\"\npattern = \"[a-\"\n", 5, "ops.t.args.a.pattern", "bad pattern", "RE2"},
		{"default fails pattern", "[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"string\"\npattern = \"[a-z]+\"\ndefault = \"ABC\"\n", 6, "ops.t.args.a.default", `default "ABC": does not match pattern`, "own type"},
		{"default wrong toml type", "[ops.t]\nargv = [\"/bin/echo\", \"{n}\"]\n[ops.t.args.n]\ntype = \"int\"\ndefault = \"5\"\n", 5, "ops.t.args.n.default", "want an integer, got a string", "own type"},
		{"default below min", "[ops.t]\nargv = [\"/bin/echo\", \"{n}\"]\n[ops.t.args.n]\ntype = \"int\"\nmin = 1\ndefault = 0\n", 6, "ops.t.args.n.default", "below the minimum 1", "own type"},
		{"default bool as string", "[ops.t]\nargv = [\"/bin/echo\", \"{b}\"]\n[ops.t.args.b]\ntype = \"bool\"\ndefault = \"true\"\n", 5, "ops.t.args.b.default", "want true or false, got a string", "own type"},
		{"default leading dash", "[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"string\"\ndefault = \"-rf\"\n", 5, "ops.t.args.a.default", "starts with '-'", "own type"},
		{"enum without values", "[ops.t]\nargv = [\"/bin/echo\", \"{e}\"]\n[ops.t.args.e]\ntype = \"enum\"\n", 3, "ops.t.args.e", "enum without values", "values ="},
		{"enum empty values", "[ops.t]\nargv = [\"/bin/echo\", \"{e}\"]\n[ops.t.args.e]\ntype = \"enum\"\nvalues = []\n", 3, "ops.t.args.e", "enum without values", "values ="},
		{"enum duplicate value", "[ops.t]\nargv = [\"/bin/echo\", \"{e}\"]\n[ops.t.args.e]\ntype = \"enum\"\nvalues = [\"a\", \"a\"]\n", 5, "ops.t.args.e.values", `"a" listed twice`, "once"},
		{"enum default not member", "[ops.t]\nargv = [\"/bin/echo\", \"{e}\"]\n[ops.t.args.e]\ntype = \"enum\"\nvalues = [\"a\"]\ndefault = \"b\"\n", 6, "ops.t.args.e.default", "not one of a", "own type"},
		{"concurrency negative", "[ops.t]\nargv = [\"/bin/true\"]\nconcurrency = -1\n", 3, "ops.t.concurrency", "out of range", "0 means unlimited"},
		{"dir relative", "[ops.t]\nargv = [\"/bin/true\"]\ndir = \"src/app\"\n", 3, "ops.t.dir", "not absolute", "absolute path"},
		{"dir tilde user", "[ops.t]\nargv = [\"/bin/true\"]\ndir = \"~bob/src\"\n", 3, "ops.t.dir", "~user is not supported", "only ~ and ~/"},
		{"env LD_PRELOAD", "[ops.t]\nargv = [\"/bin/true\"]\nenv = [\"PATH\", \"LD_PRELOAD\"]\n", 3, "ops.t.env", "LD_PRELOAD is not allowed", "run code"},
		{"env BASH_ENV", "[ops.t]\nargv = [\"/bin/true\"]\nenv = [\"BASH_ENV\"]\n", 3, "ops.t.env", "BASH_ENV is not allowed", "run code"},
		{"env ENV", "[defaults]\nenv = [\"ENV\"]\n" + ok, 2, "defaults.env", "ENV is not allowed", "run code"},
		{"env PROMPT_COMMAND", "[ops.t]\nargv = [\"/bin/true\"]\nenv = [\"PROMPT_COMMAND\"]\n", 3, "ops.t.env", "PROMPT_COMMAND is not allowed", "run code"},
		{"env lower case", "[ops.t]\nargv = [\"/bin/true\"]\nenv = [\"path\"]\n", 3, "ops.t.env", `invalid variable name "path"`, "[A-Z_]"},
		{"env duplicate", "[ops.t]\nargv = [\"/bin/true\"]\nenv = [\"HOME\", \"HOME\"]\n", 3, "ops.t.env", "HOME listed twice", "once"},
		{"set_env DYLD", "[ops.t]\nargv = [\"/bin/true\"]\n[ops.t.set_env]\nDYLD_INSERT_LIBRARIES = \"/x.dylib\"\n", 4, "ops.t.set_env.DYLD_INSERT_LIBRARIES", "is not allowed", "run code"},
		{"env and set_env", "[ops.t]\nargv = [\"/bin/true\"]\nenv = [\"HOME\"]\nset_env = { HOME = \"/x\" }\n", 4, "ops.t.set_env.HOME", "both passed through", "remove it"},
		{"max_output unit", "[ops.t]\nargv = [\"/bin/true\"]\nmax_output = \"4XB\"\n", 3, "ops.t.max_output", `unknown unit "XB"`, "4MiB"},
		{"max_output too big", "[ops.t]\nargv = [\"/bin/true\"]\nmax_output = \"512MiB\"\n", 3, "ops.t.max_output", "too large", "256MiB"},
		{"max_output zero", "[ops.t]\nargv = [\"/bin/true\"]\nmax_output = 0\n", 3, "ops.t.max_output", "must be positive", "positive"},
		{"max_output float", "[ops.t]\nargv = [\"/bin/true\"]\nmax_output = 1.5\n", 3, "ops.t.max_output", "got a float", "4MiB"},
		{"scope", "[ops.t]\nargv = [\"/bin/true\"]\nscope = \"admin\"\n", 3, "ops.t.scope", `unknown scope "admin"`, `"read", "write" or "execute"`},
		{"agent wildcard", ok + "[agents.a]\nops = [\"*\"]\n", 4, "agents.a.ops", `"*" is not allowed`, "by name"},
		{"agent undefined op", ok + "[agents.a]\nops = [\"t\", \"rm\"]\n", 4, "agents.a.ops", `op "rm" is not defined`, "defined ops: t"},
		{"agent duplicate op", ok + "[agents.a]\nops = [\"t\", \"t\"]\n", 4, "agents.a.ops", "listed twice", "once"},
		{"agent missing ops", ok + "[agents.a]\n", 3, "agents.a", "missing ops", "ops ="},
		{"op name uppercase", "[ops.Test]\nargv = [\"/bin/true\"]\n", 1, "ops.Test", "invalid op name", "lowercase"},
		{"agent name", ok + "[agents.\"a b\"]\nops = [\"t\"]\n", 3, `agents."a b"`, "invalid agent name", "lowercase"},
		{"arg name", "[ops.t]\nargv = [\"/bin/true\"]\n[ops.t.args.Run]\ntype = \"string\"\n", 3, "ops.t.args.Run", "invalid argument name", "[a-z]"},
		{"reserved arg name", "[ops.t]\nargv = [\"/bin/echo\", \"{agent}\"]\n[ops.t.args.agent]\ntype = \"string\"\n", 3, "ops.t.args.agent", "reserved", "request_id, agent and op"},
		{"unused arg", "[ops.t]\nargv = [\"/bin/true\"]\n[ops.t.args.a]\ntype = \"string\"\n", 3, "ops.t.args.a", `argument "a" is never used`, "{a}"},
		{"required with default", "[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"string\"\nrequired = true\ndefault = \"x\"\n", 5, "ops.t.args.a.required", "contradicts", "drop"},
		{"min above max", "[ops.t]\nargv = [\"/bin/echo\", \"{n}\"]\n[ops.t.args.n]\ntype = \"int\"\nmin = 5\nmax = 1\n", 6, "ops.t.args.n.max", "below min 5", "min must not exceed max"},
		{"pattern on int", "[ops.t]\nargv = [\"/bin/echo\", \"{n}\"]\n[ops.t.args.n]\ntype = \"int\"\npattern = \"[0-9]+\"\n", 5, "ops.t.args.n.pattern", "does not apply to type int", "applies to type string"},
		{"root on string", "[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"string\"\nroot = \"/\"\n", 5, "ops.t.args.a.root", "does not apply", "type path"},
		{"path without root", "[ops.t]\nargv = [\"/bin/echo\", \"{p}\"]\n[ops.t.args.p]\ntype = \"path\"\n", 3, "ops.t.args.p", "path without root", "root ="},
		{"path root relative", "[ops.t]\nargv = [\"/bin/echo\", \"{p}\"]\n[ops.t.args.p]\ntype = \"path\"\nroot = \"src\"\n", 5, "ops.t.args.p.root", "not absolute", "absolute"},
		{"path default escapes", "[ops.t]\nargv = [\"/bin/echo\", \"{p}\"]\n[ops.t.args.p]\ntype = \"path\"\nroot = \"/srv\"\ndefault = \"../etc\"\n", 6, "ops.t.args.p.default", "escapes the op's path root", "own type"},
		{"max_len zero", "[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"string\"\nmax_len = 0\n", 5, "ops.t.args.a.max_len", "out of range", "1..4096"},
		{"max_len huge", "[ops.t]\nargv = [\"/bin/echo\", \"{a}\"]\n[ops.t.args.a]\ntype = \"string\"\nmax_len = 5000\n", 5, "ops.t.args.a.max_len", "out of range", "1..4096"},
		// Positions from inline tables and quoted (dotted) op names.
		{"inline table", "[ops]\nt = { argv = [\"/bin/true\"],\n  timeout = \"-1s\" }\n", 3, "ops.t.timeout", "not positive", "positive"},
		{"quoted op name", "[ops.\"go.test\"]\nargv = [\"/bin/true\"]\ntimeout = \"1y\"\n", 3, `ops."go.test".timeout`, "bad duration", "Go duration"},
		{"inline table one line", "[ops]\n\nt = { argv = [\"/bin/true\"], scope = \"x\" }\n", 3, "ops.t.scope", "unknown scope", "read"},
		{"arg not a table", "[ops.t]\nargv = [\"/bin/echo\", \"{x}\"]\nargs.x = \"string\"\n", 3, "ops.t.args.x", "wrong type: got a string, want a table", "[ops.t.args.x]"},
		{"agent not a table", ok + "[agents]\na = [\"t\"]\n", 4, "agents.a", "want a table", "[agents.a]"},
		{"set_env value not string", "[ops.t]\nargv = [\"/bin/true\"]\nset_env = { A = 1 }\n", 3, "ops.t.set_env", "wrong type", "NAME = \"value\""},
		{"dotted keys", "ops.t.argv = [\"/bin/true\"]\nops.t.scope = \"x\"\n", 2, "ops.t.scope", "unknown scope", "read"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := policy.Parse("policy.toml", []byte(c.src))
			if err == nil {
				t.Fatal("parsed without error")
			}
			var pe *policy.PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v is not a *PolicyError", err, err)
			}
			if pe.File != "policy.toml" {
				t.Errorf("File = %q", pe.File)
			}
			if pe.Line != c.line {
				t.Errorf("Line = %d, want %d (%v)", pe.Line, c.line, pe)
			}
			if c.key != "" && pe.Key != c.key {
				t.Errorf("Key = %q, want %q (%v)", pe.Key, c.key, pe)
			}
			if !strings.Contains(pe.Msg, c.msg) {
				t.Errorf("Msg = %q, want it to contain %q", pe.Msg, c.msg)
			}
			if !strings.Contains(pe.Hint, c.hint) {
				t.Errorf("Hint = %q, want it to contain %q", pe.Hint, c.hint)
			}
			if !strings.HasPrefix(err.Error(), "policy.toml:") {
				t.Errorf("error %q does not start with the file name", err)
			}
		})
	}
}

func TestParseErrorFormat(t *testing.T) {
	src := "[ops.test]\nargv = [\"/bin/echo\", \"{run}\"]\n\n[ops.test.args.run]\ntype = \"strng\"\n"
	_, err := policy.Parse("policy.toml", []byte(src))
	want := `policy.toml:5: ops.test.args.run.type: unknown type "strng" (hint: did you mean "string"? one of string, int, bool, enum, path)`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

// Several problems are all reported, in line order, and the first is the one
// errors.As finds.
func TestParseMultipleErrors(t *testing.T) {
	src := "[ops.b]\nargv = [\"/bin/true\"]\nscope = \"x\"\n[ops.a]\nargv = [\"/bin/true\"]\ntimeout = \"-1s\"\n[agents.z]\nops = [\"*\"]\n"
	_, err := policy.Parse("p.toml", []byte(src))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{"p.toml:3: ops.b.scope:", "p.toml:6: ops.a.timeout:", "p.toml:8: agents.z.ops:"}
	if len(lines) != len(want) {
		t.Fatalf("got %d errors:\n%v", len(lines), err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], want[i])
		}
	}
	var pe *policy.PolicyError
	if !errors.As(err, &pe) || pe.Line != 3 {
		t.Errorf("errors.As found %v", pe)
	}
}

// Strict mode reports every unknown key, not just the first.
func TestParseUnknownKeysAllReported(t *testing.T) {
	src := "[ops.t]\nargv = [\"/bin/true\"]\nfoo = 1\nbar = 2\n"
	_, err := policy.Parse("p.toml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "p.toml:3: ops.t.foo: unknown key") || !strings.Contains(err.Error(), "p.toml:4: ops.t.bar: unknown key") {
		t.Fatalf("got %v", err)
	}
}

// Wrong types are all reported too, with the unknown keys beside them, in
// the file's order: the decoder itself stops at the first. A multi-line
// value of the wrong type is skipped whole, and the lines after it keep their
// numbers.
func TestParseTypeErrorsAllReported(t *testing.T) {
	src := "version = 1\n[ops.a]\nargv = [\"/bin/true\"]\ntimeout = 600\nconcurrency = \"2\"\n" +
		"[ops.b]\nargv = [\n  \"/bin/true\",\n  3,\n]\ndescripton = \"typo\"\nidempotent = \"yes\"\nset_env = { A = 1 }\n"
	_, err := policy.Parse("p.toml", []byte(src))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{"p.toml:4: ops.a.timeout: wrong type", "p.toml:5: ops.a.concurrency: wrong type",
		"p.toml:9: ops.b.argv: wrong type", "p.toml:11: ops.b.descripton: unknown key",
		"p.toml:12: ops.b.idempotent: wrong type", "p.toml:13: ops.b.set_env: wrong type"}
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], want[i])
		}
	}
	// A table header of the wrong type cannot be skipped (its keys would
	// move under another table): the first error is all there is.
	_, err = policy.Parse("p.toml", []byte("[version]\nx = 1\n[ops.a]\nargv = 3\n"))
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "p.toml:1: version") {
		t.Errorf("table header of the wrong type: %v", err)
	}
}

func TestParseDefaults(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	src := `
[defaults]
timeout = "3m"
max_output = "512KiB"
env = ["PATH"]
[ops.a]
argv = ["/bin/true"]
[ops.b]
argv = ["/bin/true"]
timeout = "1h"
max_output = 1000
env = []
dir = "~/x/../y"
scope = "read"
concurrency = 0
idempotent = true
approve = true
[agents.ag]
ops = ["b", "a"]
`
	p, err := policy.Parse("p.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	ctx := policy.RenderContext{Env: func(n string) (string, bool) { return "/usr/bin:/bin", n == "PATH" }}
	a, err := p.Render("ag", "a", nil, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.Timeout.String() != "3m0s" || a.MaxOutput != 512<<10 || a.Dir != home || a.Scope != "write" ||
		a.Concurrency != 1 || a.Idempotent || a.Approve || strings.Join(a.Env, ",") != "PATH=/usr/bin:/bin" {
		t.Errorf("op a got defaults %+v", a)
	}
	b, err := p.Render("ag", "b", nil, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Timeout.String() != "1h0m0s" || b.MaxOutput != 1000 || b.Dir != filepath.Join(home, "y") || b.Scope != "read" ||
		b.Concurrency != 0 || !b.Idempotent || !b.Approve || len(b.Env) != 0 {
		t.Errorf("op b got %+v", b)
	}
	if got := strings.Join(p.AgentOps("ag"), ","); got != "a,b" {
		t.Errorf("AgentOps = %s", got)
	}
	if p.AgentOps("nobody") != nil {
		t.Error("AgentOps of an unknown agent is not nil")
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{
		`"1000000"`: 1000000, `"512KiB"`: 512 << 10, `"4MiB"`: 4 << 20, `"1GiB"`: 0, `"10MB"`: 10e6,
		`"10KB"`: 10e3, `"7B"`: 7, `123`: 123, `"4 MiB"`: 0, `"4mib"`: 0, `"1.5MiB"`: 0, `"MiB"`: 0,
		`"99999999999999999999"`: 0, `"256MiB"`: 256 << 20, `"268435457"`: 0,
	} {
		src := "[ops.t]\nargv = [\"/bin/true\"]\nmax_output = " + in + "\n[agents.a]\nops = [\"t\"]\n"
		p, err := policy.Parse("p.toml", []byte(src))
		if want == 0 {
			if err == nil {
				t.Errorf("max_output = %s accepted", in)
			}
			continue
		}
		if err != nil {
			t.Errorf("max_output = %s: %v", in, err)
			continue
		}
		if got := p.Catalog()[0].MaxOutput; got != want {
			t.Errorf("max_output = %s gave %d, want %d", in, got, want)
		}
	}
}

func TestExampleFile(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	p, err := policy.Load(filepath.Join("testdata", "example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if p.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("SHA256 = %s, not the hash of the file bytes", p.SHA256)
	}
	if p.Name != filepath.Join("testdata", "example.toml") {
		t.Errorf("Name = %q", p.Name)
	}
	if got := strings.Join(p.Agents(), ","); got != "cloud-1,release-bot" {
		t.Errorf("Agents = %s", got)
	}
	// Every key of the schema appears in the example, so the example documents
	// them all.
	for _, k := range []string{"version", "[defaults]", "timeout", "max_output", "env", "argv", "dir", "set_env",
		"idempotent", "approve", "concurrency", "description", "scope", "reconcile", "type", "required", "default",
		"pattern", "max_len", "allow_dash", "allow_at", "allow_plus", "max_stdin", "min", "max", "values", "root", "must_exist", "[agents.", "ops",
		"cpu", "memory", "open_files", "processes", "max_concurrent", "max_runs_per_hour", "max_cpu_seconds_per_day",
		"[redact]", "enabled", "patterns", "stdin", "stdin_hint", "risk", "dry_run", "undo"} {
		if !strings.Contains(string(data), "\n"+k) && !strings.Contains(string(data), "\n"+k+" ") {
			t.Errorf("example.toml does not show key %q", k)
		}
	}
	// Changing one byte changes the hash.
	p2, err := policy.Parse("x", append(data, '\n'))
	if err != nil {
		t.Fatal(err)
	}
	if p2.SHA256 == p.SHA256 {
		t.Error("hash ignores trailing bytes")
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	good := []byte(ok)

	ww := filepath.Join(dir, "ww.toml")
	if err := os.WriteFile(ww, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ww, 0o602); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(ww); err == nil || !strings.Contains(err.Error(), "writable by group or others (mode 602)") ||
		!strings.Contains(err.Error(), "chmod 600 "+ww) {
		t.Errorf("world-writable: %v", err)
	}
	if _, err := policy.Load(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, append(good, make([]byte, 1<<20)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(big); err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Errorf("big: %v", err)
	}
	if _, err := policy.Load(filepath.Join(dir, "missing.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	fine := filepath.Join(dir, "fine.toml")
	if err := os.WriteFile(fine, good, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(fine); err != nil {
		t.Errorf("fine: %v", err)
	}
}

// A policy that group members can write, or that sits in a directory they
// (or anyone) can write, is refused with the chmod that fixes it: whoever
// can change or replace the file decides what agents may run.
func TestLoadRefusesGroupWritable(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Unix mode bits")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(path, []byte(ok), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(path); err != nil {
		t.Fatalf("0600 in a 0700 directory: %v", err)
	}
	if err := os.Chmod(path, 0o620); err != nil {
		t.Fatal(err)
	}
	_, err := policy.Load(path)
	var pe *policy.PolicyError
	if !errors.As(err, &pe) || pe.Msg != "writable by group or others (mode 620)" || !strings.HasPrefix(pe.Hint, "chmod 600 "+path) {
		t.Errorf("group-writable file: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o770, 0o777, 0o1777} {
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		_, err := policy.Load(path)
		if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "its directory "+dir+" is writable by group or others") || !strings.HasPrefix(pe.Hint, "chmod 700 "+dir) {
			t.Errorf("directory mode %o: %v", mode, err)
		}
	}
	// Readable by the group is fine: it cannot change what runs.
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(path); err != nil {
		t.Errorf("0640 in a 0750 directory: %v", err)
	}
}

func TestParseHomeExpansion(t *testing.T) {
	src := "[ops.t]\nargv = [\"/bin/true\"]\ndir = \"~/src\"\n"
	t.Setenv("HOME", "")
	_, err := policy.Parse("p.toml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "p.toml:3: ops.t.dir: cannot expand ~: no home directory") {
		t.Errorf("no HOME: %v", err)
	}
	t.Setenv("HOME", "relative/home")
	if _, err := policy.Parse("p.toml", []byte(src)); err == nil {
		t.Error("relative HOME accepted")
	}
	// Absolute paths need no home at all.
	if _, err := policy.Parse("p.toml", []byte("[ops.t]\nargv = [\"/bin/true\"]\ndir = \"/srv\"\n")); err != nil {
		t.Error(err)
	}
}

func TestLoadErrorNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.toml")
	src := ok + "description = \"" + strings.Repeat("x", 5000) + "\"\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := policy.Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":3: ops.t.description: too long") {
		t.Errorf("got %v", err)
	}
}

// A policy linked from a directory others may write is refused like one
// kept there: whoever can replace the target decides what runs, and serve
// reloads it live. So is a policy owned by another user.
func TestLoadChecksALinkedPolicysTarget(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("mode bits and links: Unix")
	}
	base := t.TempDir()
	shared := filepath.Join(base, "shared")
	home := filepath.Join(base, "home")
	for _, d := range []string{shared, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	src := "[ops.a]\nargv = [\"/bin/true\"]\n[agents.x]\nops = [\"a\"]\n"
	target := filepath.Join(shared, "policy.toml")
	if err := os.WriteFile(target, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(home, "policy.toml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(link); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("a policy linked into a world-writable directory: %v", err)
	}
	if err := os.Chmod(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(link); err != nil {
		t.Fatalf("a policy linked from a private directory: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(target, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := policy.Load(link); err == nil || !strings.Contains(err.Error(), "owned by another user") {
			t.Fatalf("a policy owned by another user: %v", err)
		}
	}
}

// A chain of links is checked link by link: a link in a directory others
// may write can be pointed elsewhere, even when the first and the last
// directories are private.
func TestLoadChecksEveryLinkOfAChain(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("mode bits and links: Unix")
	}
	base := t.TempDir()
	safe, shared, home := filepath.Join(base, "safe"), filepath.Join(base, "shared"), filepath.Join(base, "home")
	for _, d := range []string{safe, shared, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(safe, "policy.toml")
	if err := os.WriteFile(target, []byte("[ops.a]\nargv = [\"/bin/true\"]\n[agents.x]\nops = [\"a\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	middle := filepath.Join(shared, "link2")
	if err := os.Symlink(target, middle); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(home, "policy.toml")
	if err := os.Symlink(middle, link); err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Load(link); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("a chain through a world-writable directory: %v", err)
	}
}
