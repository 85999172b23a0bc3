package policy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: Parse never panics; it fails only with PolicyErrors and returns
// no policy then; a parsed policy parses again to the same hash and catalog,
// and every op an agent may run renders from its own defaults (failing only
// where a required argument has no default, or on the host: a program or path
// root that does not exist on this machine).
// Seeds: testdata/example.toml plus the committed corpus in
// fixtures/fuzz/FuzzParse (raw policies, one per file).
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("testdata", "example.toml")); err == nil {
		f.Add(data)
	}
	corpus, _ := filepath.Glob(filepath.Join("..", "..", "fixtures", "fuzz", "FuzzParse", "*"))
	if len(corpus) == 0 {
		f.Fatal("no committed corpus in fixtures/fuzz/FuzzParse")
	}
	for _, p := range corpus {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.toml", data)
		if err != nil {
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a PolicyError: %v", err, err)
			}
			if p != nil {
				t.Fatal("policy returned with an error")
			}
			return
		}
		p2, err := Parse("fuzz.toml", data)
		if err != nil || p2.SHA256 != p.SHA256 {
			t.Fatalf("second parse differs: %v", err)
		}
		c1, err := json.Marshal(p.Catalog())
		if err != nil {
			t.Fatal(err)
		}
		c2, _ := json.Marshal(p2.Catalog())
		if string(c1) != string(c2) {
			t.Fatal("catalog not deterministic")
		}
		ctx := RenderContext{
			Env:  func(n string) (string, bool) { return "/usr/bin:/bin", n == "PATH" },
			Vars: map[string]string{"request_id": "r-1"},
		}
		for _, agent := range p.Agents() {
			for _, name := range p.AgentOps(agent) {
				o := p.ops[name]
				inv, err := p.Render(agent, name, nil, ctx)
				if err != nil {
					if errors.Is(err, ErrNotAllowed) || errors.Is(err, ErrUnknownOp) {
						t.Fatalf("%s/%s listed but refused: %v", agent, name, err)
					}
					var ae *ArgError
					if errors.As(err, &ae) {
						a := o.args[ae.Arg]
						switch {
						case a == nil:
							t.Fatalf("%s: error for an undeclared argument: %v", name, err)
						case a.required && a.def == nil, a.typ == typePath:
						default:
							t.Fatalf("%s: own default refused: %v", name, err)
						}
					}
					continue
				}
				if !filepath.IsAbs(inv.Argv[0]) {
					t.Fatalf("%s: argv[0] %q not absolute", name, inv.Argv[0])
				}
				for k, v := range inv.Args {
					a := o.args[k]
					if a.typ == typePath {
						continue
					}
					if cv, reason := a.checkStatic(v); reason != "" || cv != v {
						t.Fatalf("%s: rendered %s=%q does not re-validate: %s", name, k, v, reason)
					}
				}
			}
		}
	})
}

func TestTemplateRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", "{a}", "--x={a}", "{a}{b}", "{{", "}}", "{{a}}", "x{{{a}}}y", "{request_id}.log"} {
		tp, bad := parseTemplate(s)
		if bad != "" {
			t.Errorf("%q: %s", s, bad)
			continue
		}
		if got := tp.String(); got != s {
			t.Errorf("%q round-trips to %q", s, got)
		}
	}
	for s, want := range map[string]string{"{": "unclosed {", "}": "unmatched }", "{}": "bad reference {}", "{a b}": "bad reference {a b}", "{{a}": "unmatched }", "{a}}": "unmatched }", "{{{a": "unclosed {"} {
		if _, bad := parseTemplate(s); bad != want {
			t.Errorf("%q: got %q, want %q", s, bad, want)
		}
	}
	got, _ := parseTemplate("x{{{a}}}y")
	if v, ok := got.render(map[string]string{"a": "}{"}); !ok || v != "x{}{}y" {
		t.Errorf("render = %q", v)
	}
}
