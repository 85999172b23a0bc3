package policy

import (
	"strings"

	"github.com/syncbridge/bridge/bridge/internal/opspec"
)

// segment is one piece of an argv template: literal text, or a reference to a
// variable ({name}).
type segment struct {
	lit string
	ref string
}

// tmpl is one argv element. It always renders to exactly one element (or,
// when it names an omitted optional argument, to none): values are
// concatenated with the literal text, never split, never given to a shell.
type tmpl []segment

// parseTemplate splits s into literals and {name} references. {{ and }} are
// literal braces; any other brace is an error, so a typo cannot silently
// become literal text.
func parseTemplate(s string) (tmpl, string) {
	var t tmpl
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t = append(t, segment{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '{':
			if i+1 < len(s) && s[i+1] == '{' {
				lit.WriteByte('{')
				i++
				continue
			}
			end := strings.IndexByte(s[i+1:], '}')
			if end < 0 {
				return nil, "unclosed {"
			}
			name := s[i+1 : i+1+end]
			if !opspec.ValidArgName(name) {
				return nil, "bad reference {" + name + "}"
			}
			flush()
			t = append(t, segment{ref: name})
			i += end + 1
		case '}':
			if i+1 < len(s) && s[i+1] == '}' {
				lit.WriteByte('}')
				i++
				continue
			}
			return nil, "unmatched }"
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return t, ""
}

// String gives the template back in policy syntax.
func (t tmpl) String() string {
	var b strings.Builder
	for _, s := range t {
		if s.ref != "" {
			b.WriteString("{" + s.ref + "}")
			continue
		}
		b.WriteString(strings.NewReplacer("{", "{{", "}", "}}").Replace(s.lit))
	}
	return b.String()
}

// render substitutes vals into t. ok is false when t references a variable
// absent from vals: the element is then left out.
func (t tmpl) render(vals map[string]string) (string, bool) {
	var b strings.Builder
	for _, s := range t {
		if s.ref == "" {
			b.WriteString(s.lit)
			continue
		}
		v, ok := vals[s.ref]
		if !ok {
			return "", false
		}
		b.WriteString(v)
	}
	return b.String(), true
}
