package opspec

import (
	"errors"
	"fmt"
)

// Argument types.
const (
	TypeString = "string"
	TypeInt    = "int"
	TypeBool   = "bool"
	TypeEnum   = "enum"
	TypePath   = "path"
)

// MaxLen is the longest value of any argument, and of any text the
// catalog carries verbatim, in bytes.
const MaxLen = 4096

// Stdin modes: whether an op reads standard input.
const (
	StdinNone     = "none"     // takes none (max_stdin 0)
	StdinOptional = "optional" // may be given
	StdinRequired = "required" // must be given, at least one byte
)

// DefaultStdin is the mode of an op whose policy (or catalog) does not say:
// optional when it takes any input, none when max_stdin is 0.
func DefaultStdin(maxStdin int64) string {
	if maxStdin > 0 {
		return StdinOptional
	}
	return StdinNone
}

// OpInfo is the public description of an op: what an agent may see. It
// carries no argv, dir, env or path roots; those stay on the host.
type OpInfo struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Scope       string `json:"scope"`
	Approve     bool   `json:"approve"`
	Idempotent  bool   `json:"idempotent"`
	Timeout     string `json:"timeout"`
	MaxOutput   int64  `json:"max_output"`
	MaxStdin    int64  `json:"max_stdin"` // bytes of standard input a request may carry; 0: none
	// Stdin is none, optional or required; absent (catalogs from before
	// the field, and policies that do not set it) means DefaultStdin(MaxStdin):
	// read it with StdinMode.
	Stdin     string    `json:"stdin,omitempty"`
	StdinHint string    `json:"stdin_hint,omitempty"` // what the input is: "unified diff"
	Risk      string    `json:"risk,omitempty"`       // the policy author's note on what the op really does
	DryRun    string    `json:"dry_run,omitempty"`    // an op that shows what this one would do, doing nothing
	Undo      string    `json:"undo,omitempty"`       // an op that undoes this one
	Args      []ArgInfo `json:"args"`
}

// StdinMode is the op's stdin mode, with the default for a catalog that
// does not carry one.
func (o *OpInfo) StdinMode() string {
	if o.Stdin != "" {
		return o.Stdin
	}
	return DefaultStdin(o.MaxStdin)
}

// ArgInfo is the public description of one argument.
type ArgInfo struct {
	Name        string   `json:"name"`
	Type        string   `json:"type"`
	Description string   `json:"description,omitempty"`
	Required    bool     `json:"required"`
	Default     *string  `json:"default,omitempty"`
	Pattern     string   `json:"pattern,omitempty"` // as written; matched against the whole value
	MaxLen      int      `json:"max_len,omitempty"`
	AllowDash   bool     `json:"allow_dash,omitempty"`
	AllowAt     bool     `json:"allow_at,omitempty"`
	AllowPlus   bool     `json:"allow_plus,omitempty"`
	Min         *int64   `json:"min,omitempty"`
	Max         *int64   `json:"max,omitempty"`
	Values      []string `json:"values,omitempty"`
	MustExist   bool     `json:"must_exist,omitempty"`
}

// ErrInvalidArg: an argument the request supplied (or left out) does not
// fit the op's rules. Errors of this kind are *ArgError.
var ErrInvalidArg = errors.New("invalid argument")

// ArgError reports why one argument of a request was refused. It matches
// ErrInvalidArg under errors.Is. Value is never included: it is hostile input
// and may be huge or contain terminal escapes.
type ArgError struct {
	Op     string
	Arg    string
	Reason string
}

func (e *ArgError) Error() string {
	return fmt.Sprintf("op %q: argument %q: %s", e.Op, e.Arg, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidArg) true.
func (e *ArgError) Is(target error) bool { return target == ErrInvalidArg }
