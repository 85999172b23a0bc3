package policy

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The values a policy file holds, checked and converted: argument
// defaults, argv templates, paths, durations, sizes, environment names.

func defaultString(typ string, v any) (string, string) {
	switch typ {
	case typeInt:
		if n, ok := v.(int64); ok {
			return strconv.FormatInt(n, 10), ""
		}
		return "", fmt.Sprintf("want an integer, got %s", tomlTypeOf(v))
	case typeBool:
		if t, ok := v.(bool); ok {
			return strconv.FormatBool(t), ""
		}
		return "", fmt.Sprintf("want true or false, got %s", tomlTypeOf(v))
	default:
		if s, ok := v.(string); ok {
			return s, ""
		}
		return "", fmt.Sprintf("want a string, got %s", tomlTypeOf(v))
	}
}

func tomlTypeOf(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

// argv checks an argv (or reconcile) array and parses its templates, marking
// every argument referenced in used. declared holds every argument table in the
// file, valid or not, so one broken argument is reported once, not again as
// "undeclared" here.
func (b *builder) argv(at []string, elems []string, declared map[string]*argDoc, used map[string]bool) []tmpl {
	if len(elems) == 0 {
		b.errAt(at, "name the program first: [\"go\", \"test\"]", "empty")
		return nil
	}
	out := make([]tmpl, 0, len(elems))
	for i, e := range elems {
		if strings.IndexByte(e, 0) >= 0 {
			b.errAt(at, "arguments cannot hold NUL", "element %d contains NUL", i)
			return nil
		}
		if i == 0 {
			switch {
			case e == "":
				b.errAt(at, "name the program first", "program (argv[0]) is empty")
				return nil
			case strings.ContainsAny(e, "{}"):
				b.errAt(at, "the program is fixed by the policy; put arguments after it", "program %q is a template", e)
				return nil
			case !filepath.IsAbs(e) && strings.ContainsAny(e, "/"+string(filepath.Separator)):
				b.errAt(at, "use an absolute path, or a bare name looked up in PATH", "program %q is a relative path", e)
				return nil
			}
			out = append(out, tmpl{{lit: e}})
			continue
		}
		t, err := parseTemplate(e)
		if err != "" {
			b.errAt(at, "write {{ and }} for literal braces", "element %d %q: %s", i, e, err)
			return nil
		}
		for _, s := range t {
			if s.ref == "" {
				continue
			}
			if _, ok := declared[s.ref]; !ok && !reservedVars[s.ref] {
				hint := "declare it as [" + formatKey(append(at[:2:2], "args", s.ref)) + "]"
				b.errAt(at, hint, "element %d references undeclared argument {%s}", i, s.ref)
				return nil
			}
			used[s.ref] = true
		}
		out = append(out, t)
	}
	for i := 2; i < len(out); i++ {
		b.checkSlide(at, out, i, declared)
	}
	return out
}

// checkSlide refuses an element that an omitted argument drops right after
// an element that looks like an option. Render leaves out an element naming
// an optional argument the request did not give (and that has no default),
// so in ["curl", "-o", "{out}", "{url}"] the value after it would slide into
// the option's slot: "curl -o URL", writing where the agent named the URL.
// Which options take a value is the program's business, not the policy's,
// so every element starting with '-' counts, except "--" (the end of
// options) and "--name=value" / "-Dname=value" forms, which hold their
// value already. The last element is fine: nothing follows to slide in.
// The fix is an element that holds option and value both, which is dropped
// whole.
func (b *builder) checkSlide(at []string, ts []tmpl, i int, declared map[string]*argDoc) {
	opt, ok := optionLike(ts[i-1])
	if !ok || i == len(ts)-1 {
		return // the last element: nothing can take its place
	}
	for _, s := range ts[i] {
		if s.ref == "" || !droppable(declared[s.ref]) {
			continue
		}
		joined := opt + "{" + s.ref + "}"
		if strings.HasPrefix(opt, "--") {
			joined = opt + "={" + s.ref + "}"
		}
		b.errAt(at, fmt.Sprintf("write the option and its value as one element (%q), give %s a default, or make it required", joined, s.ref),
			"element %d %q is left out when the optional argument %s is not given, and the next element would take its place as the value of %q",
			i, ts[i].String(), s.ref, opt)
		return
	}
}

// optionLike reports whether a rendered element may be an option that takes
// the next element as its value, and returns its literal start.
func optionLike(t tmpl) (string, bool) {
	if len(t) == 0 || t[0].ref != "" || !strings.HasPrefix(t[0].lit, "-") {
		return "", false
	}
	s := t.String()
	if s == "--" || strings.Contains(s, "=") {
		return "", false
	}
	return s, true
}

// droppable reports whether an argument may be absent from a request with
// no default to stand in for it: then Render drops the elements naming it.
func droppable(d *argDoc) bool {
	return d != nil && d.Required != nil && !*d.Required && d.Default == nil
}

// absPath expands ~ and requires an absolute, clean path.
func (b *builder) absPath(at []string, p string) string {
	if strings.IndexByte(p, 0) >= 0 || p == "" {
		b.errAt(at, "an absolute path or ~/...", "empty or contains NUL")
		return ""
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		if !b.hset {
			b.home, b.herr = os.UserHomeDir()
			b.hset = true
		}
		if b.herr != nil || !filepath.IsAbs(b.home) {
			b.errAt(at, "set HOME for the daemon or write an absolute path", "cannot expand ~: no home directory")
			return ""
		}
		p = filepath.Join(b.home, p[1:])
	} else if strings.HasPrefix(p, "~") {
		b.errAt(at, "only ~ and ~/ are expanded; write the absolute path", "%q: ~user is not supported", p)
		return ""
	}
	if !filepath.IsAbs(p) {
		b.errAt(at, "write an absolute path or start with ~/", "%q is not absolute", p)
		return ""
	}
	return filepath.Clean(p)
}

func (b *builder) timeout(at []string, s string) time.Duration {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		b.errAt(at, `a Go duration such as "90s", "10m" or "1h30m"`, "bad duration %q", s)
	case d <= 0:
		b.errAt(at, "a positive duration; every op has a timeout", "timeout %q is not positive", s)
	case d > maxTimeout:
		b.errAt(at, "at most 24h", "timeout %q is too long", s)
	default:
		return d
	}
	return defaultTimeout
}

// sizeOf reads a size setting: an integer or a string parseSize reads.
// ok is false (and nothing is said) when v is neither.
func sizeOf(v any) (n int64, ok bool, err error) {
	switch x := v.(type) {
	case int64:
		return x, true, nil
	case string:
		n, err = parseSize(x)
		return n, true, err
	}
	return 0, false, nil
}

func (b *builder) size(at []string, v any) int64 {
	n, ok, err := sizeOf(v)
	if !ok {
		b.errAt(at, `a size such as "4MiB", "512KiB" or 1000000`, "want a size, got %s", tomlTypeOf(v))
		return defaultMaxOutput
	}
	switch {
	case err != nil:
		b.errAt(at, `a size such as "4MiB", "512KiB", "10MB" or "1000000"`, "%v", err)
	case n <= 0:
		b.errAt(at, "a positive size", "max_output must be positive")
	case n > maxMaxOutput:
		b.errAt(at, "at most 256MiB; the rest of a bigger output is cut", "max_output %d is too large", n)
	default:
		return n
	}
	return defaultMaxOutput
}

// stdinSize reads max_stdin: a size as for max_output, where 0 means the
// op takes no standard input at all.
func (b *builder) stdinSize(at []string, v any) int64 {
	n, ok, err := sizeOf(v)
	if !ok {
		b.errAt(at, `a size such as "1MiB", "64KiB" or 0 for no input`, "want a size, got %s", tomlTypeOf(v))
		return defaultMaxStdin
	}
	switch {
	case err != nil:
		b.errAt(at, `a size such as "1MiB", "64KiB", "10MB" or 0 for no input`, "%v", err)
	case n < 0:
		b.errAt(at, "0 (no input) or a positive size", "max_stdin must not be negative")
	case n > maxMaxStdin:
		b.errAt(at, "at most 4GiB, the largest payload a request may carry", "max_stdin %d is too large", n)
	default:
		return n
	}
	return defaultMaxStdin
}

var sizeUnits = map[string]int64{
	"": 1, "B": 1,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
	"KB": 1e3, "MB": 1e6, "GB": 1e9,
}

// parseSize reads "1000000", "512KiB", "4MiB", "10MB": digits then an
// optional unit, no spaces, no fractions.
func parseSize(s string) (int64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	mult, ok := sizeUnits[s[i:]]
	if !ok {
		return 0, fmt.Errorf("bad size %q: unknown unit %q", s, s[i:])
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	return n * mult, nil
}

// dangerousEnv are names that make a shell or the dynamic loader run code of
// the value's choosing before the intended program does anything.
var dangerousEnv = map[string]bool{
	"BASH_ENV": true, "ENV": true, "PROMPT_COMMAND": true, "SHELLOPTS": true,
	"BASHOPTS": true, "PS4": true, "IFS": true, "CDPATH": true, "GLOBIGNORE": true,
}

func (b *builder) envName(at []string, n string) bool {
	switch {
	case !envNameRE().MatchString(n) || len(n) > 128:
		b.errAt(at, "names are [A-Z_][A-Z0-9_]*", "invalid variable name %q", n)
	case strings.HasPrefix(n, "LD_") || strings.HasPrefix(n, "DYLD_") || strings.HasPrefix(n, "BASH_FUNC_") || dangerousEnv[n]:
		b.errAt(at, "it lets a value run code before the program starts; set it inside a wrapper script if the tool truly needs it", "%s is not allowed", n)
	default:
		return true
	}
	return false
}

func (b *builder) envNames(at []string, names []string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, n := range names {
		if !b.envName(at, n) {
			continue
		}
		if seen[n] {
			b.errAt(at, "list each name once", "%s listed twice", n)
			continue
		}
		seen[n] = true
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (b *builder) text(at []string, s string) string {
	if len(s) > maxDescription || strings.IndexByte(s, 0) >= 0 {
		b.errAt(at, "a short plain-text description", "too long or contains NUL")
		return ""
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
