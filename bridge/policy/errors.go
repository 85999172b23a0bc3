package policy

import (
	"errors"
	"strconv"
	"strings"

	"github.com/syncbridge/bridge/bridge/internal/opspec"
)

// Sentinels the daemon branches on. Each is wrapped with a reason; test with
// errors.Is.
var (
	// ErrNotAllowed: the agent is not in the policy, or the op is not in its
	// list. Checked before the op's existence so an unknown agent cannot probe
	// which ops exist.
	ErrNotAllowed = errors.New("not allowed")
	// ErrUnknownOp: the agent is known but no op of that name is defined.
	ErrUnknownOp = errors.New("unknown op")
	// ErrInvalidArg: an argument the request supplied (or left out) does not
	// satisfy the op's schema. The reason is safe to send back to the agent.
	ErrInvalidArg = opspec.ErrInvalidArg
)

// PolicyError is one problem in a policy file: where it is, what is wrong and
// what to do about it. Parse and Load return one of these, or several joined
// with errors.Join (ordered by line); errors.As finds the first.
type PolicyError struct {
	File string // as given to Parse or Load
	Line int    // 1-based; 0 when no line is known
	Key  string // dotted TOML key, e.g. ops.test.args.run.type
	Msg  string
	Hint string
}

func (e *PolicyError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Hint != "" {
		b.WriteString(" (hint: ")
		b.WriteString(e.Hint)
		b.WriteString(")")
	}
	return b.String()
}

// ArgError reports why one argument of a request was refused (opspec's):
// it matches ErrInvalidArg under errors.Is.
type ArgError = opspec.ArgError
