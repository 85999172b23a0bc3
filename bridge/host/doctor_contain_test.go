package host

import (
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/doctor"
)

// TestDoctorContainment: doctor names the mechanism that holds every
// process of an op, the running daemon's once it has run one.
func TestDoctorContainment(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	find := func() doctor.Finding {
		t.Helper()
		for _, f := range Doctor(p.host, doctor.Options{}) {
			if f.Check == "containment" {
				return f
			}
		}
		t.Fatal("no containment finding")
		return doctor.Finding{}
	}
	f := find()
	if !strings.HasPrefix(f.Message, "op containment: ") || !strings.Contains(f.Message, "bridge serve is not running") {
		t.Errorf("without a daemon: %+v", f)
	}
	runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond})
	if out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}}); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("echo: %+v", out.Receipt)
	}
	f = find()
	cgroup := strings.HasPrefix(f.Message, "op containment: cgroup v2 (a cgroup per run, under ") && f.Severity == doctor.SeverityOK && f.Fix == ""
	keeper := strings.HasPrefix(f.Message, "op containment: process tree tracking, a keeper process per run (") &&
		f.Severity == doctor.SeverityWarn && strings.Contains(f.Fix, "Op containment")
	if !cgroup && !keeper || !strings.Contains(f.Message, "killed outright") || strings.Contains(f.Message, "not running") {
		t.Errorf("with the daemon (in this process) after an op: %+v", f)
	}
	t.Log(f.Message)
}
