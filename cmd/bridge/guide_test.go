package main

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestGuideExitCodes: the guide tells the agent what to do on every exit
// code bridge has (a new constant fails here until the guide covers it).
func TestGuideExitCodes(t *testing.T) {
	code := exitConstants(t)
	var guided []int
	for _, e := range guideExits {
		if n, err := strconv.Atoi(e.Code); err == nil {
			guided = append(guided, n)
		}
		if e.Meaning == "" || e.Action == "" {
			t.Errorf("exit %s: no meaning or no action", e.Code)
		}
	}
	slices.Sort(code)
	slices.Sort(guided)
	if !slices.Equal(code, guided) {
		t.Errorf("exit codes in main.go %v, in the guide %v", code, guided)
	}
}

// TestExampleValue: each example value passes the checks the policy applies,
// or none is offered.
func TestExampleValue(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		arg  guideArg
		want string
		ok   bool
	}{
		{guideArg{typ: "string", pattern: "[a-z]{1,20}"}, "a", true},
		{guideArg{typ: "string", pattern: "[A-Za-z0-9_/.]{1,64}"}, "a", true},
		{guideArg{typ: "string", pattern: "v[0-9]+\\.[0-9]+"}, "v0.0", true},
		{guideArg{typ: "string", pattern: "(main|release/.+)"}, "main", true},
		{guideArg{typ: "string", pattern: "[a-z0-9][a-z0-9/_.-]{0,63}"}, "aa", true},
		{guideArg{typ: "string", pattern: "(?i)ABC"}, "abc", true},
		{guideArg{typ: "string", pattern: "[^a-z]{3}"}, "000", true},
		{guideArg{typ: "string"}, "example", true},
		{guideArg{typ: "string", pattern: "-[a-z]"}, "", false},                   // a leading dash is refused...
		{guideArg{typ: "string", pattern: "-[a-z]", allowDash: true}, "-a", true}, // ...unless allowed
		{guideArg{typ: "string", pattern: "a\\bb"}, "", false},                    // matches nothing
		{guideArg{typ: "string", pattern: "x{5}", maxLen: 4}, "", false},
		{guideArg{typ: "string", pattern: "[a-z]*"}, "a", true},
		{guideArg{typ: "string", pattern: "[a-z]?"}, "", false}, // empty is no example
		{guideArg{typ: "int"}, "1", true},
		{guideArg{typ: "int", min: i(5), max: i(9)}, "5", true},
		{guideArg{typ: "int", max: i(0)}, "0", true},
		{guideArg{typ: "bool"}, "true", true},
		{guideArg{typ: "enum", values: []string{"staging", "production"}}, "staging", true},
		{guideArg{typ: "path"}, ".", true},
		{guideArg{typ: "mystery"}, "", false},
	} {
		got, ok := exampleValue(c.arg)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("%+v: got %q, %v; want %q, %v", c.arg, got, ok, c.want, c.ok)
		}
	}
}

func TestExampleCommand(t *testing.T) {
	args := []guideArg{
		{name: "msg", typ: "string", pattern: "[a-z ]{1,9}", required: true},
		{name: "opt", typ: "bool"},
		{name: "who", typ: "string", pattern: "[A-Z]", required: true},
	}
	got, complete := exampleCommand("--host 'my host' ", "say", false, args)
	if want := "bridge run --host 'my host' --key say-1 say msg=a who=A"; got != want || !complete {
		t.Errorf("got %q, %v; want %q", got, complete, want)
	}
	args[0].pattern = "a b"
	got, _ = exampleCommand("", "say", true, args)
	if want := "bridge run say 'msg=a b' who=A"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := shellQuote("it's"); got != `'it'\''s'` {
		t.Errorf("shellQuote: %s", got)
	}
}

// TestUpdateSectionCRLF: a file written with CRLF line ends keeps them
// outside the section, and its section is found again.
func TestUpdateSectionCRLF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "AGENTS.md")
	before, after := "# Rules\r\n\r\n", "\r\nAfter.\r\n"
	old := before + "<!-- BEGIN bridge guide -->\r\nold\r\n<!-- END bridge guide -->\r\n" + after
	if err := os.WriteFile(p, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	section := guideBegin + "\nnew\n" + guideEnd + "\n"
	for range 2 {
		if err := updateSection(p, section); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(p)
		if got, want := string(b), before+section+after; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	if fi, _ := os.Stat(p); runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the file's own 0600", fi.Mode().Perm())
	}
}

// TestBuildInfo: link-time values win; without them the toolchain's stamp
// is used (module version for `go install ...@v`, VCS revision for a build
// in a checkout); nothing at all is "devel".
func TestBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		name                  string
		bi                    *debug.BuildInfo
		ldV, ldC, ldD         string
		version, commit, date string
		modified              bool
	}{
		{"nothing", nil, "", "", "", "devel", "", "", false},
		{"go install @v", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "", "", "", "v1.2.3", "", "", false},
		{"checkout", vcs, "", "", "", "devel", "abc123", "2026-01-02T03:04:05Z", true},
		{"release", vcs, "v2.0.0", "def456", "2026-05-06T07:08:09Z", "v2.0.0", "def456", "2026-05-06T07:08:09Z", false},
	} {
		v := buildInfo(c.bi, c.ldV, c.ldC, c.ldD)
		if v.Version != c.version || v.Commit != c.commit || v.Date != c.date || v.Modified != c.modified {
			t.Errorf("%s: got %+v", c.name, v)
		}
		if v.Platform != runtime.GOOS+"/"+runtime.GOARCH || v.Go == "" {
			t.Errorf("%s: platform %q, go %q", c.name, v.Platform, v.Go)
		}
	}
}

// Catalog text in the guide can neither open nor close an HTML comment
// (the guide's own BEGIN and END markers are comments): "<!-->" survived
// one replacer pass as "<!\-->", a closer, and "--!>" was left alone.
func TestOneLineBreaksCommentMarkers(t *testing.T) {
	for _, s := range []string{"<!-->", "<!-- x -->", "a --!> b", "<!--<!---->-->", "x---->"} {
		got := oneLine(s)
		for _, marker := range []string{"<!--", "-->", "--!>"} {
			if strings.Contains(got, marker) {
				t.Errorf("oneLine(%q) = %q holds %q", s, got, marker)
			}
		}
	}
}
