package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// shells are programs whose -c takes a script: a value of a free argument
// inside that script is code, whatever the template's quoting.
var shells = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "fish": true, "ash": true, "mksh": true}

// codeRunners are programs that run code they find in their working
// directory (a Makefile, go tests, package.json scripts, conftest.py, a
// build script), keyed by the program's base name. A nil list: whatever
// argv[1] is; otherwise only those subcommands (`go version` runs nothing
// of the tree, `go test` does).
var codeRunners = map[string][]string{
	"make": nil, "gmake": nil, "just": nil, "task": nil, "ninja": nil, "cmake": nil, "ctest": nil,
	"go":    {"test", "run", "generate", "build", "install", "vet", "tool"},
	"cargo": {"test", "run", "build", "bench", "check", "clippy", "install"},
	"npm":   nil, "npx": nil, "yarn": nil, "pnpm": nil, "bun": nil, "node": nil, "deno": nil,
	"python": nil, "python3": nil, "pytest": nil, "tox": nil, "nox": nil, "uv": nil, "poetry": nil,
	"ruby": nil, "rake": nil, "bundle": nil, "rspec": nil,
	"sh": nil, "bash": nil, "zsh": nil, "dash": nil, "ksh": nil, "fish": nil,
	"perl": nil, "php": nil, "composer": nil,
	"gradle": nil, "gradlew": nil, "mvn": nil, "mvnw": nil, "sbt": nil, "dotnet": nil, "mix": nil,
}

// runsTreeCode reports why op o runs code from its working tree, or "".
func (o *op) runsTreeCode() string {
	if len(o.argv) == 0 || len(o.argv[0]) == 0 {
		return ""
	}
	prog := o.argv[0][0].lit
	if filepath.IsAbs(prog) && within(o.dir, prog) {
		return fmt.Sprintf("its program %s is inside its working directory %s", prog, o.dir)
	}
	if shells[filepath.Base(prog)] && len(o.argv) > 2 && o.argv[1].String() == "-c" {
		// A shell's -c runs its script, not a file of the tree: what the
		// script itself runs decides (a new user's trial: `sh -c "git
		// status && git log -1"` was said to run tree code).
		if len(o.argv[2]) != 1 || o.argv[2][0].ref != "" {
			return fmt.Sprintf("%s -c runs a script made from the request's arguments, in its working directory %s", filepath.Base(prog), o.dir)
		}
		return scriptRunsTreeCode(filepath.Base(prog), o.argv[2][0].lit, o.dir)
	}
	if b := filepath.Base(prog); (b == "python3" || b == "python") && len(o.argv) > 3 && o.argv[1].String() == "-I" && o.argv[2].String() == "-c" &&
		len(o.argv[3]) == 1 && o.argv[3][0].ref == "" {
		// Isolated (-I: neither the working directory nor PYTHON* on
		// its import path), running a literal of the policy's: no
		// module of the tree is imported in place of the standard ones.
		return ""
	}
	subs, ok := codeRunners[filepath.Base(prog)]
	if !ok {
		return ""
	}
	if subs == nil {
		return fmt.Sprintf("%s runs code it finds in its working directory %s", filepath.Base(prog), o.dir)
	}
	if len(o.argv) > 1 {
		sub := o.argv[1].String()
		for _, s := range subs {
			if sub == s {
				return fmt.Sprintf("%s %s runs code from its working directory %s", filepath.Base(prog), s, o.dir)
			}
		}
	}
	return ""
}

// scriptRunsTreeCode reports why a literal shell script runs code from its
// working directory dir, or "": a command of it (the first word after a
// separator, past assignments and words such as if, then, exec, env) that
// is a code runner (with its subcommand, as for argv), a relative path
// with a slash (./configure, scripts/x), or . and source. (An argument
// such as cat's ./file reads the tree; sh ./x.sh is the code runner sh.)
// It reads
// the script as words, not as a shell would, and errs towards warning: a
// command word with an expansion in it, or eval, is warned of.
func scriptRunsTreeCode(shell, script, dir string) string {
	var words []string
	starts := map[int]bool{0: true} // indexes of words that begin a command
	word := strings.Builder{}
	flush := func() {
		if word.Len() > 0 {
			words = append(words, word.String())
			word.Reset()
		}
	}
	rs := []rune(script)
	for k := 0; k < len(rs); k++ {
		r := rs[k]
		if r == '$' && k+1 < len(rs) && rs[k+1] == '{' {
			// ${NAME...}: a parameter expansion, part of its word.
			end := k + 1
			for end < len(rs) && rs[end] != '}' {
				end++
			}
			word.WriteString(string(rs[k:min(end+1, len(rs))]))
			k = end
			continue
		}
		switch r {
		case ' ', '\t':
			flush()
		case ';', '&', '|', '(', ')', '`', '{', '}', '\n':
			flush()
			starts[len(words)] = true
		default:
			word.WriteRune(r)
		}
	}
	flush()
	for i := 0; i < len(words); i++ {
		// Quotes and backslashes only hide a word from this reading
		// ('make', \make): gone, as the shell removes them.
		w := strings.NewReplacer(`'`, "", `"`, "", `\`, "").Replace(words[i])
		if !starts[i] {
			continue
		}
		switch {
		case assignment().MatchString(w):
			starts[i+1] = true // NAME=VALUE (its value may expand): a command follows
			continue
		case strings.Contains(w, "$") || w == "eval":
			// "$@", $CMD, eval: the command is chosen when it runs.
			return fmt.Sprintf("its %s -c script runs a command it only knows when it runs (%s), in its working directory %s", shell, words[i], dir)
		case keywords[w]:
			starts[i+1] = true // if, then, while, !: a command follows
			continue
		case prefixWords[w]:
			// Its options and their values (nice -n 5, sudo -u bob) come
			// before the command: every word up to the next separator is
			// taken for one.
			for j := i + 1; j < len(words) && !starts[j]; j++ {
				starts[j] = true
			}
			continue
		case w == "." || w == "source" || (!filepath.IsAbs(w) && strings.Contains(w, "/")):
			return fmt.Sprintf("its %s -c script runs %q from its working directory %s", shell, strings.Join(words[i:min(i+2, len(words))], " "), dir)
		}
		subs, ok := codeRunners[filepath.Base(w)]
		switch {
		case !ok:
		case subs == nil:
			return fmt.Sprintf("its %s -c script runs %s, which runs code it finds in its working directory %s", shell, filepath.Base(w), dir)
		case i+1 < len(words) && slices.Contains(subs, words[i+1]):
			return fmt.Sprintf("its %s -c script runs %s %s, which runs code from its working directory %s", shell, filepath.Base(w), words[i+1], dir)
		}
	}
	return ""
}

// assignment is a shell word that sets a variable (before a command, or
// alone).
var assignment = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*=`)

// prefixWords come before a command in a shell script, with options of
// their own.
var prefixWords = map[string]bool{"exec": true, "command": true, "env": true, "time": true, "nice": true, "nohup": true, "xargs": true, "sudo": true}

// keywords of the shell come before a command.
var keywords = map[string]bool{"if": true, "then": true, "else": true, "elif": true, "while": true, "until": true, "do": true, "!": true}

// Warnings are what `bridge policy check` says of a policy that loads but
// may not mean what its author thinks: today, an op labelled read-only that
// runs code from a tree. An agent that can change that tree (through a
// write op working there, a pushed branch, a shared checkout) chooses what
// that code does, so "read" understates it; scope = "execute" says it.
//
// It also warns of argv mistakes that load but cannot mean what was meant:
// a shell's -c script with a free string argument in it (the agent writes
// shell code), an argv[0] with a space (one element is one word: the
// program "make test" does not exist), and a program this environment does
// not find (the daemon's own PATH may differ; it refuses the op then).
func (p *Policy) Warnings() []string {
	var out []string
	for _, name := range sortedKeys(p.ops) {
		out = append(out, p.ops[name].argvWarnings()...)
	}
	out = append(out, p.PathWarnings()...)
	// An op's working directory that is not there: every request of it
	// fails to start until it is (a new user's trial: policy check passed
	// it silently).
	for _, name := range sortedKeys(p.ops) {
		o := p.ops[name]
		if fi, err := os.Stat(o.dir); err != nil {
			out = append(out, fmt.Sprintf("op %q: its dir %s does not exist here: the op fails to start until it does", name, o.dir))
		} else if !fi.IsDir() {
			out = append(out, fmt.Sprintf("op %q: its dir %s is not a directory: the op fails to start", name, o.dir))
		}
	}
	for _, name := range sortedKeys(p.ops) {
		o := p.ops[name]
		if o.scope != ScopeRead {
			continue
		}
		why := o.runsTreeCode()
		if why == "" {
			continue
		}
		var writers []string
		for _, wn := range sortedKeys(p.ops) {
			w := p.ops[wn]
			if w.scope != ScopeRead && wn != name && (within(w.dir, o.dir) || within(o.dir, w.dir)) {
				writers = append(writers, wn)
			}
		}
		msg := fmt.Sprintf("op %q has scope \"read\", but %s", name, why)
		if len(writers) > 0 {
			which := "op " + writers[0]
			if len(writers) > 1 {
				which = "ops " + strings.Join(writers, ", ")
			}
			msg += ", a tree that " + which + " can change"
		}
		msg += `: whoever changes that tree chooses what it runs; say scope = "execute" (and a risk note if more needs saying)`
		out = append(out, msg)
	}
	return out
}

// argvWarnings are the warnings of op o's argv and reconcile command.
func (o *op) argvWarnings() []string {
	var out []string
	for _, cmd := range []struct {
		what string
		argv []tmpl
	}{{"argv", o.argv}, {"reconcile", o.reconcile}} {
		if len(cmd.argv) == 0 || len(cmd.argv[0]) == 0 {
			continue
		}
		prog := cmd.argv[0][0].lit
		if strings.ContainsAny(prog, " \t") {
			out = append(out, fmt.Sprintf("op %q: %s[0] %q has a space: each element is one word, never split; write the program and its arguments as separate elements", o.name, cmd.what, prog))
		} else if found, passed, err := lookPathPassing(prog, func() string {
			if v, ok := o.setEnv["PATH"]; ok {
				return v
			}
			return os.Getenv("PATH")
		}, func() string { return o.opPATH(os.LookupEnv) }); err != nil && (len(passed) > 0 || filepath.IsAbs(prog) && !errors.Is(err, fs.ErrNotExist)) {
			out = append(out, fmt.Sprintf("op %q: %s[0]: %v: the op fails until then", o.name, cmd.what, err))
		} else if err != nil {
			where := "the daemon's PATH"
			if _, ok := o.setEnv["PATH"]; ok {
				where = "the PATH of its set_env"
			}
			out = append(out, fmt.Sprintf("op %q: %s[0]: %v: the op fails until it exists (looked up in %s)", o.name, cmd.what, err, where))
		} else if len(passed) > 0 {
			out = append(out, fmt.Sprintf("op %q: %s[0] runs %s; passed over, as another user could have put or changed them: %s", o.name, cmd.what, found, strings.Join(passed, "; ")))
		}
		if arg := o.shellScriptArg(cmd.argv); arg != "" {
			out = append(out, fmt.Sprintf("op %q: %s runs %s -c with the free string argument {%s} in its script: the agent writes shell code there (\"x; rm -rf ~\"); pass it as its own element after the script (\"$1\"), or give it a pattern or an enum", o.name, cmd.what, filepath.Base(prog), arg))
		}
	}
	return out
}

// PathWarnings says which PATH the ops get loses entries (SafePATH): said
// once per PATH, for the ops that get it. `serve` logs them when it loads
// a policy: a tool's directory left out is a tool not found.
func (p *Policy) PathWarnings() []string {
	var out []string
	said := map[string]bool{}
	for _, name := range sortedKeys(p.ops) {
		o := p.ops[name]
		v, set := o.setEnv["PATH"]
		if !set {
			if !slices.Contains(o.env, "PATH") {
				continue
			}
			v = os.Getenv("PATH")
		}
		if _, dropped := SafePATH(v); len(dropped) > 0 && !said[v] {
			said[v] = true
			where := "the PATH here (the daemon's own when `serve` logs this; `policy check` judges its own shell's)"
			if set {
				where = fmt.Sprintf("the PATH of op %q's set_env", name)
			}
			out = append(out, fmt.Sprintf("%s loses, in the ops' environment, what another user could have put or changed (and relative or empty entries): %s; a program an op runs by name is not looked up there",
				where, strings.Join(dropped, ", ")))
		}
	}
	return out
}

// shellScriptArg returns the name of a free argument (a string without a
// pattern, or a path) referenced in the script of a shell's -c, or "".
func (o *op) shellScriptArg(argv []tmpl) string {
	if !shells[filepath.Base(argv[0][0].lit)] {
		return ""
	}
	for i := 1; i+1 < len(argv); i++ {
		flag := argv[i].String()
		if !strings.HasPrefix(flag, "-") || strings.HasPrefix(flag, "--") || !strings.Contains(flag, "c") {
			continue
		}
		for _, seg := range argv[i+1] {
			if a := o.args[seg.ref]; a != nil && (a.typ == typeString && a.pattern == nil || a.typ == typePath) {
				return a.name
			}
		}
		return ""
	}
	return ""
}
