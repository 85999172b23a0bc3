package policy

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// A preset is a reviewed set of ops for one kind of repository, written
// into a policy by `bridge policy init --preset`: what an agent needs to
// work on code (read the tree and its history, run the stack's checks,
// change files only through a confined, checkable path, commit with a
// human's approval), and no shell of the agent's making. Presets compose:
// git holds the introspection, the safe-write ops and the commit; a stack
// preset adds its test, lint and build, which run code from the tree, and
// so code the agent wrote (scope "execute"): with one, what the agent
// writes runs as the daemon's user, .git included.
type Preset struct {
	Name    string
	Summary string
	Ops     []PresetOp
}

// PresetOp is one op of a preset: its name, what it does, and its TOML
// table with {{repo}} where the repository directory goes.
type PresetOp struct {
	Name string
	Does string
	toml string
}

// The environment the ops pass: the tool's own settings where the daemon
// has them (a version manager's root, a build cache), nothing else.
const (
	envBase = `env = ["PATH", "HOME"]`
	envGo   = `env = ["PATH", "HOME", "GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOPROXY", "GOTOOLCHAIN"]`
	envNode = `env = ["PATH", "HOME", "NVM_DIR", "NODE_OPTIONS"]
set_env = { NPM_CONFIG_UPDATE_NOTIFIER = "false", NPM_CONFIG_FUND = "false", NPM_CONFIG_AUDIT = "false" }`
	envPython = `env = ["PATH", "HOME", "PYENV_ROOT", "PYENV_VERSION", "VIRTUAL_ENV"]`
	envRust   = `env = ["PATH", "HOME", "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN"]`
)

// The file ops check, in the directory itself, what the daemon checked at
// render time: a path is confined as the tree is then, and another op
// could change the tree in between (a patch that turns a directory into a
// link to .git, red team of the presets). So each moves into the file's
// directory (cd -P: from then on no rename on the way can move it
// elsewhere), checks that the real directory is inside the repository and
// not under .git (any case: a case-insensitive disk; hooks and config
// there run code at the next git command, and config may hold
// credentials), refuses a link at the name, and works on the name from
// there. The preset's agent also runs one op at a time (max_concurrent).
// What they say names the file relative to the repository, never the
// host's path. (A brace in a script is written twice: {path} is a
// template reference.)
const fileOpPrologue = `set -eu
f=$1
rel=${{f#"$PWD"/}}
root=$(pwd -P)
refuse() {{ echo "$op: refused: $rel $1" >&2; exit 2; }}
lower() {{ printf '%s/' "$1" | tr '[:upper:]' '[:lower:]'; }}
case "$(lower "$f")" in */.git/*) refuse "is inside .git, where hooks and config run code";; esac
dir=$(dirname -- "$f")
base=$(basename -- "$f")
`

// enterDir moves into the file's directory and checks it there.
const enterDir = `cd -P -- "$dir" 2>/dev/null || refuse "has no directory to go into"
here=$(pwd -P)
case "$here/" in "$root"/*) ;; *) refuse "is not inside the repository (a link on the way)";; esac
case "$(lower "$here")" in */.git/*) refuse "is inside .git";; esac
if [ -L "$base" ]; then refuse "is a symbolic link"; fi
if [ -d "$base" ]; then refuse "is a directory"; fi
`

// writeFileScript writes standard input to the path argument ($1), a
// resolved absolute path the policy confined to the repository: through a
// new file in the same directory that mktemp makes (O_EXCL, under a name
// nobody can guess: a guessable one was a link planted in advance to a
// FIFO or a device, which the shell's noclobber follows), then renamed
// over the name (which replaces a link rather than following it), mode
// 0644 or, if the old file was executable, 0755. With
// dry_run ($2) it shows the change as a diff that patch-apply takes (a/
// and b/ prefixes) and writes nothing.
const writeFileScript = `op=write-file
` + fileOpPrologue + `if [ "$2" = true ]; then
  if [ -d "$dir" ]; then
` + enterDir + `  fi
  if [ -e "./$base" ] && [ -d "$dir" ]; then diff -u --label "a/$rel" --label "b/$rel" -- "./$base" - || [ $? -eq 1 ]
  else diff -u --label /dev/null --label "b/$rel" -- /dev/null - || [ $? -eq 1 ]; fi
  exit 0
fi
mkdir -p -- "$dir"
` + enterDir + `tmp=$(mktemp ./.write-file.XXXXXXXXXX)
cat > "$tmp"
chmod u=rw,go=r "$tmp"
if [ -x "$base" ]; then chmod +x "$tmp"; fi
n=$(wc -c < "$tmp")
mv -f -- "$tmp" "./$base"
echo "wrote $rel ($n bytes)"`

// readFileScript prints the path argument ($1), a file of the repository,
// never one under .git, checked as writeFileScript checks.
const readFileScript = `op=read-file
` + fileOpPrologue + enterDir + `cat -- "./$base"`

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

// presets is built on first use, not at every bridge process's start
// (its texts are put together from the pieces above).
var presets = sync.OnceValue(func() []Preset {
	return []Preset{
		{Name: "git", Summary: "read the repository and its history; change files only by a patch (checked first, undone with the same diff) or a confined write (previewed with dry_run); commit with a human's approval", Ops: []PresetOp{
			{"git-status", "the branch and the changed files (git status --short --branch)", `argv = ["git", "status", "--short", "--branch"]
scope = "read"
idempotent = true
stdin = "none"`},
			{"git-log", "the last n commits, one line each (git log --oneline)", `argv = ["git", "log", "--oneline", "--decorate", "-n", "{n}"]
scope = "read"
idempotent = true
stdin = "none"
[ops.git-log.args.n]
type = "int"
description = "how many commits"
min = 1
max = 500
default = 20`},
			{"git-show", "one commit (or other revision): its message and patch", `argv = ["git", "show", "--stat", "--patch", "{rev}", "--"]
scope = "read"
idempotent = true
stdin = "none"
[ops.git-show.args.rev]
type = "string"
description = "a commit, branch or tag (HEAD~2, main, v1.0)"
pattern = "[A-Za-z0-9._/~^]{1,100}"
max_len = 100
default = "HEAD"`},
			{"git-diff", "every uncommitted change, against HEAD", `argv = ["git", "diff", "--stat", "--patch", "HEAD", "--"]
scope = "read"
idempotent = true
stdin = "none"`},
			{"read-file", "print a file of the repository as it is now (never under .git)", `argv = ["sh", "-c", ` + tomlString(readFileScript) + `, "read-file", "{path}"]
scope = "read"
idempotent = true
stdin = "none"
[ops.read-file.args.path]
type = "path"
description = "the file, relative to the repository"
root = "{{repo}}"
must_exist = true`},
			{"git-ls-files", "the files git tracks", `argv = ["git", "ls-files"]
scope = "read"
idempotent = true
stdin = "none"`},
			{"git-grep", "lines of tracked files that match a pattern (git grep -n)", `argv = ["git", "grep", "-n", "-I", "-e", "{pattern}", "--"]
scope = "read"
idempotent = true
stdin = "none"
[ops.git-grep.args.pattern]
type = "string"
description = "a basic regular expression, as git grep reads it"
max_len = 200`},
			{"patch-check", "whether a unified diff on standard input applies cleanly; changes nothing (git apply --check)", `argv = ["git", "apply", "--check", "--verbose"]
scope = "read"
idempotent = true
stdin = "required"
max_stdin = "4MiB"`},
			{"patch-apply", "apply a unified diff from standard input to the working tree (git apply); patch-undo with the same diff takes it back", `argv = ["git", "apply", "--verbose"]
scope = "write"
dry_run = "patch-check"
undo = "patch-undo"
stdin = "required"
max_stdin = "4MiB"`},
			{"patch-undo", "take back a diff patch-apply applied: the same diff on standard input, applied in reverse (git apply -R)", `argv = ["git", "apply", "-R", "--verbose"]
scope = "write"
stdin = "required"
max_stdin = "4MiB"`},
			{"write-file", "write standard input to a file of the repository (never under .git); dry_run=true shows the change as a diff and writes nothing", `argv = ["sh", "-c", ` + tomlString(writeFileScript) + `, "write-file", "{path}", "{dry_run}"]
scope = "write"
stdin = "required"
max_stdin = "4MiB"
[ops.write-file.args.path]
type = "path"
description = "the file, relative to the repository (made with its directories if new)"
root = "{{repo}}"
[ops.write-file.args.dry_run]
type = "bool"
description = "true: show the change as a unified diff and write nothing"
default = false`},
			{"git-add", "stage a path for the next commit (git add)", `argv = ["git", "add", "--", "{path}"]
scope = "write"
stdin = "none"
[ops.git-add.args.path]
type = "path"
description = "a file or directory of the repository"
root = "{{repo}}"
must_exist = true`},
			{"git-commit", "commit what is staged, with the message on standard input (a subject line, a blank line, a body); a human approves each, seeing the message", `argv = ["git", "commit", "--file", "-", "--cleanup", "strip"]
scope = "write"
approve = true
stdin = "required"
stdin_hint = "the commit message"
max_stdin = "64KiB"`},
		}},
		{Name: "go", Summary: "a Go module's tests, vet and build", Ops: []PresetOp{
			{"go-test", "run the tests afresh, never from the cache (go test -count=1 ./...); run= picks tests by name, as go test -run does", `argv = ["go", "test", "-count=1", "-run", "{run}", "./..."]
scope = "execute"
stdin = "none"
timeout = "20m"
` + envGo + `
[ops.go-test.args.run]
type = "string"
description = "a regular expression of test names (go test -run); . runs them all"
pattern = "[A-Za-z0-9_.*+?|^$()/\\[\\]-]{1,200}"
default = "."`},
			{"go-vet", "go vet ./...", stackOp(`["go", "vet", "./..."]`, "10m", envGo)},
			{"go-build", "build every package (go build ./...)", stackOp(`["go", "build", "./..."]`, "20m", envGo)},
		}},
		{Name: "node", Summary: "an npm package's test, lint and build scripts", Ops: []PresetOp{
			{"npm-test", "the package's test script (npm test)", stackOp(`["npm", "test"]`, "20m", envNode)},
			{"npm-lint", "the package's lint script, if it has one (npm run --if-present lint)", stackOp(`["npm", "run", "--if-present", "lint"]`, "10m", envNode)},
			{"npm-build", "the package's build script, if it has one (npm run --if-present build)", stackOp(`["npm", "run", "--if-present", "build"]`, "20m", envNode)},
		}},
		{Name: "python", Summary: "a Python project's unittest tests and a syntax check of every .py file", Ops: []PresetOp{
			{"py-test", "run the tests (python3 -m unittest discover)", stackOp(`["python3", "-m", "unittest", "discover", "-v"]`, "20m", envPython)},
			{"py-lint", "check that every .py file parses (writes nothing; files that are links or over 4 MiB are left out; add your own linter as an op for more)", `argv = ["python3", "-I", "-c", "import ast, pathlib, sys\nbad = 0\nfor p in sorted(pathlib.Path('.').rglob('*.py')):\n    if p.is_symlink() or not p.is_file() or p.stat().st_size > 4 << 20:\n        continue\n    try:\n        ast.parse(p.read_bytes(), str(p))\n    except SyntaxError as e:\n        print('%s:%s: %s' % (e.filename, e.lineno, e.msg)); bad += 1\nsys.exit(1 if bad else 0)"]
scope = "read"
idempotent = true
stdin = "none"
` + envPython},
		}},
		{Name: "rust", Summary: "a Cargo package's tests, check and build, offline", Ops: []PresetOp{
			{"cargo-test", "run the tests (cargo test --offline)", stackOp(`["cargo", "test", "--offline"]`, "30m", envRust)},
			{"cargo-check", "type-check without building (cargo check --offline)", stackOp(`["cargo", "check", "--offline"]`, "20m", envRust)},
			{"cargo-build", "build (cargo build --offline)", stackOp(`["cargo", "build", "--offline"]`, "30m", envRust)},
		}},
	}
})

// stackOp is the table of a stack's check (a test, lint or build): it runs
// the tree's code (scope execute), takes no input, within timeout, with
// the tool's environment.
func stackOp(argv, timeout, env string) string {
	return "argv = " + argv + "\nscope = \"execute\"\nstdin = \"none\"\ntimeout = \"" + timeout + "\"\n" + env
}

// Presets are the presets `bridge policy init --preset` knows, in order.
func Presets() []Preset { return slices.Clone(presets()) }

// RenderPresets is the policy text of the named presets (each once, in
// the order given), every op working in repo (an absolute directory, or
// ~/...), allowed to agent.
func RenderPresets(names []string, repo, agent string) (string, []string, error) {
	var picked []Preset
	presets := presets()
	for _, n := range names {
		i := slices.IndexFunc(presets, func(p Preset) bool { return p.Name == n })
		if i < 0 {
			var all []string
			for _, p := range presets {
				all = append(all, p.Name)
			}
			return "", nil, fmt.Errorf("no preset %q: the presets are %s", n, strings.Join(all, ", "))
		}
		if !slices.ContainsFunc(picked, func(p Preset) bool { return p.Name == n }) {
			picked = append(picked, presets[i])
		}
	}
	var b strings.Builder
	var ops []string
	fmt.Fprintf(&b, "# Written by `bridge policy init --preset %s`: reviewed ops for the repository\n", strings.Join(names, ","))
	fmt.Fprintf(&b, "# %s. A running `bridge serve` takes edits live; `bridge policy check` checks\n", repo)
	b.WriteString("# them, `bridge policy explain OP` shows one as it would run. Every key: docs/POLICY.md.\n")
	for _, p := range picked {
		fmt.Fprintf(&b, "\n# --- %s: %s\n", p.Name, p.Summary)
		for _, op := range p.Ops {
			ops = append(ops, op.Name)
			body := strings.ReplaceAll(op.toml, "{{repo}}", repo)
			// The op's own table first, then its argument tables (a
			// TOML table cannot take keys after its subtables).
			head, args, _ := strings.Cut(body, "\n[ops.")
			if !strings.Contains(head, "env = [") {
				head += "\n" + envBase
			}
			fmt.Fprintf(&b, "\n[ops.%s]\ndescription = %s\ndir = %s\n%s\n", op.Name, tomlString(op.Does), tomlString(repo), head)
			if args != "" {
				b.WriteString("[ops." + args + "\n")
			}
		}
	}
	// One op at a time: the file ops check the tree as it is when they
	// run, and a patch applied meanwhile must not change it under them.
	fmt.Fprintf(&b, "\n[agents.%s]\nmax_concurrent = 1 # one op at a time: ops that change the tree never race each other (a second one sent meanwhile is refused \"ceiling\": send it again)\nops = [", agent)
	for i, o := range ops {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tomlString(o))
	}
	b.WriteString("]\n")
	return b.String(), ops, nil
}
