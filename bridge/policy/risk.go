package policy

import (
	"fmt"
	"path/filepath"
	"strings"
)

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

// Warnings are what `bridge policy check` says of a policy that loads but
// may not mean what its author thinks: today, an op labelled read-only that
// runs code from a tree. An agent that can change that tree (through a
// write op working there, a pushed branch, a shared checkout) chooses what
// that code does, so "read" understates it; scope = "execute" says it.
func (p *Policy) Warnings() []string {
	var out []string
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
