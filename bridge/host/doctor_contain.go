package host

import (
	"strings"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/runner"
)

// containmentFinding says what holds every process of an op, so that one
// that calls setsid or double-forks still ends with its run (DESIGN.md,
// Least privilege): the running daemon's mechanism, or with none running
// what a daemon started like this command would use. It only reads.
func containmentFinding(h *bridge.Home) bridge.Finding {
	pid, ok := DaemonRunning(h)
	if !ok {
		pid = 0
	}
	how := runner.Containment(pid)
	f := bridge.Finding{Check: "containment", Severity: bridge.SeverityOK, Message: "op containment: " + how}
	if !ok {
		f.Message += " (bridge serve is not running: as it would be here)"
	}
	if !strings.HasPrefix(how, "cgroup") && !strings.HasPrefix(how, "process tree") {
		f.Severity = bridge.SeverityWarn
		f.Fix = "none on this system: a program an op starts can outlive it by calling setsid; allow only ops that do not daemonize"
	}
	return f
}
