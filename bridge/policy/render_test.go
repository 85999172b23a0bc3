package policy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge/policy"
)

// fixture is a temporary host: a bin directory with programs, a path root with
// files and symlinks, and a directory outside the root.
type fixture struct {
	bin, root, outside string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	base := t.TempDir()
	f := fixture{bin: filepath.Join(base, "bin"), root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{f.bin, f.root, f.outside, filepath.Join(f.root, "sub", "deep")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{filepath.Join(f.bin, "tool"), filepath.Join(f.bin, "other")} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A non-executable file of the same name earlier in PATH must be skipped.
	if err := os.WriteFile(filepath.Join(f.outside, "tool"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(f.root, "file.txt"), filepath.Join(f.outside, "secret")} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"escape":   f.outside,                          // a directory outside the root
		"escfile":  filepath.Join(f.outside, "secret"), // a file outside the root
		"dangling": filepath.Join(f.outside, "nope"),   // creating through it lands outside
		"inside":   filepath.Join(f.root, "sub"),       // stays inside: fine
		"relup":    "../outside",                       // relative escape
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(f.root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f fixture) ctx() policy.RenderContext {
	return policy.RenderContext{
		Env:  func(n string) (string, bool) { return f.outside + string(os.PathListSeparator) + f.bin, n == "PATH" },
		Vars: map[string]string{"request_id": "r-123"},
	}
}

func (f fixture) policy(t *testing.T) *policy.Policy {
	t.Helper()
	src := fmt.Sprintf(`
[ops.run]
argv = ["tool", "--name={name}", "{free}", "-n", "{count}", "--flag={flag}", "{mode}", "--", "{file}", "{{lit}}", "id={request_id}", "{agent}/{op}"]
reconcile = ["%[1]s/other", "status", "{request_id}", "{mode}"]
dir = %[2]q
[ops.run.args.name]
type = "string"
pattern = "[A-Za-z0-9_./-]+"
max_len = 16
[ops.run.args.free]
type = "string"
required = false
max_len = 32
[ops.run.args.count]
type = "int"
min = 1
max = 100
default = 10
[ops.run.args.flag]
type = "bool"
default = false
[ops.run.args.mode]
type = "enum"
values = ["debug", "release"]
default = "debug"
[ops.run.args.file]
type = "path"
root = %[2]q
default = "."
[ops.opt]
argv = ["tool", "{dash}", "x{neg}", "{must}"]
[ops.opt.args.dash]
type = "string"
allow_dash = true
required = false
[ops.opt.args.neg]
type = "int"
min = -5
required = false
[ops.opt.args.must]
type = "path"
root = %[2]q
must_exist = true
required = false
[ops.secret]
argv = ["/bin/sh", "-c", "exit 0"]
[agents.ag]
ops = ["run", "opt"]
[agents.other]
ops = []
`, f.bin, f.root)
	p, err := policy.Parse("test.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRender(t *testing.T) {
	f := newFixture(t)
	p := f.policy(t)
	inv, err := p.Render("ag", "run", map[string]string{"name": "a.b-c", "free": "$(id); `x` |&>", "file": "sub/../file.txt"}, f.ctx())
	if err != nil {
		t.Fatal(err)
	}
	realRoot, _ := filepath.EvalSymlinks(f.root)
	want := []string{filepath.Join(f.bin, "tool"), "--name=a.b-c", "$(id); `x` |&>", "-n", "10", "--flag=false", "debug", "--",
		filepath.Join(realRoot, "file.txt"), "{lit}", "id=r-123", "ag/run"}
	if !reflect.DeepEqual(inv.Argv, want) {
		t.Errorf("Argv =\n%q\nwant\n%q", inv.Argv, want)
	}
	if want := []string{filepath.Join(f.bin, "other"), "status", "r-123", "debug"}; !reflect.DeepEqual(inv.Reconcile, want) {
		t.Errorf("Reconcile = %q", inv.Reconcile)
	}
	wantArgs := map[string]string{"name": "a.b-c", "free": "$(id); `x` |&>", "count": "10", "flag": "false", "mode": "debug", "file": filepath.Join(realRoot, "file.txt")}
	if !reflect.DeepEqual(inv.Args, wantArgs) {
		t.Errorf("Args = %v", inv.Args)
	}
	if inv.Dir != f.root || inv.Op != "run" || inv.Timeout.String() != "10m0s" || inv.MaxOutput != 4<<20 || inv.Scope != "write" || inv.Concurrency != 1 {
		t.Errorf("invocation %+v", inv)
	}
	if len(inv.Env) != 0 {
		t.Errorf("Env = %q, want empty: the op lists no env", inv.Env)
	}

	// Omitted optional arguments drop their whole element; given ones land
	// inside exactly one element.
	inv, err = p.Render("ag", "opt", nil, f.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(f.bin, "tool")}; !reflect.DeepEqual(inv.Argv, want) {
		t.Errorf("all omitted: Argv = %q", inv.Argv)
	}
	inv, err = p.Render("ag", "opt", map[string]string{"dash": "-v x", "neg": "-5", "must": "file.txt"}, f.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(f.bin, "tool"), "-v x", "x-5", filepath.Join(realRoot, "file.txt")}; !reflect.DeepEqual(inv.Argv, want) {
		t.Errorf("given: Argv = %q", inv.Argv)
	}
}

func TestRenderSymlinkInsideRoot(t *testing.T) {
	f := newFixture(t)
	p := f.policy(t)
	realRoot, _ := filepath.EvalSymlinks(f.root)
	for in, want := range map[string]string{
		"inside/deep":             filepath.Join(realRoot, "sub", "deep"),
		"inside/new/file":         filepath.Join(realRoot, "sub", "new", "file"),
		".":                       realRoot,
		f.root + "/sub":           filepath.Join(realRoot, "sub"),
		"not/yet/there.txt":       filepath.Join(realRoot, "not", "yet", "there.txt"),
		"sub//deep/./":            filepath.Join(realRoot, "sub", "deep"),
		"sub/deep/../../file.txt": filepath.Join(realRoot, "file.txt"),
	} {
		inv, err := p.Render("ag", "run", map[string]string{"name": "x", "file": in}, f.ctx())
		if err != nil {
			t.Errorf("file=%q: %v", in, err)
			continue
		}
		if got := inv.Args["file"]; got != want {
			t.Errorf("file=%q rendered %q, want %q", in, got, want)
		}
	}
}

func TestAllowed(t *testing.T) {
	f := newFixture(t)
	p := f.policy(t)
	cases := []struct {
		agent, op string
		want      error
		msg       string
	}{
		{"ag", "run", nil, ""},
		{"nobody", "run", policy.ErrNotAllowed, `agent "nobody" is not in the policy`},
		{"nobody", "nonexistent", policy.ErrNotAllowed, `agent "nobody" is not in the policy`},
		{"ag", "rm", policy.ErrUnknownOp, `"rm"`},
		{"ag", "secret", policy.ErrNotAllowed, `op "secret" not allowed for agent "ag"`},
		{"other", "run", policy.ErrNotAllowed, `op "run" not allowed for agent "other"`},
	}
	for _, c := range cases {
		err := p.Allowed(c.agent, c.op)
		if c.want == nil {
			if err != nil {
				t.Errorf("Allowed(%s, %s) = %v", c.agent, c.op, err)
			}
			continue
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Allowed(%s, %s) = %v, want %v containing %q", c.agent, c.op, err, c.want, c.msg)
		}
		// Render refuses the same way before looking at arguments.
		if _, err := p.Render(c.agent, c.op, map[string]string{"name": "x"}, f.ctx()); !errors.Is(err, c.want) {
			t.Errorf("Render(%s, %s) = %v, want %v", c.agent, c.op, err, c.want)
		}
	}
}

// TestInjection feeds hostile values to every argument type; each must be
// refused with ErrInvalidArg and a specific reason, and nothing rendered.
func TestInjection(t *testing.T) {
	f := newFixture(t)
	p := f.policy(t)
	cases := []struct {
		name, arg, value, reason string
	}{
		{"dash option", "name", "-x", "starts with '-'"},
		{"upload-pack", "name", "--upload-pack=evil", "starts with '-'"},
		{"dash in free string", "free", "--exec=sh", "starts with '-'"},
		{"command substitution", "name", "$(id)", "does not match pattern"},
		{"backticks", "name", "`id`", "does not match pattern"},
		{"semicolon", "name", ";rm -rf", "does not match pattern"},
		{"space", "name", "a b", "does not match pattern"},
		{"NUL", "free", "a\x00b", "contains NUL"},
		{"newline", "free", "a\nb", "contains a line break"},
		{"carriage return", "free", "a\rb", "contains a line break"},
		{"escape", "free", "\x1b[2J", "contains a control character"},
		{"C1 control", "free", "a\u0085b", "contains a control character"},
		{"bidi override", "free", "a\u202eb", "bidirectional"},
		{"invalid utf8", "free", "a\xffb", "not valid UTF-8"},
		{"overlong pattern arg", "name", strings.Repeat("a", 17), "longer than 16 bytes"},
		{"overlong free", "free", strings.Repeat("a", 33), "longer than 32 bytes"},
		{"path dotdot", "file", "../..", "escapes the op's path root"},
		{"path dotdot inside", "file", "sub/../../outside/secret", "escapes the op's path root"},
		{"path absolute outside", "file", "/etc/passwd", "escapes the op's path root"},
		{"path prefix sibling", "file", f.root + "x/y", "escapes the op's path root"},
		{"path symlink dir escape", "file", "escape/secret", "escapes the op's path root through a symlink"},
		{"path symlink file escape", "file", "escfile", "escapes the op's path root through a symlink"},
		{"path relative symlink escape", "file", "relup/secret", "escapes the op's path root through a symlink"},
		{"path dangling symlink", "file", "dangling", "dangling or looping symlink"},
		{"path through file", "file", "file.txt/x", "not a directory"},
		{"path NUL", "file", "a\x00b", "contains NUL"},
		{"path newline", "file", "a\nb", "contains a line break"},
		{"path empty", "file", "", "empty path"},
		{"int leading zeros", "count", "007", "not a canonical decimal integer"},
		{"int plus", "count", "+1", "not a canonical decimal integer"},
		{"int exponent", "count", "1e3", "not a canonical decimal integer"},
		{"int leading space", "count", " 1", "not a canonical decimal integer"},
		{"int trailing space", "count", "1 ", "not a canonical decimal integer"},
		{"int hex", "count", "0x10", "not a canonical decimal integer"},
		{"int underscore", "count", "1_0", "not a canonical decimal integer"},
		{"int empty", "count", "", "not a canonical decimal integer"},
		{"int minus zero", "count", "-0", "not a canonical decimal integer"},
		{"int overflow", "count", "99999999999999999999", "out of the 64-bit integer range"},
		{"int below min", "count", "0", "below the minimum 1"},
		{"int above max", "count", "101", "above the maximum 100"},
		{"bool upper", "flag", "TRUE", "want true or false"},
		{"bool title", "flag", "True", "want true or false"},
		{"bool one", "flag", "1", "want true or false"},
		{"bool yes", "flag", "yes", "want true or false"},
		{"enum case", "mode", "Debug", "not one of debug, release"},
		{"enum upper", "mode", "RELEASE", "not one of debug, release"},
		{"enum space", "mode", "debug ", "not one of debug, release"},
		{"enum prefix", "mode", "deb", "not one of debug, release"},
		{"unknown argument", "evil", "x", "unknown argument; this op takes: count, file, flag, free, mode, name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := map[string]string{"name": "ok", c.arg: c.value}
			inv, err := p.Render("ag", "run", args, f.ctx())
			if err == nil {
				t.Fatalf("accepted; argv %q", inv.Argv)
			}
			if inv != nil {
				t.Error("an invocation came back with an error")
			}
			if !errors.Is(err, policy.ErrInvalidArg) {
				t.Fatalf("error %v does not wrap ErrInvalidArg", err)
			}
			var ae *policy.ArgError
			if !errors.As(err, &ae) || ae.Arg != c.arg || ae.Op != "run" {
				t.Fatalf("error %v is not an ArgError for %s", err, c.arg)
			}
			if !strings.Contains(ae.Reason, c.reason) {
				t.Errorf("reason %q, want %q", ae.Reason, c.reason)
			}
			if rest := strings.Replace(err.Error(), ae.Reason, "", 1); c.value != "" && strings.Contains(rest, c.value) {
				t.Errorf("error echoes the hostile value: %v", err)
			}
		})
	}
	// Other request faults.
	if _, err := p.Render("ag", "run", nil, f.ctx()); !errors.Is(err, policy.ErrInvalidArg) || !strings.Contains(err.Error(), `"name": missing required argument`) {
		t.Errorf("missing required: %v", err)
	}
	if _, err := p.Render("ag", "opt", map[string]string{"neg": "-6"}, f.ctx()); !errors.Is(err, policy.ErrInvalidArg) || !strings.Contains(err.Error(), "below the minimum -5") {
		t.Errorf("explicit negative min: %v", err)
	}
	if _, err := p.Render("ag", "opt", map[string]string{"must": "nope.txt"}, f.ctx()); !errors.Is(err, policy.ErrInvalidArg) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("must_exist: %v", err)
	}
	if _, err := p.Render("ag", "opt", map[string]string{"must": "escape/secret"}, f.ctx()); !errors.Is(err, policy.ErrInvalidArg) || !strings.Contains(err.Error(), "through a symlink") {
		t.Errorf("must_exist through symlink: %v", err)
	}
}

// Render passes exactly the named variables found in the daemon's
// environment plus set_env, and asks the environment for nothing else.
func TestRenderEnvOnlyNamed(t *testing.T) {
	f := newFixture(t)
	src := fmt.Sprintf(`
[defaults]
env = ["PATH", "TERM"]
[ops.e]
argv = [%q]
env = ["HOME", "MISSING", "GOCACHE"]
set_env = { LANG = "C.UTF-8", GOFLAGS = "-mod=mod" }
[ops.d]
argv = [%q]
[agents.a]
ops = ["e", "d"]
`, filepath.Join(f.bin, "tool"), filepath.Join(f.bin, "tool"))
	p, err := policy.Parse("env.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	daemon := map[string]string{
		"PATH": "/usr/bin", "HOME": "/home/u", "GOCACHE": "/c", "TERM": "xterm",
		"SECRET_TOKEN": "s3cr3t", "LD_PRELOAD": "/evil.so", "BASH_ENV": "/evil.sh",
	}
	var asked []string
	ctx := policy.RenderContext{Env: func(n string) (string, bool) {
		asked = append(asked, n)
		v, ok := daemon[n]
		return v, ok
	}}
	inv, err := p.Render("a", "e", nil, ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"GOCACHE=/c", "GOFLAGS=-mod=mod", "HOME=/home/u", "LANG=C.UTF-8"}
	if !reflect.DeepEqual(inv.Env, want) {
		t.Errorf("Env = %q, want %q", inv.Env, want)
	}
	if got := strings.Join(asked, ","); got != "GOCACHE,HOME,MISSING" {
		t.Errorf("asked the environment for %s", got)
	}
	// The op without env gets the defaults list.
	asked = nil
	inv, err = p.Render("a", "d", nil, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/usr/bin", "TERM=xterm"}; !reflect.DeepEqual(inv.Env, want) {
		t.Errorf("defaults Env = %q", inv.Env)
	}
	// A nil lookup means an empty environment.
	inv, err = p.Render("a", "e", nil, policy.RenderContext{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"GOFLAGS=-mod=mod", "LANG=C.UTF-8"}; !reflect.DeepEqual(inv.Env, want) {
		t.Errorf("nil Env: %q", inv.Env)
	}
	s := inv.String()
	if strings.Contains(s, "C.UTF-8") || !strings.Contains(s, "GOFLAGS LANG") {
		t.Errorf("String() shows env values or misses names:\n%s", s)
	}
}

func TestRenderProgramLookup(t *testing.T) {
	f := newFixture(t)
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`
[ops.bare]
argv = ["tool"]
[ops.pinned]
argv = ["tool"]
set_env = { PATH = %q }
[ops.abs]
argv = [%q]
[ops.missing]
argv = ["no-such-tool-here"]
[ops.noexec]
argv = [%q]
[ops.var]
argv = ["tool", "{request_id}"]
[agents.a]
ops = ["bare", "pinned", "abs", "missing", "noexec", "var"]
`, other, filepath.Join(f.bin, "other"), filepath.Join(f.outside, "tool"))
	p, err := policy.Parse("p.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for op, want := range map[string]string{
		"bare":   filepath.Join(f.bin, "tool"), // the non-executable f.outside/tool earlier in PATH is skipped
		"pinned": filepath.Join(other, "tool"), // set_env PATH wins over the daemon's
		"abs":    filepath.Join(f.bin, "other"),
	} {
		inv, err := p.Render("a", op, nil, f.ctx())
		if err != nil {
			t.Errorf("%s: %v", op, err)
			continue
		}
		if inv.Argv[0] != want {
			t.Errorf("%s: argv[0] = %q, want %q", op, inv.Argv[0], want)
		}
	}
	for _, op := range []string{"missing", "noexec"} {
		_, err := p.Render("a", op, nil, f.ctx())
		if err == nil || errors.Is(err, policy.ErrInvalidArg) || errors.Is(err, policy.ErrNotAllowed) {
			t.Errorf("%s: %v, want a host error", op, err)
		}
	}
	// A relative PATH entry never resolves a program, even when the file is
	// there: "." would let the working directory pick the program.
	rel := policy.RenderContext{Env: func(n string) (string, bool) { return ".", n == "PATH" }}
	t.Chdir(f.bin)
	if _, err := p.Render("a", "bare", nil, rel); err == nil {
		t.Error("relative PATH entry resolved a program")
	}
	// Reserved variables: request_id must be supplied when used; others may
	// not be supplied at all.
	if _, err := p.Render("a", "var", nil, policy.RenderContext{Env: f.ctx().Env}); err == nil || !strings.Contains(err.Error(), `"request_id" was not supplied`) {
		t.Errorf("missing request_id: %v", err)
	}
	for _, vars := range []map[string]string{{"agent": "root"}, {"op": "x"}, {"foo": "x"}, {"request_id": "a\nb"}} {
		ctx := f.ctx()
		ctx.Vars = vars
		if _, err := p.Render("a", "var", nil, ctx); err == nil {
			t.Errorf("Vars %v accepted", vars)
		}
	}
}

func TestRenderPathRootMissing(t *testing.T) {
	f := newFixture(t)
	src := fmt.Sprintf("[ops.p]\nargv = [%q, \"{f}\"]\n[ops.p.args.f]\ntype = \"path\"\nroot = %q\n[agents.a]\nops = [\"p\"]\n",
		filepath.Join(f.bin, "tool"), filepath.Join(f.root, "gone"))
	p, err := policy.Parse("p.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Render("a", "p", map[string]string{"f": "x"}, f.ctx())
	if err == nil || errors.Is(err, policy.ErrInvalidArg) {
		t.Errorf("missing root: %v, want a host error", err)
	}
}

func TestCatalog(t *testing.T) {
	f := newFixture(t)
	p := f.policy(t)
	cat := p.Catalog()
	var names []string
	for _, o := range cat {
		names = append(names, o.Name)
	}
	if strings.Join(names, ",") != "opt,run,secret" {
		t.Errorf("ops %v", names)
	}
	run := cat[1]
	var args []string
	for _, a := range run.Args {
		args = append(args, a.Name+":"+a.Type)
	}
	if got := strings.Join(args, ","); got != "count:int,file:path,flag:bool,free:string,mode:enum,name:string" {
		t.Errorf("args %s", got)
	}
	js, err := json.Marshal(cat)
	if err != nil {
		t.Fatal(err)
	}
	// Host secrets stay out: argv, dir, env, roots, program paths.
	for _, secret := range []string{f.root, f.bin, "tool", "/bin/sh", "argv", "\"dir\"", "\"env\"", "root"} {
		if strings.Contains(string(js), secret) {
			t.Errorf("catalog JSON contains %q:\n%s", secret, js)
		}
	}
	for _, public := range []string{`"name":"name","type":"string","required":true,"pattern":"[A-Za-z0-9_./-]+","max_len":16`,
		`"name":"count","type":"int","required":false,"default":"10","min":1,"max":100`,
		`"values":["debug","release"]`, `"name":"file","type":"path","required":false,"default":"."`} {
		if !strings.Contains(string(js), public) {
			t.Errorf("catalog JSON lacks %s:\n%s", public, js)
		}
	}
	js2, _ := json.Marshal(f.policy(t).Catalog())
	if string(js) != string(js2) {
		t.Error("catalog is not deterministic")
	}
}

func TestExplain(t *testing.T) {
	f := newFixture(t)
	p := f.policy(t)
	s, err := p.Explain("run")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"--name={name}"`, `"{{lit}}"`, "agents:      ag\n", "arg mode:", "values=debug,release", "root=" + f.root} {
		if !strings.Contains(s, want) {
			t.Errorf("Explain lacks %q:\n%s", want, s)
		}
	}
	if _, err := p.Explain("nope"); !errors.Is(err, policy.ErrUnknownOp) {
		t.Errorf("Explain(nope) = %v", err)
	}
	inv, err := p.Render("ag", "run", map[string]string{"name": "x", "free": "it's"}, f.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if s := inv.String(); !strings.Contains(s, `'it'\''s'`) || !strings.Contains(s, "'{lit}'") {
		t.Errorf("Invocation.String quoting:\n%s", s)
	}
}

// A program named by its bare name is never taken from a PATH directory
// another user can write, nor from a program file they can change: one
// planted in a world-writable PATH entry ran as the daemon's user (issue
// 26, the third red team). A safe one later in PATH is taken instead;
// with none, the error names what was passed over and why.
func TestRenderProgramLookupSkipsOthersDirectories(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Unix modes")
	}
	open := t.TempDir() // world-writable, as /tmp or a careless ~/bin
	safe := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{open, safe} {
		if err := os.WriteFile(filepath.Join(d, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(open, "planted"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(safe, "loose")
	if err := os.WriteFile(loose, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o757); err != nil { // others may rewrite it
		t.Fatal(err)
	}
	src := fmt.Sprintf(`
[ops.tool]
argv = ["tool"]
set_env = { PATH = %q }
[ops.planted]
argv = ["planted"]
set_env = { PATH = %q }
[ops.loose]
argv = ["loose"]
set_env = { PATH = %q }
[ops.absloose]
argv = [%q]
[ops.absopen]
argv = [%q]
[agents.a]
ops = ["tool", "planted", "loose", "absloose", "absopen"]
`, open+":"+safe, open+":"+safe, safe, loose, filepath.Join(open, "planted"))
	p, err := policy.Parse("p.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	if inv, err := p.Render("a", "tool", nil, f.ctx()); err != nil || inv.Argv[0] != filepath.Join(safe, "tool") {
		t.Errorf("tool: %v, %v; want %s (the world-writable directory's passed over)", inv, err, filepath.Join(safe, "tool"))
	}
	for op, wants := range map[string][]string{
		"planted":  {"its directory is writable by group or others", "if " + open + " is yours, `chmod go-w " + open + "`"},
		"loose":    {"the program file is writable by group or others", "`chmod go-w " + loose + "`"},
		"absloose": {"the program file is writable by group or others", "`chmod go-w " + loose + "`"},
		"absopen":  {"its directory is writable by group or others"}, // named by its path, still swapped by whoever writes there
	} {
		_, err := p.Render("a", op, nil, f.ctx())
		for _, want := range wants {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v; want an error saying %q", op, err, want)
			}
		}
	}
	// policy check says so before any request comes, and also when a safe
	// program was found after one it passed over (a different program
	// from the one the author may have meant runs).
	w := strings.Join(p.Warnings(), "\n")
	for _, want := range []string{
		`op "planted": argv[0]: program "planted" is found only where another user could have put or changed it`,
		`op "tool": argv[0] runs ` + filepath.Join(safe, "tool") + `; passed over, as another user could have put or changed them: ` + filepath.Join(open, "tool"),
	} {
		if !strings.Contains(w, want) {
			t.Errorf("policy warnings do not say %q:\n%s", want, w)
		}
	}
}

// Every directory on the way to the program counts, on the path as named
// and on the one its links resolve to: a PATH entry that is safe itself
// but sits in a directory others may write, a link in a safe directory
// into one others may write, and an absolute program in one were all
// taken, and could be swapped before the exec (issue 26, the red team of
// the PATH fix).
func TestRenderProgramLookupChecksEveryDirectoryOnTheWay(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("Unix modes")
	}
	base := t.TempDir()
	open := filepath.Join(base, "open")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(open, 0o755))
	must(os.Chmod(open, 0o777)) // not sticky
	bin := filepath.Join(open, "bin")
	must(os.Mkdir(bin, 0o755))
	must(os.WriteFile(filepath.Join(bin, "tool"), []byte("#!/bin/sh\n"), 0o755))
	safe := filepath.Join(base, "safe")
	must(os.Mkdir(safe, 0o755))
	must(os.WriteFile(filepath.Join(open, "real-tool2"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Symlink(filepath.Join(open, "real-tool2"), filepath.Join(safe, "tool2")))
	must(os.WriteFile(filepath.Join(open, "tool3"), []byte("#!/bin/sh\n"), 0o755))
	// A sticky world-writable directory on the way is fine when what is in
	// it is ours and closed (as a home under /tmp).
	sticky := filepath.Join(base, "sticky")
	must(os.Mkdir(sticky, 0o755))
	must(os.Chmod(sticky, 0o777|os.ModeSticky))
	mine := filepath.Join(sticky, "mine")
	must(os.Mkdir(mine, 0o755))
	must(os.WriteFile(filepath.Join(mine, "tool4"), []byte("#!/bin/sh\n"), 0o755))
	p, err := policy.Parse("p.toml", []byte(fmt.Sprintf(`
[ops.a]
argv = ["tool"]
set_env = { PATH = %q }
[ops.b]
argv = ["tool2"]
set_env = { PATH = %q }
[ops.c]
argv = [%q]
[ops.d]
argv = ["tool4"]
set_env = { PATH = %q }
[agents.ag]
ops = ["a", "b", "c", "d"]
`, bin, safe, filepath.Join(open, "tool3"), mine)))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	for _, op := range []string{"a", "b", "c"} {
		if inv, err := p.Render("ag", op, nil, f.ctx()); err == nil {
			t.Errorf("op %s: program %s accepted", op, inv.Argv[0])
		} else if !strings.Contains(err.Error(), "group or others") {
			t.Errorf("op %s: %v; want the directory others may write named", op, err)
		}
	}
	if inv, err := p.Render("ag", "d", nil, f.ctx()); err != nil || inv.Argv[0] != filepath.Join(mine, "tool4") {
		t.Errorf("op d (under a sticky directory, in one of ours): %v, %v", inv, err)
	}
}

// What a human approves is one line per field: a value holding a line
// break (a path argument's resolved target may hold any) is written with
// escapes, so it cannot add a line such as a forged "stdin:" one (the red
// team of 8612227).
func TestInvocationStringKeepsEachValueOnItsLine(t *testing.T) {
	forged := "notes.txt'\nstdin: 6 bytes, sha256 " + strings.Repeat("ab", 32) + "\nscope: read\nx"
	inv := &policy.Invocation{Op: "show", Argv: []string{"/bin/cat", "/srv/" + forged}, Dir: "/srv/\x1b[2J", Args: map[string]string{"file": forged},
		Stdin: "none", Scope: "write"}
	text := inv.String()
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasPrefix(line, "stdin: 6") || strings.HasPrefix(line, "scope: read") || strings.ContainsRune(line, '\x1b') {
			t.Errorf("a value made a line of its own: %q\n%s", line, text)
		}
	}
	if n := strings.Count(text, "\n"); n != 13 {
		t.Errorf("%d lines, want 13:\n%s", n, text)
	}
}

// A value the approval text escapes is written as bash reads it back: the
// same bytes, not a decoy path (the red team of 5da3cff: Go's "x\ny" names
// another file in a shell).
func TestInvocationStringQuotesAsTheShellReads(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	for _, v := range []string{"x\ny", "it's\t\x1b[2J\u202e", "a\\nb", "\xff\xfe", "plain"} {
		inv := &policy.Invocation{Op: "o", Argv: []string{"/bin/echo", v}}
		line := strings.SplitN(inv.String(), "\n", 3)[1] // "argv:        /bin/echo WORD"
		word := strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(line, "argv:")), "/bin/echo ")
		out, err := exec.Command(bash, "-c", "printf %s "+word).Output()
		if err != nil || string(out) != v {
			t.Errorf("%q shown as %s, which bash reads as %q (%v)", v, word, out, err)
		}
	}
}

// Characters Go calls printable but that show as nothing are escaped in
// what a human approves (the red team of 887f99e: "main\u034f" read as
// "main").
func TestInvocationStringShowsInvisiblePrintables(t *testing.T) {
	for _, v := range []string{"main\u034f", "a\ufe0fb", "x\u3164", "\u2800", "\u0301start"} {
		inv := &policy.Invocation{Op: "o", Argv: []string{"/bin/echo", v}}
		line := strings.SplitN(inv.String(), "\n", 3)[1]
		if !strings.Contains(line, "$'") || strings.Contains(line, v) {
			t.Errorf("%q shown as %s", v, line)
		}
	}
}

// policy check warns of an op whose working directory is missing or not a
// directory (issue 27's friction: it passed silently, and every request
// then failed to start).
func TestWarningsNameAMissingDir(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("p.toml", []byte(fmt.Sprintf("[ops.a]\nargv = [\"/bin/true\"]\ndir = %q\n[ops.b]\nargv = [\"/bin/true\"]\ndir = %q\n[ops.c]\nargv = [\"/bin/true\"]\ndir = %q\n[agents.x]\nops = [\"a\", \"b\", \"c\"]\n",
		filepath.Join(base, "missing"), file, base)))
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(p.Warnings(), "\n")
	if !strings.Contains(w, `op "a": its dir `+filepath.Join(base, "missing")+" does not exist here") || !strings.Contains(w, `op "b": its dir `+file+" is not a directory") || strings.Contains(w, `op "c": its dir`) {
		t.Errorf("warnings:\n%s", w)
	}
}
