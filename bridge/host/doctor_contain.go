package host

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/syncbridge/bridge/bridge/doctor"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/runner"
	"github.com/syncbridge/bridge/bridge/trust"
)

// containmentFinding says what holds every process of an op, so that one
// that calls setsid or double-forks still ends with its run, also when the
// daemon is killed outright (DESIGN.md, Least privilege): the running
// daemon's mechanism, or with none running what a daemon started like this
// command would use; what it cannot guarantee; and how to get a cgroup of
// its own where it has none. It only reads.
func containmentFinding(h *trust.Home) doctor.Finding {
	pid, ok := operator.DaemonRunning(h)
	if !ok {
		pid = 0
	}
	// The running daemon records what it uses (run/mode): from outside, its
	// rights on its cgroup are not this command's, and it may have fallen
	// back since its start.
	how := ""
	if b, err := os.ReadFile(h.Path("run", "mode")); ok && err == nil {
		how = strings.TrimSpace(string(b))
	}
	if how == "" {
		how = runner.Containment(pid)
	}
	last := ""
	if b, err := os.ReadFile(h.Path("run", "mode")); !ok && err == nil && strings.TrimSpace(string(b)) != how {
		last = strings.TrimSpace(string(b))
	}
	f := doctor.Finding{Check: "containment", Severity: doctor.SeverityOK, Message: "op containment: " + how}
	if !ok {
		f.Message += " (bridge serve is not running: as it would be here"
		if last != "" {
			f.Message += "; it last ran with " + last
		}
		f.Message += ")"
	}
	switch {
	case strings.HasPrefix(how, "cgroup"):
		f.Message += "; every process of an op ends with its run and is charged to it, also when the daemon is killed outright," +
			" except one that moves itself out of its cgroup (it outlives a crash of the daemon) and what another service starts" +
			" for an op (systemd-run, at)"
	case strings.HasPrefix(how, "process tree"):
		// As sound, but dearer per op.
		f.Severity = doctor.SeverityWarn
		f.Message += "; every process of an op ends with its run and is charged to it, also when the daemon is killed outright," +
			" with a keeper process per running op, except an op that kills its own keeper process (it outlives a crash" +
			" of the daemon) and what another service starts for an op (systemd-run, at)"
		f.Fix = cgroupFix(h)
	default:
		f.Severity = doctor.SeverityWarn
		f.Fix = "none on this system: a program an op starts can outlive it by calling setsid, and a daemon killed outright" +
			" leaves its ops running; allow only ops that do not daemonize"
	}
	if ok && pid == 1 {
		// Init of its pid namespace: it adopts every orphan there, not
		// only its ops', and kills none it cannot tie to a run.
		f.Severity = doctor.SeverityWarn
		f.Message += "; as PID 1 of its container it adopts every orphan there and ends only those it can tie to a run"
		f.Fix = "run the daemon under an init (`docker run --init`, tini) so that it is not PID 1"
	}
	return f
}

// cgroupFix says how to give the daemon a cgroup v2 of its own.
func cgroupFix(h *trust.Home) string {
	if os.Geteuid() == 0 {
		return "give the daemon a writable cgroup v2: run it outside a container, or in one whose /sys/fs/cgroup is writable" +
			" (docker run --cgroupns=private --privileged, or a systemd unit with Delegate=yes); docs/OPERATIONS.md, Op containment"
	}
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		return fmt.Sprintf("run the daemon in a delegated cgroup v2: `bridge service install` (its systemd unit asks for Delegate=yes),"+
			" or `systemd-run --user --scope -p Delegate=yes bridge serve --home %s` (docs/OPERATIONS.md, Op containment)", h.Dir)
	}
	// No systemd: root makes a cgroup for the user, once per boot.
	root, name := runner.CgroupRoot(), "bridge-"+strconv.Itoa(os.Geteuid())
	if u, err := user.Current(); err == nil {
		name = "bridge-" + u.Username
	}
	if root == "" {
		return "no cgroup v2 is mounted here: the keepers are the way (docs/OPERATIONS.md, Op containment)"
	}
	cg := filepath.Join(root, name)
	return fmt.Sprintf("have root make a cgroup for this user and start the daemon in it: `mkdir -p %[1]s && chown %[2]d %[1]s"+
		" %[1]s/cgroup.procs %[1]s/cgroup.threads %[1]s/cgroup.subtree_control`, then as root `sh -c \"echo \\$\\$ > %[1]s/cgroup.procs"+
		" && exec setpriv --reuid=%[2]d --regid=%[3]d --init-groups bridge serve --home %[4]s\"` (docs/OPERATIONS.md, Op containment)",
		cg, os.Geteuid(), os.Getegid(), h.Dir)
}
