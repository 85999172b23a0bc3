package bridge

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxHostText bounds one piece of host text shown to an agent.
const maxHostText = 500

// HostText makes text a host's policy wrote (an op's description, risk
// note, input hint, an argument's description) safe to show an agent and
// the model behind it: one line (every run of white space one space, so no
// line of it can start a Markdown heading or a fake entry), control and
// invisible format characters (escape sequences, bidi overrides such as
// U+202E) written as Go escapes, at most 500 characters (Markdown's own
// markers are the guide's to break, where it writes Markdown). The catalog's text goes through it once, when the agent opens
// the catalog, so `bridge ops`, `bridge guide` and `bridge mcp` show the
// same (the third red team: MCP passed it raw).
func HostText(s string) string {
	// When anything is escaped, a backslash of the text is too: no text
	// can pass for an escape, or hide one.
	esc := needsEscape(s)
	var b strings.Builder
	space, n, i := false, 0, 0
	for i < len(s) && n < maxHostText {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			i += size
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
			if n++; n == maxHostText {
				break
			}
		}
		// Counted as shown: an escape is as many characters as it prints.
		var shown string
		switch {
		case r == utf8.RuneError && size == 1:
			shown = `\x` + strconv.FormatUint(uint64(s[i]), 16)
		case !unicode.IsPrint(r) || Invisible(r):
			q := strconv.QuoteRuneToASCII(r)
			shown = q[1 : len(q)-1]
		case r == '\\' && esc:
			shown = `\\`
		default:
			shown = s[i : i+size]
		}
		w := utf8.RuneCountInString(shown)
		if n+w > maxHostText {
			break
		}
		b.WriteString(shown)
		i += size
		n += w
	}
	out := b.String()
	if strings.TrimSpace(s[i:]) != "" {
		out = strings.TrimRight(out, " ") + "…"
	}
	return out
}

// hostLines makes a host's multi-line text (a human's message) safe to
// show: control and invisible format characters escaped as in HostText,
// line breaks and spacing kept, no length cut (the message has its own
// bound).
func hostLines(s string) string {
	esc := strings.IndexFunc(s, func(r rune) bool {
		return !(r == '\n' || r == ' ' || r == '\t' || r != utf8.RuneError && unicode.IsPrint(r) && !Invisible(r))
	}) >= 0 || !utf8.ValidString(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i]), 16))
		case r == '\\' && esc:
			b.WriteString(`\\`)
		case r == '\n' || r == ' ' || r == '\t' || unicode.IsPrint(r) && !Invisible(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return strings.TrimRight(b.String(), "\n")
}

// needsEscape reports whether s holds anything HostText or hostLines write
// as an escape (white space aside).
func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || !unicode.IsSpace(r) && (!unicode.IsPrint(r) || Invisible(r)) {
			return true
		}
		i += size
	}
	return false
}
