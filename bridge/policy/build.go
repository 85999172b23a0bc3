package policy

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge/internal/opspec"
)

// Limits and defaults of the schema (see doc.go).
const (
	defaultTimeout     = 10 * time.Minute
	maxTimeout         = 24 * time.Hour
	defaultMaxOutput   = 4 << 20
	maxMaxOutput       = 256 << 20
	defaultMaxStdin    = 1 << 20
	maxMaxStdin        = 4 << 30 // the largest payload a request may pin
	defaultMaxLen      = 256
	maxMaxLen          = opspec.MaxLen
	defaultConcurrency = 1
	maxConcurrency     = 1 << 16
	maxDescription     = 4096
)

// Argument types.
const (
	typeString = opspec.TypeString
	typeInt    = opspec.TypeInt
	typeBool   = opspec.TypeBool
	typeEnum   = opspec.TypeEnum
	typePath   = opspec.TypePath
)

var (
	nameRE    = lazyRegexp(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	envNameRE = lazyRegexp(`^[A-Z_][A-Z0-9_]*$`)
)

// reservedVars are template variables the policy may use but an op may not
// declare as arguments: Render fills agent and op, the daemon supplies the
// rest through RenderContext.Vars.
var reservedVars = map[string]bool{"request_id": true, "agent": true, "op": true}

// Policy is a parsed, validated policy. It is immutable and safe for
// concurrent use.
type Policy struct {
	Name    string // file name as given to Load or Parse
	SHA256  string // hex SHA-256 of the exact file bytes; receipts name it
	Version int    // 1

	ops      map[string]*op
	agents   map[string][]string // sorted op names
	ceilings map[string]Ceilings // by agent (safety.go)
	redact   *Redaction
}

type op struct {
	name        string
	description string
	argv        []tmpl
	reconcile   []tmpl // nil: none
	dir         string
	timeout     time.Duration
	maxOutput   int64
	maxStdin    int64    // bytes of standard input a request may carry; 0: none
	env         []string // names passed from the daemon's environment, sorted
	setEnv      map[string]string
	idempotent  bool
	approve     bool
	concurrency int
	scope       string
	risk        string // a free note on what the op really does, for agents
	stdin       string // none | optional | required
	stdinSet    bool   // stdin was written in the policy (the catalog then carries it)
	stdinHint   string // what the input is ("unified diff")
	dryRun      string // the op that checks what this one would do, without doing it
	undo        string // the op that undoes this one
	limits      Limits
	args        map[string]*arg
}

type arg struct {
	name        string
	typ         string
	description string
	required    bool
	def         *string // canonical default, nil: none
	patternSrc  string
	pattern     *regexp.Regexp // anchored
	maxLen      int
	allowDash   bool // a leading '-' (an option) is allowed
	allowAt     bool // a leading '@' (a response file to gcc, javac, ld) is allowed
	allowPlus   bool // a leading '+' (a forced refspec to git push) is allowed
	min, max    *int64
	values      []string
	root        string
	mustExist   bool
}

func (b *builder) build(d *fileDoc) *Policy {
	p := &Policy{Version: 1, ops: map[string]*op{}, agents: map[string][]string{}, ceilings: map[string]Ceilings{}}
	p.redact = b.redaction(d.Redact)
	if d.Version != nil && *d.Version != 1 {
		b.errAt([]string{"version"}, "this bridge reads version = 1", "unsupported version %d", *d.Version)
	}

	defTimeout := defaultTimeout
	defMaxOutput := int64(defaultMaxOutput)
	defMaxStdin := int64(defaultMaxStdin)
	var defEnv []string
	if d.Defaults != nil {
		if d.Defaults.Timeout != nil {
			defTimeout = b.timeout([]string{"defaults", "timeout"}, *d.Defaults.Timeout)
		}
		if d.Defaults.MaxOutput != nil {
			defMaxOutput = b.size([]string{"defaults", "max_output"}, d.Defaults.MaxOutput)
		}
		if d.Defaults.MaxStdin != nil {
			defMaxStdin = b.stdinSize([]string{"defaults", "max_stdin"}, d.Defaults.MaxStdin)
		}
		if d.Defaults.Env != nil {
			defEnv = b.envNames([]string{"defaults", "env"}, *d.Defaults.Env)
		}
	}
	approveWrites := d.Defaults != nil && d.Defaults.ApproveWrites != nil && *d.Defaults.ApproveWrites

	for _, name := range sortedKeys(d.Ops) {
		od := d.Ops[name]
		at := []string{"ops", name}
		if !nameRE().MatchString(name) {
			b.errAt(at, "op names are lowercase: [a-z0-9][a-z0-9._-]{0,63}", "invalid op name %q", name)
			continue
		}
		if od == nil {
			continue
		}
		o := b.op(name, od, defTimeout, defMaxOutput, defEnv)
		o.maxStdin = defMaxStdin
		if od.MaxStdin != nil {
			o.maxStdin = b.stdinSize(append(at, "max_stdin"), od.MaxStdin)
		}
		b.stdinMode(o, od, at)
		if approveWrites && od.Approve == nil && o.scope == "write" {
			o.approve = true // a mutating op waits for a human unless it says otherwise
		}
		p.ops[name] = o
	}

	for _, name := range sortedKeys(p.ops) {
		o := p.ops[name]
		for _, ref := range []struct{ key, op string }{{"dry_run", o.dryRun}, {"undo", o.undo}} {
			switch {
			case ref.op == "":
			case ref.op == name:
				b.errAt([]string{"ops", name, ref.key}, "name another op", "%s names the op itself", ref.key)
			case d.Ops[ref.op] == nil:
				b.errAt([]string{"ops", name, ref.key}, "define it as [ops."+ref.op+"] or remove the key; defined ops: "+strings.Join(sortedKeys(d.Ops), ", "), "op %q is not defined", ref.op)
			}
		}
	}

	for _, name := range sortedKeys(d.Agents) {
		ad := d.Agents[name]
		at := []string{"agents", name}
		if !nameRE().MatchString(name) {
			b.errAt(at, "agent names are lowercase: [a-z0-9][a-z0-9._-]{0,63}", "invalid agent name %q", name)
			continue
		}
		if ad == nil || ad.Ops == nil {
			b.errAt(at, `list what it may run: ops = ["test"]`, "missing ops")
			continue
		}
		seen := map[string]bool{}
		list := []string{}
		for _, on := range *ad.Ops {
			k := append(at, "ops")
			switch {
			case on == "*":
				b.errAt(k, "list each op by name: a wildcard would silently grant ops added later", `"*" is not allowed`)
			case seen[on]:
				b.errAt(k, "list each op once", "op %q listed twice", on)
			case d.Ops[on] == nil:
				b.errAt(k, "define it as [ops."+on+"] or remove it; defined ops: "+strings.Join(sortedKeys(d.Ops), ", "), "op %q is not defined", on)
			default:
				seen[on] = true
				list = append(list, on)
			}
		}
		sort.Strings(list)
		p.agents[name] = list
		p.ceilings[name] = b.ceilings(name, ad)
	}
	return p
}

func (b *builder) op(name string, d *opDoc, defTimeout time.Duration, defMaxOutput int64, defEnv []string) *op {
	at := func(k ...string) []string { return append([]string{"ops", name}, k...) }
	o := &op{
		name:        name,
		timeout:     defTimeout,
		maxOutput:   defMaxOutput,
		env:         defEnv,
		concurrency: defaultConcurrency,
		scope:       "write",
		args:        map[string]*arg{},
	}
	if d.Description != nil {
		o.description = b.text(at("description"), *d.Description)
	}

	for _, an := range sortedKeys(d.Args) {
		ad := d.Args[an]
		k := at("args", an)
		switch {
		case !opspec.ValidArgName(an):
			b.errAt(k, "argument names are [a-z][a-z0-9_]{0,31}", "invalid argument name %q", an)
			continue
		case reservedVars[an]:
			b.errAt(k, "request_id, agent and op are filled in by the bridge; pick another name", "argument name %q is reserved", an)
			continue
		case ad == nil:
			continue
		}
		if a := b.arg(k, an, ad); a != nil {
			o.args[an] = a
		}
	}

	used := map[string]bool{}
	if d.Argv == nil {
		b.errAt(at(), `every op needs argv = ["/path/to/cmd", "arg", "{name}"]`, "missing argv")
	} else {
		o.argv = b.argv(at("argv"), d.Argv, d.Args, used)
	}
	if d.Reconcile != nil {
		o.reconcile = b.argv(at("reconcile"), *d.Reconcile, d.Args, used)
	}
	for _, an := range sortedKeys(o.args) {
		if !used[an] {
			b.errAt(at("args", an), "use it in argv as {"+an+"} or remove it", "argument %q is never used", an)
		}
	}

	dir := "~"
	if d.Dir != nil {
		dir = *d.Dir
	}
	o.dir = b.absPath(at("dir"), dir)

	if d.Timeout != nil {
		o.timeout = b.timeout(at("timeout"), *d.Timeout)
	}
	if d.MaxOutput != nil {
		o.maxOutput = b.size(at("max_output"), d.MaxOutput)
	}
	if d.Env != nil {
		o.env = b.envNames(at("env"), *d.Env)
	}
	if d.SetEnv != nil {
		o.setEnv = map[string]string{}
		for _, n := range sortedKeys(d.SetEnv) {
			v := d.SetEnv[n]
			if !b.envName(at("set_env", n), n) {
				continue
			}
			if strings.IndexByte(v, 0) >= 0 {
				b.errAt(at("set_env", n), "environment values cannot hold NUL", "value contains NUL")
				continue
			}
			for _, e := range o.env {
				if e == n {
					b.errAt(at("set_env", n), "remove it from env or from set_env", "%s is both passed through (env) and set (set_env)", n)
				}
			}
			o.setEnv[n] = v
		}
	}
	if d.Idempotent != nil {
		o.idempotent = *d.Idempotent
	}
	if d.Approve != nil {
		o.approve = *d.Approve
	}
	if d.Concurrency != nil {
		c := *d.Concurrency
		if c < 0 || c > maxConcurrency {
			b.errAt(at("concurrency"), "1 runs one at a time, 0 means unlimited", "concurrency %d out of range 0..%d", c, maxConcurrency)
		} else {
			o.concurrency = int(c)
		}
	}
	if d.Scope != nil {
		switch *d.Scope {
		case ScopeRead, ScopeWrite, ScopeExecute:
			o.scope = *d.Scope
		default:
			b.errAt(at("scope"), `"read", "write" or "execute"`, "unknown scope %q", *d.Scope)
		}
	}
	if d.Risk != nil {
		o.risk = b.text(at("risk"), *d.Risk)
	}
	for _, ref := range []struct {
		key string
		v   *string
		to  *string
	}{{"dry_run", d.DryRun, &o.dryRun}, {"undo", d.Undo, &o.undo}} {
		if ref.v == nil {
			continue
		}
		if !nameRE().MatchString(*ref.v) {
			b.errAt(at(ref.key), "the name of another op of this policy", "invalid op name %q", *ref.v)
			continue
		}
		*ref.to = *ref.v
	}
	o.limits = b.limits(name, d)
	return o
}

func (b *builder) arg(at []string, name string, d *argDoc) *arg {
	k := func(s string) []string { return append(append([]string{}, at...), s) }
	if d.Type == nil {
		b.errAt(at, "add type = one of string, int, bool, enum, path", "missing type")
		return nil
	}
	a := &arg{name: name, typ: *d.Type, required: true}
	switch a.typ {
	case typeString, typeInt, typeBool, typeEnum, typePath:
	default:
		hint := "one of string, int, bool, enum, path"
		if s := closest(a.typ, []string{typeString, typeInt, typeBool, typeEnum, typePath}); s != "" {
			hint = fmt.Sprintf("did you mean %q? one of string, int, bool, enum, path", s)
		}
		b.errAt(k("type"), hint, "unknown type %q", a.typ)
		return nil
	}
	if d.Description != nil {
		a.description = b.text(k("description"), *d.Description)
	}

	// Keys that belong to another type are mistakes, not no-ops.
	misplaced := func(key string, set bool, types ...string) {
		if !set {
			return
		}
		for _, t := range types {
			if t == a.typ {
				return
			}
		}
		b.errAt(k(key), key+" applies to type "+strings.Join(types, ", "), "%s does not apply to type %s", key, a.typ)
	}
	misplaced("pattern", d.Pattern != nil, typeString)
	misplaced("max_len", d.MaxLen != nil, typeString)
	misplaced("allow_dash", d.AllowDash != nil, typeString)
	misplaced("allow_at", d.AllowAt != nil, typeString)
	misplaced("allow_plus", d.AllowPlus != nil, typeString)
	misplaced("min", d.Min != nil, typeInt)
	misplaced("max", d.Max != nil, typeInt)
	misplaced("values", d.Values != nil, typeEnum)
	misplaced("root", d.Root != nil, typePath)
	misplaced("must_exist", d.MustExist != nil, typePath)

	ok := true
	switch a.typ {
	case typeString:
		a.maxLen = defaultMaxLen
		if d.MaxLen != nil {
			if *d.MaxLen < 1 || *d.MaxLen > maxMaxLen {
				b.errAt(k("max_len"), fmt.Sprintf("1..%d bytes", maxMaxLen), "max_len %d out of range", *d.MaxLen)
				ok = false
			} else {
				a.maxLen = int(*d.MaxLen)
			}
		}
		if d.AllowDash != nil {
			a.allowDash = *d.AllowDash
		}
		if d.AllowAt != nil {
			a.allowAt = *d.AllowAt
		}
		if d.AllowPlus != nil {
			a.allowPlus = *d.AllowPlus
		}
		if d.Pattern != nil {
			a.patternSrc = *d.Pattern
			re, err := regexp.Compile(`^(?:` + *d.Pattern + `)$`)
			if r := CatalogTextProblem(*d.Pattern, true); r != "" {
				// The catalog carries it to the agent as it is.
				b.errAt(k("pattern"), `write such a character as an escape (\x{202E}, \n)`, "bad pattern: %s", r)
				ok = false
			} else if err != nil {
				b.errAt(k("pattern"), "Go regexp syntax (RE2); it is anchored for you", "bad pattern: %v", err)
				ok = false
			} else {
				a.pattern = re
			}
		}
	case typeInt:
		zero := int64(0)
		a.min, a.max = &zero, d.Max
		if d.Min != nil {
			a.min = d.Min
		}
		if a.max != nil && *a.min > *a.max {
			b.errAt(k("max"), "min must not exceed max (min defaults to 0)", "max %d is below min %d", *a.max, *a.min)
			ok = false
		}
	case typeEnum:
		if d.Values == nil || len(*d.Values) == 0 {
			b.errAt(at, `add values = ["a", "b"]`, "enum without values")
			ok = false
			break
		}
		seen := map[string]bool{}
		for _, v := range *d.Values {
			if r := CatalogTextProblem(v, false); r != "" || v == "" {
				if v == "" {
					r = "empty"
				}
				b.errAt(k("values"), "enum values are short printable strings", "bad value %q: %s", v, r)
				ok = false
				continue
			}
			if seen[v] {
				b.errAt(k("values"), "list each value once", "value %q listed twice", v)
				ok = false
			}
			seen[v] = true
			a.values = append(a.values, v)
		}
	case typePath:
		if d.Root == nil {
			b.errAt(at, `paths are confined: add root = "~/src" (absolute or ~)`, "path without root")
			ok = false
			break
		}
		a.root = b.absPath(k("root"), *d.Root)
		if a.root == "" {
			ok = false
		}
		if d.MustExist != nil {
			a.mustExist = *d.MustExist
		}
	}

	if d.Required != nil {
		a.required = *d.Required
	}
	if d.Default != nil {
		if d.Required != nil && *d.Required {
			b.errAt(k("required"), "drop required = true or drop the default", "required = true contradicts a default")
			ok = false
		}
		a.required = false
		if ok {
			if v, reason := defaultString(a.typ, d.Default); reason != "" {
				b.errAt(k("default"), "the default must be a valid value of the argument's own type", "%s", reason)
				ok = false
			} else if cv, reason := a.checkStatic(v); reason != "" {
				b.errAt(k("default"), "the default must be a valid value of the argument's own type", "default %q: %s", v, reason)
				ok = false
			} else if reason := CatalogTextProblem(cv, false); reason != "" {
				b.errAt(k("default"), "the catalog shows the default to the agent as it is", "default %q: %s", v, reason)
				ok = false
			} else {
				a.def = &cv
			}
		}
	}
	if !ok {
		return nil
	}
	return a
}

// Scopes: what an op does to the host, as the policy's author declares it.
const (
	ScopeRead    = "read"    // reads only
	ScopeWrite   = "write"   // changes files or state
	ScopeExecute = "execute" // runs code it does not fix itself (tests, builds, scripts from a tree)
)

// Stdin modes: whether an op reads standard input.
const (
	StdinNone     = opspec.StdinNone     // takes none (max_stdin 0)
	StdinOptional = opspec.StdinOptional // may be given
	StdinRequired = opspec.StdinRequired // must be given, at least one byte
)

// DefaultStdin is the mode of an op whose policy (or catalog) does not say:
// optional when it takes any input, none when max_stdin is 0.
func DefaultStdin(maxStdin int64) string { return opspec.DefaultStdin(maxStdin) }

// stdinMode reads stdin and stdin_hint, and squares them with max_stdin.
func (b *builder) stdinMode(o *op, d *opDoc, at []string) {
	k := func(s string) []string { return append(append([]string{}, at...), s) }
	o.stdin = DefaultStdin(o.maxStdin)
	if d.Stdin != nil {
		switch *d.Stdin {
		case StdinNone:
			if d.MaxStdin != nil && o.maxStdin > 0 {
				b.errAt(k("stdin"), "drop max_stdin, or say stdin = \"optional\" or \"required\"", "stdin = \"none\" but max_stdin is %d", o.maxStdin)
			}
			o.maxStdin = 0
		case StdinOptional, StdinRequired:
			if o.maxStdin == 0 {
				b.errAt(k("stdin"), "set max_stdin to the most input the op takes (e.g. \"1MiB\")", "stdin = %q but max_stdin is 0", *d.Stdin)
			}
		default:
			hint := `"none", "optional" or "required"`
			if s := closest(*d.Stdin, []string{StdinNone, StdinOptional, StdinRequired}); s != "" {
				hint = fmt.Sprintf("did you mean %q? %s", s, hint)
			}
			b.errAt(k("stdin"), hint, "unknown stdin mode %q", *d.Stdin)
			return
		}
		o.stdin, o.stdinSet = *d.Stdin, true
	}
	if d.StdinHint != nil {
		if o.stdin == StdinNone {
			b.errAt(k("stdin_hint"), "an op that takes no standard input needs no hint", "stdin_hint without standard input")
			return
		}
		o.stdinHint = b.text(k("stdin_hint"), *d.StdinHint)
	}
}
