package policy_test

import (
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge/policy"
)

func TestSafetyKeys(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	src := `
[redact]
patterns = ["corp_[a-z0-9]{8}"]
[ops.t]
argv = ["/bin/true"]
cpu = "90s"
memory = "512MiB"
open_files = 64
processes = 100
[ops.u]
argv = ["/bin/true"]
cpu = 5
[agents.a]
ops = ["t", "u"]
max_concurrent = 2
max_runs_per_hour = 10
max_cpu_seconds_per_day = 3600
[agents.b]
ops = ["t"]
`
	p, err := policy.Parse("p.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := p.Render("a", "t", nil, policy.RenderContext{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (policy.Limits{CPUSeconds: 90, AddressSpace: 512 << 20, OpenFiles: 64, Processes: 100}); inv.Limits != want {
		t.Errorf("limits %+v, want %+v", inv.Limits, want)
	}
	if inv, _ := p.Render("a", "u", nil, policy.RenderContext{}); inv.Limits != (policy.Limits{CPUSeconds: 5}) {
		t.Errorf("u limits %+v", inv.Limits)
	}
	if ex, _ := p.Explain("t"); !strings.Contains(ex, "limits:      cpu 90s memory 536870912 open_files 64 processes 100\n") {
		t.Errorf("explain does not show the limits:\n%s", ex)
	}
	if ex, _ := p.Explain("u"); !strings.Contains(ex, "limits:      cpu 5s\n") {
		t.Errorf("explain u:\n%s", ex)
	}
	if c := p.Ceilings("a"); c != (policy.Ceilings{MaxConcurrent: 2, MaxRunsPerHour: 10, MaxCPUSecondsPerDay: 3600}) {
		t.Errorf("ceilings a %+v", c)
	}
	if c := p.Ceilings("b"); c != (policy.Ceilings{}) {
		t.Errorf("ceilings b %+v, want none", c)
	}
	r := p.Redaction()
	if !r.Enabled || len(r.Patterns) != 1 || !r.Patterns[0].MatchString("corp_abcd1234") {
		t.Errorf("redaction %+v", r)
	}
	off, err := policy.Parse("p.toml", []byte("[redact]\nenabled = false\n"+ok))
	if err != nil {
		t.Fatal(err)
	}
	if off.Redaction().Enabled {
		t.Error("enabled = false not honoured")
	}
	if def, _ := policy.Parse("p.toml", []byte(ok)); !def.Redaction().Enabled {
		t.Error("redaction is not on by default")
	}
}

func TestSafetyKeyErrors(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	agent := "[agents.a]\nops = [\"t\"]\n"
	cases := []struct{ name, src, key, msg string }{
		{"bad cpu", "[ops.t]\nargv = [\"/bin/true\"]\ncpu = \"soon\"\n", "ops.t.cpu", "bad cpu"},
		{"cpu too big", "[ops.t]\nargv = [\"/bin/true\"]\ncpu = \"48h\"\n", "ops.t.cpu", "out of range"},
		{"memory tiny", "[ops.t]\nargv = [\"/bin/true\"]\nmemory = 1000\n", "ops.t.memory", "too small"},
		{"memory bool", "[ops.t]\nargv = [\"/bin/true\"]\nmemory = true\n", "ops.t.memory", "want a size"},
		{"open files", "[ops.t]\nargv = [\"/bin/true\"]\nopen_files = 2\n", "ops.t.open_files", "out of range"},
		{"ceiling zero", ok + agent + "max_runs_per_hour = 0\n", "agents.a.max_runs_per_hour", "out of range"},
		{"ceiling typo", ok + agent + "max_run_per_hour = 3\n", "agents.a.max_run_per_hour", "unknown key"},
		{"redact bad re", "[redact]\npatterns = [\"(\"]\n" + ok, "redact.patterns", "bad pattern"},
		{"redact empty match", "[redact]\npatterns = [\"a*\"]\n" + ok, "redact.patterns", "empty string"},
		{"redact unknown", "[redact]\nenable = true\n" + ok, "redact.enable", "unknown key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := policy.Parse("p.toml", []byte(c.src))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q, want key %s and %q", err, c.key, c.msg)
			}
		})
	}
}

// defaults.approve_writes makes mutating ops wait for a human, unless an op
// says otherwise; read-only ops are not affected.
func TestApproveWrites(t *testing.T) {
	p, err := policy.Parse("p.toml", []byte(`
[defaults]
approve_writes = true
[ops.build]
argv = ["/bin/true"]
[ops.status]
argv = ["/bin/true"]
scope = "read"
[ops.lint]
argv = ["/bin/true"]
approve = false
[agents.a]
ops = ["build", "status", "lint"]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"build": true, "status": false, "lint": false}
	for op, approve := range want {
		inv, err := p.Render("a", op, nil, policy.RenderContext{})
		if err != nil {
			t.Fatal(err)
		}
		if inv.Approve != approve {
			t.Errorf("%s: approve %v, want %v", op, inv.Approve, approve)
		}
	}
}

// cpu takes whole seconds, as a number or a quoted string of digits (the
// form OPERATIONS.md shows), or a Go duration rounded up to whole seconds.
func TestCPUForms(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	for _, c := range []struct {
		val  string
		secs uint64
		bad  string // part of the error, "" if accepted
	}{
		{`7`, 7, ""},
		{`"7"`, 7, ""},
		{`"600"`, 600, ""},
		{`"10m"`, 600, ""},
		{`"1.5s"`, 2, ""},
		{`"86400"`, 86400, ""},
		{`"86401"`, 0, "out of range"},
		{`"-7"`, 0, "bad cpu"},
		{`"+7"`, 0, "bad cpu"},
		{`"7 "`, 0, "bad cpu"},
		{`""`, 0, "bad cpu"},
		{`7.5`, 0, "want seconds or a duration"},
	} {
		t.Run(c.val, func(t *testing.T) {
			p, err := policy.Parse("p.toml", []byte("[ops.t]\nargv = [\"/bin/true\"]\ncpu = "+c.val+"\n[agents.a]\nops = [\"t\"]\n"))
			if c.bad != "" {
				if err == nil || !strings.Contains(err.Error(), c.bad) || !strings.Contains(err.Error(), "ops.t.cpu") {
					t.Fatalf("error %v, want %q at ops.t.cpu", err, c.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			inv, err := p.Render("a", "t", nil, policy.RenderContext{})
			if err != nil {
				t.Fatal(err)
			}
			if inv.Limits.CPUSeconds != c.secs {
				t.Errorf("cpu = %s: %d s, want %d", c.val, inv.Limits.CPUSeconds, c.secs)
			}
		})
	}
}
