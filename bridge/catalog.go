package bridge

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge/internal/opspec"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Catalog is the signed body of ops.catalog (SPEC §10a): the ops one agent
// may run on one host, so it can discover what to ask before it asks.
type Catalog struct {
	V      int    `json:"v"`
	Host   string `json:"host"`
	Agent  string `json:"agent"`
	Policy string `json:"policy_sha256"`
	// Issued orders the catalogs a host signs for one agent: when it
	// signed it, in Unix milliseconds on its clock, and always above the
	// last one it signed for that agent. A folder writer can put back any
	// catalog the host ever signed; the agent keeps the newest it has seen
	// (v 2; 0 in a v 1 catalog, from before the field).
	Issued int64           `json:"issued,omitempty"`
	Ops    []opspec.OpInfo `json:"ops"`

	// Warning and Stale are set by the agent that read the catalog, never
	// signed. Warning: why it may not be what the host runs now (an older
	// catalog put back in the folder, a policy the host's newer liveness
	// stamp names and this catalog does not, a date ahead of this clock).
	// Stale: it may describe another policy than the host's, so no op is
	// offered as safe to run again and no call is checked against it.
	Warning string `json:"-"`
	Stale   bool   `json:"-"`
}

// CatalogVersion is the version of the catalogs this release signs.
const CatalogVersion = 2

// SignCatalog returns the signed ops.catalog file.
func SignCatalog(c Catalog, host *bcrypto.Identity) ([]byte, error) {
	c.V = CatalogVersion
	if c.Issued <= 0 {
		return nil, errors.New("sign catalog: no issue time")
	}
	body, err := bcrypto.EncodeBody(c)
	if err != nil {
		return nil, err
	}
	return bcrypto.Sign(bcrypto.KindCatalog, body, host)
}

// OpenCatalog verifies a catalog file from host for agent under any of
// hostKeys.
func OpenCatalog(data []byte, host, agent string, hostKeys [][]byte) (*Catalog, error) {
	var cat Catalog
	if err := OpenBody(bcrypto.KindCatalog, data, hostKeys, &cat); err != nil {
		return nil, fmt.Errorf("host catalog: %w", err)
	}
	switch {
	case cat.V != 1 && cat.V != CatalogVersion:
		return nil, fmt.Errorf("host catalog: %w: v=%d", bcrypto.ErrUnknownVersion, cat.V)
	case (cat.V == 1) != (cat.Issued == 0) || cat.Issued < 0:
		return nil, fmt.Errorf("host catalog: %w: issued", bcrypto.ErrMalformed)
	case cat.Host != host || cat.Agent != agent:
		return nil, fmt.Errorf("host catalog: %w", ErrWrongRecipient)
	}
	if cat.Policy != "" && !validSHA256Hex(cat.Policy) {
		return nil, fmt.Errorf("host catalog: %w: policy_sha256 is not a SHA-256", bcrypto.ErrMalformed)
	}
	for i := range cat.Ops {
		op := &cat.Ops[i]
		switch op.Stdin {
		case "", opspec.StdinNone, opspec.StdinOptional, opspec.StdinRequired:
		default:
			return nil, fmt.Errorf("host catalog: %w: op %q: unknown stdin mode", bcrypto.ErrMalformed, op.Name)
		}
		// What the agent matches or sends as it is (names, the scope, the
		// time limit, an argument's pattern, values and default) must be
		// what a policy can say: a host that signs anything else is not
		// believed (a line break there reached the model as it was).
		if err := checkCatalogOp(op); err != nil {
			return nil, fmt.Errorf("host catalog: %w: op %q: %v", bcrypto.ErrMalformed, op.Name, err)
		}
		// The host's words, made safe once for every place they reach
		// the agent and its model (HostText).
		op.Description, op.StdinHint, op.Risk = HostText(op.Description), HostText(op.StdinHint), HostText(op.Risk)
		for j := range op.Args {
			op.Args[j].Description = HostText(op.Args[j].Description)
		}
	}
	return &cat, nil
}

// checkCatalogOp refuses what no policy writes in a catalog entry.
func checkCatalogOp(op *opspec.OpInfo) error {
	// What the host's own policy refuses at load in a pattern, an enum
	// value or a default (opspec.TextProblem), so that no catalog a
	// policy writes is refused and none a hostile host writes carries
	// invisible text to the model.
	printable := func(s string, tab bool) bool { return opspec.TextProblem(s, tab) == "" }
	switch {
	case !validOpName(op.Name) && op.Name != PingOp:
		return errors.New("not an op name")
	case op.DryRun != "" && !validOpName(op.DryRun), op.Undo != "" && !validOpName(op.Undo):
		return errors.New("dry_run or undo is not an op name")
	case op.Scope != "read" && op.Scope != "write" && op.Scope != "execute":
		return fmt.Errorf("unknown scope %q", op.Scope)
	}
	if _, err := time.ParseDuration(op.Timeout); err != nil {
		return fmt.Errorf("timeout: %v", err)
	}
	for _, a := range op.Args {
		switch a.Type {
		case "string", "int", "bool", "enum", "path":
		default:
			return fmt.Errorf("argument %q: unknown type", a.Name)
		}
		ok := validArgName(a.Name) && printable(a.Pattern, true) && (a.Default == nil || printable(*a.Default, false))
		for _, v := range a.Values {
			ok = ok && printable(v, false)
		}
		if !ok {
			return fmt.Errorf("argument %q: a name, pattern, value or default no policy writes", a.Name)
		}
	}
	return nil
}

// CallInput is what a sender knows of a call's standard input before it
// reads it.
type CallInput struct {
	Given bool  // standard input goes with the call
	Len   int64 // its length; -1: not known before it is read (a pipe)
}

// CallError is a call the catalog says the host would refuse. Reason is the
// host's reason code for the same refusal (not-allowed, bad-argument,
// too-large); Err carries a hint (a *HintError).
type CallError struct {
	Reason ReasonCode
	Err    error
}

func (e *CallError) Error() string { return e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// CheckCall checks a call against the catalog before it is sent: the op is
// listed, its arguments fit their schema (opspec.OpInfo.CheckArgs), and its
// standard input fits the op's stdin mode and max_stdin. A typo is refused
// in milliseconds with a "did you mean" instead of after a round trip
// through the sync. The catalog may lag the host's policy by one sync, so a
// caller that knows the policy changed may send anyway; the host decides.
// The built-in ping is always fine.
func (c *Catalog) CheckCall(op string, args map[string]string, in CallInput) error {
	if op == PingOp {
		return nil
	}
	var info *opspec.OpInfo
	names := make([]string, len(c.Ops))
	for i := range c.Ops {
		names[i] = c.Ops[i].Name
		if c.Ops[i].Name == op {
			info = &c.Ops[i]
		}
	}
	if info == nil {
		hint := "`bridge ops` lists what this agent may run: " + strings.Join(names, ", ")
		if s := opspec.Suggest(op, names); s != "" {
			hint = fmt.Sprintf("did you mean %q? %s", s, hint)
		} else {
			hint += "; if the host's policy added it since this catalog was signed, `--no-check` sends it for the host to decide"
		}
		if len(names) == 0 {
			hint = "the host's policy lets this agent run no op; ask the host's owner"
		}
		return &CallError{Reason: ReasonNotAllowed, Err: WithHint(fmt.Errorf("op %q is not in the host's catalog; nothing was sent", op), "%s", hint)}
	}
	if err := info.CheckArgs(args); err != nil {
		return &CallError{Reason: ReasonBadArgument, Err: WithHint(fmt.Errorf("%w; nothing was sent", err), "%s", usageHint(info))}
	}
	what := "standard input"
	if info.StdinHint != "" {
		what += " (" + info.StdinHint + ")"
	}
	switch mode := info.StdinMode(); {
	case mode == opspec.StdinNone && in.Given && in.Len != 0:
		return &CallError{Reason: "too-large", Err: WithHint(fmt.Errorf("op %q takes no standard input; nothing was sent", op),
			"drop --stdin (and any < redirection); %s", usageHint(info))}
	case mode == opspec.StdinRequired && (!in.Given || in.Len == 0):
		return &CallError{Reason: ReasonBadArgument, Err: WithHint(fmt.Errorf("op %q needs %s and none was given; nothing was sent", op, what),
			"%s", usageHint(info))}
	case in.Given && in.Len > info.MaxStdin:
		return &CallError{Reason: "too-large", Err: WithHint(fmt.Errorf("%w: standard input is %d bytes; op %s takes at most %d (max_stdin in the host's catalog); nothing was sent", ErrTooLarge, in.Len, op, info.MaxStdin),
			"send less, or ask the host's owner to raise max_stdin")}
	}
	return nil
}

// usageHint is "usage: " and the op's example line.
func usageHint(info *opspec.OpInfo) string {
	return "usage: " + ExampleLine(info)
}

// ExampleLine is a ready command line for op, as an agent would type it:
// each required argument as NAME=<type> (an enum's first value, a path as
// <path>), then each optional one (or one with a default) as
// [NAME=<type>], and --stdin=FILE when the op needs input ([--stdin=FILE]
// when its policy declares it optional).
func ExampleLine(info *opspec.OpInfo) string {
	parts := []string{"bridge run", info.Name}
	var optional []string
	for _, a := range info.Args {
		v := "<" + a.Type + ">"
		if len(a.Values) > 0 {
			v = shellWord(a.Values[0]) // the host's text: a ready line must not run any of it
		}
		if !a.Required || a.Default != nil {
			optional = append(optional, "["+a.Name+"="+v+"]")
			continue
		}
		parts = append(parts, a.Name+"="+v)
	}
	parts = append(parts, optional...)
	switch {
	case info.StdinMode() == opspec.StdinRequired:
		parts = append(parts, "--stdin=FILE")
	case info.Stdin == opspec.StdinOptional:
		// Said only when the policy says it: every op takes input by
		// default, and most want none.
		parts = append(parts, "[--stdin=FILE]")
	}
	return strings.Join(parts, " ")
}

// shellWord is s as one word a POSIX shell reads back as s: as it is when
// it holds only characters no shell treats specially, else single-quoted.
func shellWord(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:@%+=,", r))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Invisible reports whether r shows as nothing though it is printable
// (opspec.Invisible), for the command line's escaping.
func Invisible(r rune) bool { return opspec.Invisible(r) }

// Suggest returns the name in names closest to s (at most two edits
// away), or "": the "did you mean" of a mistyped op, for the command line,
// which does not import the policy package.
func Suggest(s string, names []string) string { return opspec.Suggest(s, names) }

// OpInfo and ArgInfo are the catalog's public descriptions of an op and its
// arguments (opspec.OpInfo, opspec.ArgInfo), named here so the command line
// and the MCP server need not import the host's policy package.
type (
	OpInfo  = opspec.OpInfo
	ArgInfo = opspec.ArgInfo
)

// Stdin modes of an op (opspec.StdinNone, ...), for the same readers.
const (
	StdinNone     = opspec.StdinNone
	StdinOptional = opspec.StdinOptional
	StdinRequired = opspec.StdinRequired
)
