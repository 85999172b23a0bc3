package host

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/trust"
)

func ceilingDaemon(t *testing.T, dir string, now *time.Time, src string) *ceilings {
	t.Helper()
	p, err := policy.Parse("p.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	b := &base{home: &trust.Home{Dir: dir}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		opt: DaemonOptions{Now: func() time.Time { return *now }}}
	b.rulesP.Store(&rules{p: p})
	return &ceilings{base: b}
}

// Not in parallel: t.Setenv changes the environment of every test of the
// process.
func TestCeilings(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	const src = `
[ops.t]
argv = ["/bin/true"]
cpu = 100
[agents.a]
ops = ["t"]
max_concurrent = 1
max_runs_per_hour = 2
max_cpu_seconds_per_day = 60
[agents.free]
ops = ["t"]
`
	dir := t.TempDir()
	now := time.Date(2026, 1, 2, 23, 0, 0, 0, time.UTC)
	d := ceilingDaemon(t, dir, &now, src)
	inv := func() *policy.Invocation { return &policy.Invocation{Op: "t", Limits: policy.Limits{CPUSeconds: 100}} }
	over := func(d *ceilings, name string) *bridge.Receipt {
		t.Helper()
		release, rc := d.reserve("a", inv())
		if rc == nil {
			release()
		}
		if (rc != nil) != (name != "") || rc != nil && (rc.Status != bridge.StatusRejected || rc.Reason != ReasonCeiling || !strings.Contains(rc.Detail, name)) {
			t.Fatalf("reserve: %+v, want a rejection naming %q", rc, name)
		}
		return rc
	}

	// max_concurrent: a second run while one runs is refused, not queued.
	i1 := inv()
	release, rc := d.reserve("a", i1)
	if rc != nil {
		t.Fatal(rc)
	}
	if i1.Limits.CPUSeconds != 60 {
		t.Errorf("cpu limit %d, want it lowered to the 60 s left today", i1.Limits.CPUSeconds)
	}
	over(d, "max_concurrent = 1")
	release()
	release() // twice is harmless

	// max_runs_per_hour: that was run 1; run 2 fits, run 3 does not.
	over(d, "")
	over(d, "max_runs_per_hour = 2")
	// The count survives a restart (a new daemon on the same home).
	d2 := ceilingDaemon(t, dir, &now, src)
	over(d2, "max_runs_per_hour = 2")
	now = now.Add(61 * time.Minute) // next UTC day, past the hour
	over(d2, "")

	// max_cpu_seconds_per_day: charged CPU counts; a new UTC day starts over.
	d2.chargeCPU("a", 61*time.Second)
	over(d2, "max_cpu_seconds_per_day = 60")
	now = now.Add(24 * time.Hour)
	over(d2, "")

	// An agent without ceilings is never refused and writes nothing.
	for range 5 {
		if release, rc := d2.reserve("free", inv()); rc != nil {
			t.Fatal(rc)
		} else {
			release()
		}
	}
}
