package policy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge/policy"
)

// The stdin, risk, dry_run and undo keys (issue 17): what they load to,
// what the catalog says, and what they refuse.
func TestStdinModes(t *testing.T) {
	p, err := policy.Parse("p.toml", []byte(`
[ops.apply]
argv = ["/bin/true"]
stdin = "required"
stdin_hint = "unified diff"
dry_run = "check"
undo = "restore"
[ops.check]
argv = ["/bin/true"]
scope = "read"
[ops.restore]
argv = ["/bin/true"]
stdin = "none"
[ops.quiet]
argv = ["/bin/true"]
max_stdin = 0
[ops.plain]
argv = ["/bin/true"]
[agents.a]
ops = ["apply", "restore", "quiet", "plain"]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{ // mode, the catalog's stdin field
		"apply": {"required", "required"}, "check": {"optional", ""}, "restore": {"none", "none"},
		"quiet": {"none", ""}, "plain": {"optional", ""},
	}
	for _, info := range p.Catalog() {
		if got := [2]string{info.StdinMode(), info.Stdin}; got != want[info.Name] {
			t.Errorf("%s: mode, field = %q, want %q", info.Name, got, want[info.Name])
		}
		if info.Name == "restore" && info.MaxStdin != 0 {
			t.Errorf("restore: stdin none, max_stdin %d", info.MaxStdin)
		}
	}
	// The agent's catalog names only the dry run and undo ops it may run.
	for _, info := range p.AgentCatalog("a") {
		if info.Name == "apply" && (info.DryRun != "" || info.Undo != "restore" || info.StdinHint != "unified diff") {
			t.Errorf("apply in a's catalog: dry_run %q undo %q hint %q", info.DryRun, info.Undo, info.StdinHint)
		}
		if info.Name == "check" {
			t.Error("a's catalog lists check, which a may not run")
		}
	}
	ex, _ := p.Explain("apply")
	if !strings.Contains(ex, "safety net:  dry run: check, undo: restore") {
		t.Errorf("explain apply:\n%s", ex)
	}
	ex, _ = p.Explain("restore")
	if !strings.Contains(ex, "safety net:  undoes apply") {
		t.Errorf("explain restore:\n%s", ex)
	}
}

func TestStdinKeyErrors(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"unknown mode", `stdin = "requried"`, `unknown stdin mode "requried"`},
		{"none with max_stdin", "stdin = \"none\"\nmax_stdin = 10", `stdin = "none" but max_stdin is 10`},
		{"required without max_stdin", "stdin = \"required\"\nmax_stdin = 0", `stdin = "required" but max_stdin is 0`},
		{"hint without input", "stdin = \"none\"\nstdin_hint = \"x\"", "stdin_hint without standard input"},
		{"undefined undo", `undo = "restore"`, `op "restore" is not defined`},
		{"dry run of itself", `dry_run = "t"`, "dry_run names the op itself"},
		{"bad scope", `scope = "exec"`, `"read", "write" or "execute"`},
	} {
		_, err := policy.Parse("p.toml", []byte("[ops.t]\nargv = [\"/bin/true\"]\n"+c.src+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	if s := "stdin = \"requried\""; true {
		_, err := policy.Parse("p.toml", []byte("[ops.t]\nargv = [\"/bin/true\"]\n"+s+"\n"))
		if err == nil || !strings.Contains(err.Error(), `did you mean "required"`) {
			t.Errorf("no did-you-mean: %v", err)
		}
	}
}

// A read-only label on an op that runs a tree's code is warned about; an
// honest label, or a program that runs nothing of the tree, is not.
func TestWarnings(t *testing.T) {
	p, err := policy.Parse("p.toml", []byte(`
[ops.test]
argv = ["go", "test", "./..."]
dir = "/src/app"
scope = "read"
[ops.version]
argv = ["go", "version"]
dir = "/src/app"
scope = "read"
[ops.script]
argv = ["/src/app/run.sh"]
dir = "/src/app"
scope = "read"
[ops.build]
argv = ["make"]
dir = "/src/app"
scope = "execute"
[ops.apply]
argv = ["git", "apply"]
dir = "/src/app"
[ops.shlit]
argv = ["sh", "-c", "git status --short && git log -1 | cat; echo go test"]
dir = "/src/app"
scope = "read"
[ops.shmake]
argv = ["bash", "-c", "cd sub && X=1 make -j4"]
dir = "/src/app"
scope = "read"
[ops.shgo]
argv = ["sh", "-c", "go version; if true; then go test ./...; fi"]
dir = "/src/app"
scope = "read"
[ops.shdot]
argv = ["sh", "-c", "echo start && ./configure --prefix=/usr"]
dir = "/src/app"
scope = "read"
[ops.shsrc]
argv = ["sh", "-c", ". venv/bin/activate"]
dir = "/src/app"
scope = "read"
[ops.shquoted]
argv = ["sh", "-c", "'make' test"]
dir = "/src/app"
scope = "read"
[ops.shargs]
argv = ["sh", "-c", "\"$@\"", "sh", "make", "test"]
dir = "/src/app"
scope = "read"
[ops.shnice]
argv = ["sh", "-c", "nice -n 5 make"]
dir = "/src/app"
scope = "read"
[ops.sheval]
argv = ["sh", "-c", "eval make"]
dir = "/src/app"
scope = "read"
[ops.shtmpl]
argv = ["sh", "-c", "echo {x}"]
args.x = { type = "enum", values = ["a"] }
dir = "/src/app"
scope = "read"
`))
	if err != nil {
		t.Fatal(err)
	}
	var ws []string // the argv warnings (programs not found here) are TestArgvWarnings'
	for _, w := range p.Warnings() {
		if strings.Contains(w, `has scope "read"`) {
			ws = append(ws, w)
		}
	}
	// A shell's -c: what its literal script runs decides, never the shell
	// itself (a new user's trial: `sh -c "git status && git log -1"`).
	var sh []string
	for _, w := range ws {
		if strings.Contains(w, `op "sh`) {
			sh = append(sh, w)
		}
	}
	wantSh := []string{
		`op "shargs" has scope "read", but its sh -c script runs a command it only knows when it runs ("$@")`,
		`op "shdot" has scope "read", but its sh -c script runs "./configure --prefix=/usr" from its working directory`,
		`op "sheval" has scope "read", but its sh -c script runs a command it only knows when it runs (eval)`,
		`op "shgo" has scope "read", but its sh -c script runs go test, which runs code`,
		`op "shmake" has scope "read", but its bash -c script runs make, which runs code it finds`,
		`op "shnice" has scope "read", but its sh -c script runs make, which runs code it finds`,
		`op "shquoted" has scope "read", but its sh -c script runs make, which runs code it finds`,
		`op "shsrc" has scope "read", but its sh -c script runs ". venv/bin/activate"`,
		`op "shtmpl" has scope "read", but sh -c runs a script made from the request's arguments`,
	}
	if len(sh) != len(wantSh) {
		t.Fatalf("shell warnings:\n%s\nwant %d", strings.Join(sh, "\n"), len(wantSh))
	}
	for i, w := range wantSh {
		if !strings.HasPrefix(sh[i], w) {
			t.Errorf("shell warning %d: %s\nwant %s", i, sh[i], w)
		}
	}
	ws = slices.DeleteFunc(ws, func(w string) bool { return strings.Contains(w, `op "sh`) })
	if len(ws) != 2 {
		t.Fatalf("warnings %q, want 2 (script, test)", ws)
	}
	if !strings.Contains(ws[0], `op "script"`) || !strings.Contains(ws[0], "inside its working directory") {
		t.Errorf("script: %s", ws[0])
	}
	if !strings.Contains(ws[1], `op "test"`) || !strings.Contains(ws[1], "go test runs code") || !strings.Contains(ws[1], "ops apply, build can change") {
		t.Errorf("test: %s", ws[1])
	}
}

// policy check warns of argv that loads but does not mean what it seems: a
// shell's -c script with a free argument in it, an argv[0] with a space, a
// program not found; a pattern, an enum, or the value as its own element
// after the script are fine.
func TestArgvWarnings(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"sh", "make"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "plain"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	p, err := policy.Parse("p.toml", []byte(`
[ops.free]
argv = ["sh", "-c", "make {target}"]
args.target = { type = "string" }
[ops.freeec]
argv = ["sh", "-ec", "cat {file}"]
args.file = { type = "path", root = "/tmp" }
[ops.patterned]
argv = ["sh", "-c", "make {target}"]
args.target = { type = "string", pattern = "[a-z]+" }
[ops.positional]
argv = ["sh", "-c", "make \"$1\"", "sh", "{target}"]
args.target = { type = "string" }
[ops.spaced]
argv = ["make test"]
[ops.missing]
argv = ["no-such-program"]
[ops.notexec]
argv = ["plain"]
[ops.ok]
argv = ["make", "{target}"]
args.target = { type = "string" }
`))
	if err != nil {
		t.Fatal(err)
	}
	ws := p.Warnings()
	want := []string{
		`op "free": argv runs sh -c with the free string argument {target}`,
		`op "freeec": argv runs sh -c with the free string argument {file}`,
		`op "missing": argv[0]: program "no-such-program" not found in PATH`,
		`op "notexec": argv[0]: program "plain" not found in PATH`,
		`op "spaced": argv[0] "make test" has a space`,
	}
	if len(ws) != len(want) {
		t.Fatalf("warnings:\n%s\nwant %d", strings.Join(ws, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.Contains(ws[i], w) {
			t.Errorf("warning %d: %s\nwant %s", i, ws[i], w)
		}
	}
}
