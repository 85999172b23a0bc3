package mcp

import (
	"regexp/syntax"
	"strings"
)

// JSON Schema's "pattern" is an ECMA-262 regular expression; the policy's
// patterns are Go's (RE2). Most patterns mean the same in both, but RE2's
// own syntax ((?i) and other flags, \A, \z, [[:alpha:]], \pL, \Q..\E,
// (?P<name>..), \x{41}) is an error to ECMA-262, or worse, means something
// else, and a client may reject the whole tool for it. ecmaSafe says
// whether a pattern keeps to a subset both read alike (in ECMA's unicode
// mode too): ASCII literals, ., ^, $, |, (..) and (?:..), the quantifiers
// * + ? {n} {n,} {n,m} with an optional lazy ?, classes [..] and [^..] of
// literals, ranges and escapes, and the escapes \d \D \w \W \s \S \b \B
// \n \r \t \f \v \xHH and of the syntax characters. Anything else is left
// out of the schema: the call-time check (the catalog's, then the host's)
// holds it.
func ecmaSafe(p string) bool {
	if _, err := syntax.Parse(p, syntax.Perl); err != nil {
		return false
	}
	atom := false // a quantifier may follow
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < 0x20 || c > 0x7e {
			return false
		}
		switch c {
		case '\\':
			n, quantifiable := escapeLen(p[i+1:], false)
			if n == 0 {
				return false
			}
			i += n
			atom = quantifiable
		case '[':
			n := classLen(p[i:])
			if n == 0 {
				return false
			}
			i += n - 1
			atom = true
		case '(':
			if strings.HasPrefix(p[i:], "(?") {
				if !strings.HasPrefix(p[i:], "(?:") {
					return false
				}
				i += 2
			}
			atom = false
		case ')':
			atom = true
		case '|', '^', '$':
			atom = false // ECMA refuses a quantified assertion
		case '*', '+', '?', '{':
			n := 1
			if c == '{' {
				n = braceLen(p[i:])
			}
			if !atom || n == 0 {
				return false
			}
			i += n - 1
			if i+1 < len(p) && p[i+1] == '?' {
				i++ // lazy: the same for a whole-value match
			}
			atom = false
		case '}', ']':
			return false
		default:
			atom = true
		}
	}
	return true
}

// ecmaSyntax are the characters ECMA's unicode mode lets a \ escape.
const ecmaSyntax = `^$\.*+?()[]{}|/`

// escapeLen is how many bytes of s (after a \) make an escape both
// dialects read alike, 0 for none; and whether a quantifier may follow it.
func escapeLen(s string, inClass bool) (int, bool) {
	switch {
	case s == "":
		return 0, false
	case strings.IndexByte("dDwWsSnrtfv", s[0]) >= 0:
		return 1, true
	case strings.IndexByte("bB", s[0]) >= 0 && !inClass:
		return 1, false
	case s[0] == 'x' && len(s) >= 3 && isHex(s[1]) && isHex(s[2]):
		return 3, true
	case strings.IndexByte(ecmaSyntax, s[0]) >= 0, inClass && s[0] == '-':
		return 1, true
	}
	return 0, false
}

// classLen is the length of the class s opens, 0 if it is not in the
// subset: no [ inside (RE2's [:alpha:]), no ] first (RE2 takes it as a
// literal, ECMA as the end of an empty class).
func classLen(s string) int {
	j := 1
	if j < len(s) && s[j] == '^' {
		j++
	}
	if j < len(s) && s[j] == ']' {
		return 0
	}
	for j < len(s) {
		switch c := s[j]; {
		case c == ']':
			return j + 1
		case c == '[', c < 0x20, c > 0x7e:
			return 0
		case c == '\\':
			n, _ := escapeLen(s[j+1:], true)
			if n == 0 {
				return 0
			}
			j += 1 + n
		default:
			j++
		}
	}
	return 0
}

// braceLen is the length of the counted repetition s opens ({n}, {n,},
// {n,m}), 0 if it is not one.
func braceLen(s string) int {
	j, digits := 1, 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j, digits = j+1, digits+1
	}
	if digits == 0 || j >= len(s) {
		return 0
	}
	if s[j] == ',' {
		j++
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
	}
	if j < len(s) && s[j] == '}' {
		return j + 1
	}
	return 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
