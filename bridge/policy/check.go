package policy

import (
	"fmt"
	"regexp"
	"strings"
)

// CheckArgs checks args against the op's public description as Render would,
// short of what only the host can see: where a path leads on its disk. An
// agent calls it before it sends, so a typo costs milliseconds instead of a
// round trip through the sync. Errors are *ArgError, with "did you mean"
// for an argument name close to one the op takes.
func (o *OpInfo) CheckArgs(args map[string]string) error {
	names := make([]string, len(o.Args))
	byName := map[string]*ArgInfo{}
	for i := range o.Args {
		names[i] = o.Args[i].Name
		byName[o.Args[i].Name] = &o.Args[i]
	}
	for _, n := range sortedKeys(args) {
		if byName[n] != nil {
			continue
		}
		reason := "unknown argument; this op takes no arguments"
		if len(names) > 0 {
			reason = "unknown argument; this op takes: " + strings.Join(names, ", ")
			if c := closest(strings.ToLower(n), names); c != "" {
				reason = fmt.Sprintf("unknown argument; did you mean %q? this op takes: %s", c, strings.Join(names, ", "))
			}
		}
		if !argNameRE().MatchString(n) && len(n) > 40 {
			// The caller's own typing (this check runs before sending):
			// shown (quoted by the error), cut short, rather than hidden.
			n = n[:40] + "..."
		}
		return &ArgError{Op: o.Name, Arg: n, Reason: reason}
	}
	for _, n := range names {
		ai := byName[n]
		v, given := args[n]
		if !given {
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

// checkValue applies the rules of arg.checkStatic to one value, from the
// public description. A path is checked as text only: where it leads is for
// the host to say.
func (ai *ArgInfo) checkValue(v string) string {
	a := &arg{name: ai.Name, typ: ai.Type, maxLen: ai.MaxLen, allowDash: ai.AllowDash, allowAt: ai.AllowAt,
		allowPlus: ai.AllowPlus, min: ai.Min, max: ai.Max, values: ai.Values, patternSrc: ai.Pattern}
	switch ai.Type {
	case typeString:
		if a.maxLen == 0 {
			a.maxLen = maxMaxLen
		}
		if ai.Pattern != "" {
			re, err := regexp.Compile(`^(?:` + ai.Pattern + `)$`)
			if err != nil {
				a.patternSrc = "" // not Go's syntax: leave it to the host
			} else {
				a.pattern = re
			}
		}
	case typePath:
		// As text only. Whether it stays under its root, `..` or not,
		// only the host knows: the root (which may be / or have room
		// above it for a `..`) is the host's secret.
		switch {
		case badText(v) != "":
			return badText(v)
		case v == "":
			return "empty path"
		case len(v) > maxMaxLen:
			return fmt.Sprintf("longer than %d bytes", maxMaxLen)
		}
		return ""
	case typeInt, typeBool, typeEnum:
	default:
		return "" // a type this agent does not know: the host decides
	}
	_, reason := a.checkStatic(v)
	return reason
}

// Suggest returns the candidate closest to s (at most two edits away), or
// "": the "did you mean" of op and argument names.
func Suggest(s string, candidates []string) string { return closest(s, candidates) }
