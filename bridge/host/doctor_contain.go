package host

import (
	"os"
	"strings"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/runner"
)

// containmentFinding says what holds every process of an op, so that one
// that calls setsid or double-forks still ends with its run, also when the
// daemon is killed outright (DESIGN.md, Least privilege): the running
// daemon's mechanism, or with none running what a daemon started like this
// command would use; what it cannot guarantee; and how to get a cgroup of
// its own where it has none. It only reads.
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
	switch {
	case strings.HasPrefix(how, "cgroup"):
		f.Message += "; every process of an op ends with its run and is charged to it, also after the daemon is killed outright" +
			" (not what another service starts for an op: systemd-run, at)"
	case strings.HasPrefix(how, "process tree"):
		// Sound, but dearer, and with one gap a cgroup closes.
		f.Severity = bridge.SeverityWarn
		f.Message += "; every process of an op ends with its run and is charged to it, also after the daemon is killed outright," +
			" at the cost of one more process start per op; an op that kills its own keeper process outlives a crash of the daemon"
		f.Fix = cgroupFix()
	default:
		f.Severity = bridge.SeverityWarn
		f.Fix = "none on this system: a program an op starts can outlive it by calling setsid, and a daemon killed outright" +
			" leaves its ops running; allow only ops that do not daemonize"
	}
	return f
}

// cgroupFix says how to give the daemon a cgroup v2 of its own.
func cgroupFix() string {
	if os.Geteuid() == 0 {
		return "give the daemon a writable cgroup v2: run it outside a container, or in one whose /sys/fs/cgroup is writable" +
			" (docker run --cgroupns=private --privileged, or a systemd unit with Delegate=yes)"
	}
	return "run the daemon with a delegated cgroup v2: `bridge service install` (its systemd unit asks for Delegate=yes)," +
		" or `systemd-run --user --scope -p Delegate=yes bridge serve`"
}
