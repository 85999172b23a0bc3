package opspec

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// argName is an argument's name as a policy may declare it.
var argName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`) })

// ValidArgName reports whether s may name an argument.
func ValidArgName(s string) bool { return argName().MatchString(s) }

// CheckArgs checks args against the op's public description as the host
// would, short of what only the host can see: where a path leads on its
// disk. An agent calls it before it sends, so a typo costs milliseconds
// instead of a round trip through the sync. Errors are *ArgError, with "did
// you mean" for an argument name close to one the op takes.
func (o *OpInfo) CheckArgs(args map[string]string) error {
	names := make([]string, len(o.Args))
	byName := map[string]*ArgInfo{}
	for i := range o.Args {
		names[i] = o.Args[i].Name
		byName[o.Args[i].Name] = &o.Args[i]
	}
	given := make([]string, 0, len(args))
	for n := range args {
		given = append(given, n)
	}
	sort.Strings(given)
	for _, n := range given {
		if byName[n] != nil {
			continue
		}
		reason := "unknown argument; this op takes no arguments"
		if len(names) > 0 {
			reason = "unknown argument; this op takes: " + strings.Join(names, ", ")
			if c := Suggest(strings.ToLower(n), names); c != "" {
				reason = fmt.Sprintf("unknown argument; did you mean %q? this op takes: %s", c, strings.Join(names, ", "))
			}
		}
		if !ValidArgName(n) && len(n) > 40 {
			// The caller's own typing (this check runs before sending):
			// shown (quoted by the error), cut short, rather than hidden.
			n = n[:40] + "..."
		}
		return &ArgError{Op: o.Name, Arg: n, Reason: reason}
	}
	for _, n := range names {
		ai := byName[n]
		v, ok := args[n]
		if !ok {
			if ai.Required && ai.Default == nil {
				return &ArgError{Op: o.Name, Arg: n, Reason: "missing required argument"}
			}
			continue
		}
		if r := ai.checkValue(v); r != "" {
			return &ArgError{Op: o.Name, Arg: n, Reason: r}
		}
	}
	return nil
}

// checkValue applies the argument's Rule to one value, from the public
// description. A path is checked as text only: where it leads is for the
// host to say.
func (ai *ArgInfo) checkValue(v string) string {
	r := Rule{Type: ai.Type, MaxLen: ai.MaxLen, AllowDash: ai.AllowDash, AllowAt: ai.AllowAt,
		AllowPlus: ai.AllowPlus, Min: ai.Min, Max: ai.Max, Values: ai.Values}
	switch ai.Type {
	case TypeString:
		if r.MaxLen == 0 {
			r.MaxLen = MaxLen
		}
		if ai.Pattern != "" {
			if re, err := regexp.Compile(`^(?:` + ai.Pattern + `)$`); err == nil {
				r.Pattern, r.PatternSrc = re, ai.Pattern
			} // else not Go's syntax: left to the host
		}
	case TypePath:
		// As text only. Whether it stays under its root, `..` or not,
		// only the host knows: the root (which may be / or have room
		// above it for a `..`) is the host's secret.
		return PathText(v)
	case TypeInt, TypeBool, TypeEnum:
	default:
		return "" // a type this agent does not know: the host decides
	}
	_, reason := r.Check(v)
	return reason
}

// Rule is what an argument's values must be, ready to check: its type and
// the constraints the policy gave it. A path's rule is its text only
// (PathText): its root is the host's.
type Rule struct {
	Type       string
	MaxLen     int // of a string
	AllowDash  bool
	AllowAt    bool
	AllowPlus  bool
	Min, Max   *int64         // of an int
	Values     []string       // of an enum
	Pattern    *regexp.Regexp // of a string, anchored; nil: none
	PatternSrc string         // Pattern as written, for the refusal
}

var canonicalInt = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`) })

// Check validates v without touching the filesystem and returns its
// canonical form, or "" and why it is refused. A path is checked as text
// (PathText) and returned as it is.
func (r *Rule) Check(v string) (string, string) {
	switch r.Type {
	case TypeString:
		if why := BadText(v); why != "" {
			return "", why
		}
		if why := r.leading(v); why != "" {
			return "", why
		}
		if len(v) > r.MaxLen {
			return "", fmt.Sprintf("longer than %d bytes", r.MaxLen)
		}
		if r.Pattern != nil && !r.Pattern.MatchString(v) {
			return "", fmt.Sprintf("does not match pattern %q", r.PatternSrc)
		}
		return v, ""
	case TypeInt:
		if !canonicalInt().MatchString(v) || v == "-0" {
			return "", "not a canonical decimal integer (no sign +, leading zeros, spaces or exponent)"
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", "out of the 64-bit integer range"
		}
		if r.Min != nil && n < *r.Min {
			return "", fmt.Sprintf("below the minimum %d", *r.Min)
		}
		if r.Max != nil && n > *r.Max {
			return "", fmt.Sprintf("above the maximum %d", *r.Max)
		}
		return v, ""
	case TypeBool:
		if v != "true" && v != "false" {
			return "", "want true or false"
		}
		return v, ""
	case TypeEnum:
		for _, x := range r.Values {
			if x == v {
				return v, ""
			}
		}
		return "", "not one of " + strings.Join(r.Values, ", ")
	case TypePath:
		if why := PathText(v); why != "" {
			return "", why
		}
		return v, ""
	}
	return "", "unknown type"
}

// leading explains why a string value may not start as it does: a program
// reads a leading '-' as an option, '@' as a file of more arguments (gcc,
// javac, ld and many others), '+' as a forced refspec (git push +main) or an
// option of its own (sort +1, more). The value may stand anywhere in its
// element, but is refused wherever it is used: one rule, the same in every
// template. "" means fine.
func (r *Rule) leading(v string) string {
	switch {
	case strings.HasPrefix(v, "-") && !r.AllowDash:
		return "starts with '-' and could be read as an option (an argument takes one only with allow_dash = true in the host's policy)"
	case strings.HasPrefix(v, "@") && !r.AllowAt:
		return "starts with '@' and could be read as a file of more arguments (an argument takes one only with allow_at = true in the host's policy)"
	case strings.HasPrefix(v, "+") && !r.AllowPlus:
		return "starts with '+' and could be read as a forced ref or an option (an argument takes one only with allow_plus = true in the host's policy)"
	}
	return ""
}

// PathText says why v cannot be a path argument as text, "" if it can:
// readable text, not empty, at most MaxLen bytes. Where it leads is the
// host's to check.
func PathText(v string) string {
	switch {
	case BadText(v) != "":
		return BadText(v)
	case v == "":
		return "empty path"
	case len(v) > MaxLen:
		return fmt.Sprintf("longer than %d bytes", MaxLen)
	}
	return ""
}

// BadText says why s is unacceptable as a value: invalid UTF-8, NUL or
// other control characters (newline too: it splits log lines and fools
// line-based tools), or bidirectional overrides (text that reads differently
// than it runs). "" means fine.
func BadText(s string) string {
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	for _, r := range s {
		switch {
		case r == 0:
			return "contains NUL"
		case r == '\n' || r == '\r':
			return "contains a line break"
		case unicode.IsControl(r):
			return "contains a control character"
		case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069, r == 0x200E, r == 0x200F:
			return "contains a bidirectional control character"
		}
	}
	return ""
}

// Suggest returns the candidate closest to s (at most two edits away), or
// "": the "did you mean" of op, argument and policy key names.
func Suggest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// TextProblem says what is wrong with s as a value the catalog carries
// verbatim to the agent and its model (an argument's pattern, enum value or
// default), "" if nothing: at most MaxLen bytes of valid UTF-8, and every
// character one a person can see or a plain space (a tab too where tab is
// true: a pattern may hold one, as regexp reads it). Controls, format
// characters (bidi marks, zero-width characters, the tag characters that
// spell text a model reads and a person does not), line and paragraph
// separators, private-use and unassigned characters are refused. The policy
// refuses them at load and the agent refuses a catalog that holds them, so
// that no catalog a policy writes is refused.
func TextProblem(s string, tab bool) string {
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	if len(s) > MaxLen {
		return fmt.Sprintf("longer than %d bytes", MaxLen)
	}
	for _, r := range s {
		if !unicode.IsGraphic(r) && !(tab && r == '\t') {
			return fmt.Sprintf("contains a control or invisible character (%U)", r)
		}
	}
	return ""
}

// Invisible reports whether r shows as nothing (or as a blank) though Go
// calls it printable: variation selectors, default-ignorable code points
// (the combining grapheme joiner), the Hangul fillers and the Braille
// blank. A value a human is asked to judge writes them as escapes, as it
// does controls (a file "main\u034f" must not read as "main").
func Invisible(r rune) bool {
	switch r {
	case 0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800:
		return true
	}
	return unicode.Is(unicode.Variation_Selector, r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
}
