package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge/internal/opspec"
)

// RenderContext is what the daemon supplies to Render besides the request.
type RenderContext struct {
	// Env looks a variable up in the daemon's own environment (os.LookupEnv in
	// production). It is asked only for the names the op lists in env, and
	// for PATH when argv[0] is a bare name and set_env has no PATH. Nil means
	// an empty environment.
	Env func(name string) (string, bool)
	// Vars holds reserved template variables the daemon knows, today only
	// "request_id". Render fills "agent" and "op" itself; any other key is an
	// error, so a daemon bug cannot smuggle in a value.
	Vars map[string]string
}

// Invocation is a fully rendered, validated command: everything the runner
// needs and nothing taken from the request except validated argument values,
// each inside exactly one argv element.
type Invocation struct {
	Op          string
	Argv        []string // Argv[0] is an absolute path
	Dir         string
	Env         []string // "K=V", sorted: named vars found via RenderContext.Env, plus set_env
	Timeout     time.Duration
	MaxOutput   int64
	MaxStdin    int64 // bytes of standard input the request may carry; 0: none
	Idempotent  bool
	Approve     bool
	Scope       string
	Concurrency int               // 0 means unlimited
	Reconcile   []string          // nil when the op has none
	Args        map[string]string // validated, defaults applied, omitted optionals absent
	Limits      Limits            // resource limits for the child
	// Stdin describes the request's standard input for a human ("N bytes,
	// sha256 …"), set by the host for an op that waits for approval: it is
	// printed by String, and so shown and bound to the approval.
	Stdin string
}

// SetRequestEnv hands the request id to the op (SPEC §7.3): as
// BRIDGE_REQUEST_ID and BRIDGE_IDEMPOTENCY_KEY, so a downstream system can
// deduplicate on it. A keyed request keeps its id across retries. Set by
// the daemon for each run, and by `bridge policy explain` as serve would.
func (inv *Invocation) SetRequestEnv(id string) {
	env := inv.Env[:0:0]
	for _, kv := range inv.Env {
		if !strings.HasPrefix(kv, "BRIDGE_REQUEST_ID=") && !strings.HasPrefix(kv, "BRIDGE_IDEMPOTENCY_KEY=") {
			env = append(env, kv)
		}
	}
	inv.Env = append(env, "BRIDGE_REQUEST_ID="+id, "BRIDGE_IDEMPOTENCY_KEY="+id)
}

// Allowed reports whether agent may run op: nil, or an error wrapping
// ErrNotAllowed or ErrUnknownOp. An unknown agent gets ErrNotAllowed whatever
// the op, so it learns nothing about which ops exist.
func (p *Policy) Allowed(agent, op string) error {
	ops, ok := p.agents[agent]
	if !ok {
		return fmt.Errorf("%w: agent %q is not in the policy", ErrNotAllowed, agent)
	}
	if p.ops[op] == nil {
		return fmt.Errorf("%w: %q", ErrUnknownOp, op)
	}
	for _, o := range ops {
		if o == op {
			return nil
		}
	}
	return fmt.Errorf("%w: op %q not allowed for agent %q", ErrNotAllowed, op, agent)
}

// MaxStdin is the most standard input, in bytes, that agent may send with a
// request for op: the op's max_stdin when agent may run it, otherwise the
// largest max_stdin of any op agent may run (0 for an unknown agent). The
// second form bounds a request before its op is known, or one for an op
// the agent may not run, which the policy refuses anyway.
func (p *Policy) MaxStdin(agent, op string) int64 {
	if p.Allowed(agent, op) == nil {
		return p.ops[op].maxStdin
	}
	var most int64
	for _, name := range p.agents[agent] {
		most = max(most, p.ops[name].maxStdin)
	}
	return most
}

// Approves reports whether op waits for a human's approval (approve = true).
func (p *Policy) Approves(op string) bool { return p.ops[op] != nil && p.ops[op].approve }

// StdinMode is op's stdin mode (none, optional, required); "" for an op
// the policy does not define.
func (p *Policy) StdinMode(op string) string {
	if o := p.ops[op]; o != nil {
		return o.stdin
	}
	return ""
}

// Render checks that agent may run op, validates args against the op's schema
// and renders the op into an Invocation. Errors wrap ErrNotAllowed,
// ErrUnknownOp or ErrInvalidArg (as *ArgError) when the request is at fault;
// any other error is a problem on the host (a missing program or path root).
func (p *Policy) Render(agent, opName string, args map[string]string, ctx RenderContext) (*Invocation, error) {
	if err := p.Allowed(agent, opName); err != nil {
		return nil, err
	}
	o := p.ops[opName]
	for _, n := range sortedKeys(args) {
		if o.args[n] == nil {
			reason := "this op takes no arguments"
			if len(o.args) > 0 {
				reason = "this op takes: " + strings.Join(sortedKeys(o.args), ", ")
			}
			if !opspec.ValidArgName(n) {
				n = "(invalid name)" // hostile input: do not echo it
			}
			return nil, &ArgError{Op: opName, Arg: n, Reason: "unknown argument; " + reason}
		}
	}
	validated := map[string]string{}
	for _, n := range sortedKeys(o.args) {
		a := o.args[n]
		v, given := args[n]
		if !given {
			switch {
			case a.def != nil:
				v = *a.def
			case a.required:
				return nil, &ArgError{Op: opName, Arg: n, Reason: "missing required argument"}
			default:
				continue
			}
		}
		cv, err := a.check(v)
		if err != nil {
			var reason argReason
			if errors.As(err, &reason) {
				return nil, &ArgError{Op: opName, Arg: n, Reason: string(reason)}
			}
			return nil, fmt.Errorf("op %q: argument %q: %w", opName, n, err)
		}
		validated[n] = cv
	}

	vals := make(map[string]string, len(validated)+3)
	for k, v := range validated {
		vals[k] = v
	}
	for _, k := range sortedKeys(ctx.Vars) {
		if k != "request_id" {
			return nil, fmt.Errorf("op %q: template variable %q cannot be supplied", opName, k)
		}
		if r := badText(ctx.Vars[k]); r != "" {
			return nil, fmt.Errorf("op %q: template variable %q: %s", opName, k, r)
		}
		vals[k] = ctx.Vars[k]
	}
	vals["agent"] = agent
	vals["op"] = opName

	lookup := ctx.Env
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	// PATH is read only if a bare program name needs it, so the environment
	// is asked for nothing the op does not use.
	pathEnv := func() string {
		if v, ok := o.setEnv["PATH"]; ok {
			return v
		}
		v, _ := lookup("PATH")
		return v
	}
	inv := &Invocation{
		Op:          opName,
		Dir:         o.dir,
		Timeout:     o.timeout,
		MaxOutput:   o.maxOutput,
		MaxStdin:    o.maxStdin,
		Idempotent:  o.idempotent,
		Approve:     o.approve,
		Scope:       o.scope,
		Concurrency: o.concurrency,
		Args:        validated,
		Limits:      o.limits,
	}
	opPath := func() string { return o.opPATH(lookup) }
	var err error
	if inv.Argv, err = renderArgv(opName, o.argv, vals, pathEnv, opPath); err != nil {
		return nil, err
	}
	if o.reconcile != nil {
		if inv.Reconcile, err = renderArgv(opName, o.reconcile, vals, pathEnv, opPath); err != nil {
			return nil, err
		}
	}
	inv.Env = []string{}
	for _, n := range o.env {
		if v, ok := lookup(n); ok && strings.IndexByte(v, 0) < 0 {
			if kv, ok := opEnv(n, v); ok {
				inv.Env = append(inv.Env, kv)
			}
		}
	}
	for n, v := range o.setEnv {
		if kv, ok := opEnv(n, v); ok {
			inv.Env = append(inv.Env, kv)
		}
	}
	sort.Strings(inv.Env)
	return inv, nil
}

// opEnv is one variable of an op's environment: a PATH without the
// entries a program must not come from (SafePATH), as the op's own program
// does not.
func opEnv(name, value string) (string, bool) {
	if name == "PATH" {
		if value, _ = SafePATH(value); value == "" {
			// None left: no PATH at all (the shells' own default), never
			// an empty one, which they read as the working directory.
			return "", false
		}
	}
	return name + "=" + value, true
}

// opPATH is the PATH the op's own process searches: its environment's
// (SafePATH's), or the default when it gets none. `#!/usr/bin/env NAME`
// finds NAME there.
func (o *op) opPATH(lookup func(string) (string, bool)) string {
	v, ok := o.setEnv["PATH"]
	if !ok && slices.Contains(o.env, "PATH") {
		v, ok = lookup("PATH")
	}
	if ok {
		if kv, kept := opEnv("PATH", v); kept {
			return strings.TrimPrefix(kv, "PATH=")
		}
	}
	return defaultOpPATH
}

func renderArgv(opName string, ts []tmpl, vals map[string]string, pathEnv, opPath func() string) ([]string, error) {
	out := make([]string, 0, len(ts))
	for i, t := range ts {
		if i == 0 {
			prog, _, err := lookPathPassing(t[0].lit, pathEnv, opPath)
			if err != nil {
				return nil, fmt.Errorf("op %q: %w", opName, err)
			}
			out = append(out, prog)
			continue
		}
		s, ok := t.render(vals)
		if !ok {
			for _, seg := range t {
				if _, have := vals[seg.ref]; seg.ref != "" && !have && reservedVars[seg.ref] {
					return nil, fmt.Errorf("op %q: template variable %q was not supplied", opName, seg.ref)
				}
			}
			continue // an omitted optional argument drops its element
		}
		out = append(out, s)
	}
	return out, nil
}

// lookPath resolves the program against pathEnv (not the process's PATH), the
// way exec.LookPath would, but ignores relative PATH entries ("." in PATH
// must not let a file in the working directory stand in for the program),
// and directories and program files another user could write (a program
// planted in a world-writable PATH entry would run as the daemon's user:
// the third red team's finding).
func lookPath(prog string, pathEnvFn func() string) (string, error) {
	p, _, err := lookPathPassing(prog, pathEnvFn, func() string { kept, _ := SafePATH(pathEnvFn()); return kept })
	return p, err
}

// LookPath finds a program the daemon runs for itself (a desktop
// notifier) in its own PATH, by the rules of an op's program: never one
// another user could have put there or changed.
func LookPath(prog string) (string, error) {
	return lookPath(prog, func() string { return os.Getenv("PATH") })
}

// lookPathPassing is lookPath that also returns the candidates it passed
// over because another user could have put or changed them ("FILE (why)"),
// for policy check to warn of even when a safe one was found.
func lookPathPassing(prog string, pathEnvFn, opPath func() string) (string, []string, error) {
	return lookPathDepth(prog, pathEnvFn, opPath, 0)
}

// lookPathDepth is lookPathPassing for the program of an interpreter line
// at depth (`#!/usr/bin/env NAME`): a script that names itself so ends in
// "nested too deep", not in a stack overflow.
func lookPathDepth(prog string, pathEnvFn, opPath func() string, depth int) (string, []string, error) {
	// A script's interpreter follows the program's rule, looked up (for
	// `#!/usr/bin/env NAME`) in the PATH the op's process gets (asked only
	// for env).
	interp := func(p string) error {
		if why := unsafeInterpreter(p, opPath, depth); why != "" {
			return &unsafeError{"", why}
		}
		return nil
	}
	if filepath.IsAbs(prog) {
		err := executable(prog)
		if err == nil {
			// Named by its path, it is still swapped by whoever may write
			// its directory.
			if why := unsafeChain(prog); why != "" {
				err = &unsafeError{"its directory", why}
			}
		}
		if err == nil {
			err = interp(prog)
		}
		if err != nil {
			return "", nil, fmt.Errorf("program %s: %w%s", prog, err, unsafeFix(err, prog))
		}
		return prog, nil, nil
	}
	pathEnv := pathEnvFn()
	var passed []string
	var fix string
	for _, dir := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, prog)
		err := executable(p)
		if err == nil {
			if why := unsafeChain(p); why != "" {
				err = &unsafeError{"its directory", why}
			}
		}
		if err == nil {
			err = interp(p)
		}
		if err == nil {
			return p, passed, nil
		}
		if unsafe := (*unsafeError)(nil); errors.As(err, &unsafe) {
			passed = append(passed, p+" ("+err.Error()+")")
			if fix == "" {
				fix = unsafeFix(err, p)
			}
		}
	}
	if len(passed) > 0 {
		return "", passed, fmt.Errorf("program %q is found only where another user could have put or changed it, and is not used: %s%s", prog, strings.Join(passed, "; "), fix)
	}
	return "", nil, fmt.Errorf("program %q not found in PATH %q", prog, pathEnv)
}

// unsafeFix is what to do about an unsafeError for program file p.
func unsafeFix(err error, p string) string {
	var u *unsafeError
	switch {
	case !errors.As(err, &u):
		return ""
	case u.what == "its directory" && u.why == "writable by group or others":
		return fmt.Sprintf("; if %s is yours, `chmod go-w %s`, else move the program to a directory only you (or root) can write", filepath.Dir(p), filepath.Dir(p))
	case u.what == "its directory":
		return "; move the program to a directory only you (or root) can write"
	case u.why == "writable by group or others":
		return fmt.Sprintf("; `chmod go-w %s`", p)
	}
	return "; use a program file of your own (or root's)"
}

// unsafeError: a program file, or its directory, that another user could
// change.
type unsafeError struct{ what, why string } // what "": why is the whole message

func (e *unsafeError) Error() string {
	if e.what == "" {
		return e.why
	}
	return e.what + " is " + e.why
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not executable")
	}
	if why := unsafeProgram(fi); why != "" {
		return &unsafeError{"the program file", why}
	}
	return nil
}

// argReason is a validation failure the request caused; it becomes an
// ArgError. Other errors from check are the host's problem.
type argReason string

func (r argReason) Error() string { return string(r) }

// checkStatic validates v without touching the filesystem and returns its
// canonical form ("" reason means valid): by the argument's opspec.Rule, the
// agent's own check; a path only lexically, against its root.
func (a *arg) checkStatic(v string) (string, string) {
	r := opspec.Rule{Type: a.typ, MaxLen: a.maxLen, AllowDash: a.allowDash, AllowAt: a.allowAt, AllowPlus: a.allowPlus,
		Min: a.min, Max: a.max, Values: a.values, Pattern: a.pattern, PatternSrc: a.patternSrc}
	c, why := r.Check(v)
	if why != "" || a.typ != typePath {
		return c, why
	}
	if !filepath.IsAbs(c) {
		c = filepath.Join(a.root, c)
	}
	c = filepath.Clean(c)
	if !within(a.root, c) {
		return "", "escapes the op's path root"
	}
	return c, ""
}

// check is checkStatic plus, for paths, confinement on the real filesystem.
// The rendered path is the symlink-free absolute path that was checked.
func (a *arg) check(v string) (string, error) {
	c, reason := a.checkStatic(v)
	if reason != "" {
		return "", argReason(reason)
	}
	if a.typ != typePath {
		return c, nil
	}
	return confine(a.root, c, a.mustExist)
}

// confine walks cand (lexically inside root) component by component from the
// root's real location, resolving each symlink met and requiring every step to
// stay inside the real root. Components past the longest existing prefix are
// appended as they are. A dangling symlink is refused: a later create through
// it would land wherever it points.
func confine(root, cand string, mustExist bool) (string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("path root: %w", err)
	}
	rel, err := filepath.Rel(root, cand)
	if err != nil {
		return "", argReason("escapes the op's path root")
	}
	cur := realRoot
	if rel == "." {
		return cur, nil
	}
	parts := strings.Split(rel, string(filepath.Separator))
	for i, part := range parts {
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			if mustExist {
				return "", argReason("does not exist")
			}
			return filepath.Join(append([]string{cur}, parts[i:]...)...), nil
		}
		if err != nil {
			return "", argReason("cannot be resolved (a component is not a directory or not accessible)")
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			resolved, err := filepath.EvalSymlinks(next)
			if err != nil {
				return "", argReason("goes through a dangling or looping symlink")
			}
			if !within(realRoot, resolved) {
				return "", argReason("escapes the op's path root through a symlink")
			}
			next = resolved
		}
		cur = next
	}
	return cur, nil
}

// within reports whether p is root or below it; both must be clean.
func within(root, p string) bool {
	if p == root {
		return true
	}
	if !strings.HasSuffix(root, string(filepath.Separator)) {
		root += string(filepath.Separator)
	}
	return strings.HasPrefix(p, root)
}

// badText says why s is unacceptable as a value (opspec.BadText).
func badText(s string) string { return opspec.BadText(s) }

// CatalogTextProblem says what is wrong with s as a value the catalog
// carries verbatim (opspec.TextProblem).
func CatalogTextProblem(s string, tab bool) string { return opspec.TextProblem(s, tab) }

// Invisible reports whether r shows as nothing though it is printable
// (opspec.Invisible).
func Invisible(r rune) bool { return opspec.Invisible(r) }
