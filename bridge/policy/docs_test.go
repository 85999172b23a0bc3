package policy

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// docs/POLICY.md is the reference a host's owner writes a policy from; these
// tests keep it in step with the parser, so the page cannot drift.

func readPolicyDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/POLICY.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// tomlKeys lists the toml tags of a struct type: the keys the decoder
// accepts in that table (DisallowUnknownFields refuses every other).
func tomlKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		if tag := strings.Split(t.Field(i).Tag.Get("toml"), ",")[0]; tag != "" && tag != "-" {
			keys = append(keys, tag)
		}
	}
	return keys
}

// docSection is the text of the "## " section whose heading is heading, up
// to the next "## ".
func docSection(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n## "+heading+"\n")
	if i < 0 {
		t.Fatalf("docs/POLICY.md has no section %q", "## "+heading)
	}
	s := doc[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	return s
}

// TestDocsPolicyKeys: every key the parser accepts, in every table, has a
// row of its own in that table's section of docs/POLICY.md; and the key
// lists behind "did you mean" hints are exactly the decoder's keys.
func TestDocsPolicyKeys(t *testing.T) {
	doc := readPolicyDoc(t)
	tables := []struct {
		heading string
		typ     reflect.Type
		hints   []string
	}{
		{"`[defaults]`", reflect.TypeOf(defaultsDoc{}), defaultsKeys},
		{"`[ops.NAME]`", reflect.TypeOf(opDoc{}), opKeys},
		{"`[ops.NAME.args.ARG]`", reflect.TypeOf(argDoc{}), argKeys},
		{"`[agents.NAME]`", reflect.TypeOf(agentDoc{}), agentKeys},
		{"`[redact]`", reflect.TypeOf(redactDoc{}), redactKeys},
	}
	for _, tb := range tables {
		keys := tomlKeys(tb.typ)
		sec := docSection(t, doc, tb.heading)
		for _, k := range keys {
			if !strings.Contains(sec, "\n| `"+k+"` |") {
				t.Errorf("docs/POLICY.md section %s has no row for key %q", tb.heading, k)
			}
		}
		a, b := slices.Clone(keys), slices.Clone(tb.hints)
		sort.Strings(a)
		sort.Strings(b)
		if !slices.Equal(a, b) {
			t.Errorf("%s: hint keys %q, decoder keys %q", tb.heading, b, a)
		}
	}

	// The top level: version and each table, in the Shape table.
	shape := docSection(t, doc, "Shape")
	top := tomlKeys(reflect.TypeOf(fileDoc{}))
	for _, k := range top {
		want := "| `[" + k
		if k == "version" {
			want = "| `version"
		}
		if !strings.Contains(shape, want) {
			t.Errorf("docs/POLICY.md Shape table does not name %q", k)
		}
	}
	if a, b := slices.Sorted(slices.Values(top)), slices.Sorted(slices.Values(topKeys)); !slices.Equal(a, b) {
		t.Errorf("top level: hint keys %q, decoder keys %q", b, a)
	}

	// The values of the enumerated keys.
	for _, v := range []string{typeString, typeInt, typeBool, typeEnum, typePath, ScopeRead, ScopeWrite, ScopeExecute, StdinNone, StdinOptional, StdinRequired} {
		if !strings.Contains(doc, `"`+v+`"`) {
			t.Errorf("docs/POLICY.md never names the value %q", v)
		}
	}
	// The reserved template variables and the refused environment names.
	for v := range reservedVars {
		if !strings.Contains(doc, "`{"+v+"}`") {
			t.Errorf("docs/POLICY.md does not name the reserved variable {%s}", v)
		}
	}
	for n := range dangerousEnv {
		if !strings.Contains(doc, "`"+n+"`") {
			t.Errorf("docs/POLICY.md does not name the refused variable %s", n)
		}
	}
}

var tomlBlockRE = regexp.MustCompile("(?s)\n```toml\n(.*?)\n```\n")

// TestDocsPolicyExamples: every ```toml block of docs/POLICY.md is a whole
// policy that loads, gives every agent an op, and draws no warning from
// `bridge policy check`: an example is what people copy.
func TestDocsPolicyExamples(t *testing.T) {
	t.Setenv("HOME", t.TempDir()) // ~ expands somewhere fixed, away from any program
	doc := readPolicyDoc(t)
	blocks := tomlBlockRE.FindAllStringSubmatch(doc, -1)
	if len(blocks) < 4 {
		t.Fatalf("docs/POLICY.md has %d toml examples, want at least 4", len(blocks))
	}
	for i, m := range blocks {
		p, err := Parse("POLICY.md example", []byte(m[1]))
		if err != nil {
			t.Errorf("example %d does not load:\n%v\n%s", i+1, err, m[1])
			continue
		}
		if len(p.Agents()) == 0 {
			t.Errorf("example %d grants no agent anything", i+1)
		}
		// A program or a directory the example names is this machine's
		// business (it is /home/me/..., ~/src/app): only the other
		// warnings are about the example.
		var w []string
		for _, s := range p.Warnings() {
			if !strings.Contains(s, "the op fails until it exists") && !strings.Contains(s, "does not exist here") {
				w = append(w, s)
			}
		}
		if len(w) > 0 {
			t.Errorf("example %d draws warnings: %q", i+1, w)
		}
	}
}
