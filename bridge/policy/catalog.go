package policy

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/syncbridge/bridge/bridge/internal/opspec"
)

// OpInfo and ArgInfo are the catalog's descriptions of an op and its
// arguments (package opspec, which the agent shares).
type (
	OpInfo  = opspec.OpInfo
	ArgInfo = opspec.ArgInfo
)

// Catalog describes every op, sorted by name, arguments sorted by name.
// Filter with AgentOps to show an agent only what it may run.
func (p *Policy) Catalog() []OpInfo {
	out := make([]OpInfo, 0, len(p.ops))
	for _, name := range sortedKeys(p.ops) {
		o := p.ops[name]
		info := OpInfo{
			Name:        name,
			Description: o.description,
			Scope:       o.scope,
			Approve:     o.approve,
			Idempotent:  o.idempotent,
			Timeout:     o.timeout.String(),
			MaxOutput:   o.maxOutput,
			MaxStdin:    o.maxStdin,
			StdinHint:   o.stdinHint,
			Risk:        o.risk,
			DryRun:      o.dryRun,
			Undo:        o.undo,
			Args:        []ArgInfo{},
		}
		if o.stdinSet {
			info.Stdin = o.stdin
		}
		for _, an := range sortedKeys(o.args) {
			a := o.args[an]
			ai := ArgInfo{
				Name:        an,
				Type:        a.typ,
				Description: a.description,
				Required:    a.required,
				Pattern:     a.patternSrc,
				MaxLen:      a.maxLen,
				AllowDash:   a.allowDash,
				AllowAt:     a.allowAt,
				AllowPlus:   a.allowPlus,
				Min:         a.min,
				Max:         a.max,
				Values:      append([]string(nil), a.values...),
				MustExist:   a.mustExist,
			}
			if a.def != nil {
				d := *a.def
				if a.typ == typePath {
					// The canonical default is rooted; show it relative so the
					// root (a host detail) stays private.
					d = relToRoot(a.root, d)
				}
				ai.Default = &d
			}
			info.Args = append(info.Args, ai)
		}
		out = append(out, info)
	}
	return out
}

// AgentCatalog is the part of Catalog agent may see: the ops it may run,
// and of their dry_run and undo ops only those it may run too.
func (p *Policy) AgentCatalog(agent string) []OpInfo {
	allowed := map[string]bool{}
	for _, n := range p.agents[agent] {
		allowed[n] = true
	}
	out := []OpInfo{}
	for _, info := range p.Catalog() {
		if !allowed[info.Name] {
			continue
		}
		if !allowed[info.DryRun] {
			info.DryRun = ""
		}
		if !allowed[info.Undo] {
			info.Undo = ""
		}
		out = append(out, info)
	}
	return out
}

// AgentOps lists the ops agent may run, sorted; nil for an unknown agent.
func (p *Policy) AgentOps(agent string) []string {
	ops, ok := p.agents[agent]
	if !ok {
		return nil
	}
	return append([]string{}, ops...)
}

// Agents lists the agent names in the policy, sorted.
func (p *Policy) Agents() []string { return sortedKeys(p.agents) }

// Explain describes op as the host sees it, templates included, for
// `bridge policy explain`. It is for the host's operator, not for agents.
func (p *Policy) Explain(opName string) (string, error) {
	o := p.ops[opName]
	if o == nil {
		return "", fmt.Errorf("%w: %q", ErrUnknownOp, opName)
	}
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "%-12s %s\n", k+":", v) }
	line("op", o.name)
	if o.description != "" {
		line("description", o.description)
	}
	line("argv", joinTemplates(o.argv))
	if o.reconcile != nil {
		line("reconcile", joinTemplates(o.reconcile))
	}
	line("dir", o.dir)
	line("env", strings.Join(o.env, " "))
	if len(o.setEnv) > 0 {
		line("set_env", strings.Join(sortedKeys(o.setEnv), " "))
	}
	line("timeout", o.timeout.String())
	line("max_output", strconv.FormatInt(o.maxOutput, 10))
	line("max_stdin", strconv.FormatInt(o.maxStdin, 10))
	stdin := o.stdin
	if o.stdinHint != "" {
		stdin += " (" + o.stdinHint + ")"
	}
	line("stdin", stdin)
	line("scope", o.scope)
	if o.risk != "" {
		line("risk", o.risk)
	}
	line("idempotent", strconv.FormatBool(o.idempotent))
	line("approve", strconv.FormatBool(o.approve))
	line("concurrency", concurrencyString(o.concurrency))
	if o.scope != ScopeRead {
		line("safety net", p.safetyNet(o))
	}
	if o.limits != (Limits{}) {
		line("limits", o.limits.String())
	}
	var agents []string
	for _, a := range sortedKeys(p.agents) {
		for _, n := range p.agents[a] {
			if n == opName {
				agents = append(agents, a)
			}
		}
	}
	line("agents", strings.Join(agents, " "))
	for _, an := range sortedKeys(o.args) {
		a := o.args[an]
		var d []string
		d = append(d, a.typ)
		if a.required {
			d = append(d, "required")
		}
		if a.def != nil {
			d = append(d, "default="+strconv.Quote(*a.def))
		}
		switch a.typ {
		case typeString:
			if a.patternSrc != "" {
				d = append(d, "pattern="+strconv.Quote(a.patternSrc))
			}
			d = append(d, "max_len="+strconv.Itoa(a.maxLen))
			if a.allowDash {
				d = append(d, "allow_dash")
			}
			if a.allowAt {
				d = append(d, "allow_at")
			}
			if a.allowPlus {
				d = append(d, "allow_plus")
			}
		case typeInt:
			d = append(d, "min="+strconv.FormatInt(*a.min, 10))
			if a.max != nil {
				d = append(d, "max="+strconv.FormatInt(*a.max, 10))
			}
		case typeEnum:
			d = append(d, "values="+strings.Join(a.values, ","))
		case typePath:
			d = append(d, "root="+a.root)
			if a.mustExist {
				d = append(d, "must_exist")
			}
		}
		line("arg "+an, strings.Join(d, " "))
	}
	return b.String(), nil
}

// QuoteArgv is argv as Invocation.String shows it (quoted as a shell would
// need it, for reading only): the audit log's lines say it the same way as
// `bridge pending`.
func QuoteArgv(argv []string) string { return quoteArgv(argv) }

// String prints the invocation for a human: argv quoted as a shell would
// need it ($'...' for a value with a line break, a control or an invisible
// character; for reading only: it is never run through a shell) and environment
// names without values, which may be secrets.
func (inv *Invocation) String() string {
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "%-12s %s\n", k+":", v) }
	line("op", inv.Op)
	line("argv", quoteArgv(inv.Argv))
	if inv.Reconcile != nil {
		line("reconcile", quoteArgv(inv.Reconcile))
	}
	line("dir", shellQuote(inv.Dir))
	names := make([]string, len(inv.Env))
	for i, kv := range inv.Env {
		names[i], _, _ = strings.Cut(kv, "=")
	}
	line("env", strings.Join(names, " "))
	line("timeout", inv.Timeout.String())
	line("max_output", strconv.FormatInt(inv.MaxOutput, 10))
	line("max_stdin", strconv.FormatInt(inv.MaxStdin, 10))
	if inv.Stdin != "" {
		line("stdin", inv.Stdin)
	}
	line("scope", inv.Scope)
	line("idempotent", strconv.FormatBool(inv.Idempotent))
	line("approve", strconv.FormatBool(inv.Approve))
	line("concurrency", concurrencyString(inv.Concurrency))
	keys := make([]string, 0, len(inv.Args))
	for k := range inv.Args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		line("arg "+k, shellQuote(inv.Args[k]))
	}
	return b.String()
}

func concurrencyString(c int) string {
	if c == 0 {
		return "unlimited"
	}
	return strconv.Itoa(c)
}

func joinTemplates(ts []tmpl) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = strconv.Quote(t.String())
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func quoteArgv(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = shellQuote(a)
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	first, _ := utf8.DecodeRuneInString(s)
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || Invisible(r) }) >= 0 || !utf8.ValidString(s) ||
		unicode.Is(unicode.Mn, first) { // a mark at the start joins what is shown before it
		// A line break, a control or an invisible character (a resolved
		// path may hold any): written as escapes, so that no value can
		// start a line of its own in what a human approves, in the
		// $'...' form bash, zsh and ksh read back as the same bytes.
		return ansiQuote(s)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ansiQuote is s as a $'...' word: printable characters as they are but
// for \ and ', everything else as an escape (\n, \t, \xHH, \uHHHH).
func ansiQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && !unicode.IsPrint(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case (!unicode.IsPrint(r) || Invisible(r) || i == 0 && unicode.Is(unicode.Mn, r)) && r <= 0xFFFF:
			fmt.Fprintf(&b, `\u%04x`, r)
		case !unicode.IsPrint(r) || Invisible(r):
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	b.WriteByte('\'')
	return b.String()
}

func relToRoot(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}

// safetyNet says what lets an agent look before a write op leaps and take
// it back after: its dry_run twin and undo op, or which of them it lacks.
func (p *Policy) safetyNet(o *op) string {
	var parts []string
	if o.dryRun != "" {
		parts = append(parts, "dry run: "+o.dryRun)
	}
	if o.undo != "" {
		parts = append(parts, "undo: "+o.undo)
	}
	for _, n := range sortedKeys(p.ops) {
		// Ops that name this one as theirs, from either side.
		if q := p.ops[n]; q.dryRun == o.name {
			parts = append(parts, "dry run of "+n)
		} else if q.undo == o.name {
			parts = append(parts, "undoes "+n)
		}
	}
	if len(parts) == 0 {
		return "none declared (dry_run = \"OP\" names a checking twin, undo = \"OP\" an op that takes it back; docs/POLICY.md)"
	}
	return strings.Join(parts, ", ")
}
