package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/doctor"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
)

// Operator tools: the audit log, doctor and the user service.

// AuditCmd prints or verifies the host's audit log.
type AuditCmd struct {
	Show   AuditShowCmd   `cmd:"" default:"withargs" help:"Print the audit log (the default)."`
	Verify AuditVerifyCmd `cmd:"" help:"Check the audit log's hash chain and tail checkpoint."`
}

// AuditShowCmd prints audit events.
type AuditShowCmd struct {
	Lines int `name:"lines" short:"n" placeholder:"N" help:"Only the last N events (default: all)."`
}

func (c *AuditShowCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	evs, err := host.ReadAudit(h, c.Lines)
	if err != nil {
		return err
	}
	names := operator.AgentNames(h)
	if g.JSON {
		// The events as stored (agent is the id: the chain hashes those
		// bytes), with the agent's local name beside it.
		type shown struct {
			host.AuditEvent
			AgentName string `json:"agent_name,omitempty"`
		}
		out := make([]shown, len(evs))
		for i, e := range evs {
			out[i] = shown{AuditEvent: e, AgentName: names[e.Agent]}
		}
		return g.printJSON(out)
	}
	for _, e := range evs {
		var b strings.Builder
		fmt.Fprintf(&b, "%d  %s  %s", e.Seq, e.Time.Local().Format(time.DateTime), e.Event)
		who := e.Agent
		if n := names[e.Agent]; n != "" {
			who = n // the id stays in --json
		}
		for _, kv := range [][2]string{{"agent", who}, {"id", e.ID}, {"op", e.Op}, {"status", e.Status}, {"reason", e.Reason}, {"file", e.File}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
			}
		}
		if e.Exit != nil {
			fmt.Fprintf(&b, " exit=%d", *e.Exit)
		}
		if e.Detail != "" {
			fmt.Fprintf(&b, " — %s", e.Detail)
		}
		g.printf("%s\n", b.String())
	}
	return nil
}

// AuditVerifyCmd checks the audit log.
type AuditVerifyCmd struct{}

func (c *AuditVerifyCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	res, err := host.VerifyAudit(h)
	if err != nil {
		return err
	}
	if g.JSON {
		if err := g.printJSON(res); err != nil {
			return err
		}
	} else if res.OK {
		g.printf("audit log intact: %d line%s\n", res.Lines, map[bool]string{true: "", false: "s"}[res.Lines == 1])
	} else {
		for _, p := range res.Problems {
			g.printf("%s\n", p)
		}
	}
	if !res.OK {
		return &codeError{code: exitError, err: host.ErrAuditBroken}
	}
	return nil
}

// DoctorCmd checks the set-up.
type DoctorCmd struct{}

func (c *DoctorCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	// An agent's home has no daemon, policy or ledger: those checks are
	// the host's alone.
	var found []doctor.Finding
	if h.Config.Role == "host" {
		found = host.Doctor(h, doctor.Options{})
	} else {
		found = doctor.CheckHome(h, doctor.Options{})
		found = append(found, livenessFindings(h)...)
	}
	problems := 0
	for _, f := range found {
		if f.Severity == doctor.SeverityProblem {
			problems++
		}
	}
	if g.JSON {
		if err := g.printJSON(map[string]any{"ok": problems == 0, "findings": found}); err != nil {
			return err
		}
	} else {
		// The check column as wide as its longest name (untrusted-agents,
		// syncthing-results): the messages start in one column.
		w := 0
		for _, f := range found {
			w = max(w, len(f.Check))
		}
		for _, f := range found {
			g.printf("%-7s %-*s  %s\n", f.Severity, w, f.Check, f.Message)
			if f.Fix != "" && f.Severity != doctor.SeverityOK {
				g.printf("        %-*s  fix: %s\n", w, "", f.Fix)
			}
		}
	}
	if problems > 0 {
		return &codeError{code: exitError, err: fmt.Errorf("doctor: %d problem(s) found", problems)}
	}
	return nil
}

// livenessFindings judges, on an agent, each trusted host's liveness
// stamp: one host-liveness finding per host.
func livenessFindings(h *trust.Home) []doctor.Finding {
	peers, err := h.Peers()
	if err != nil {
		return nil // CheckHome reports the home's trouble
	}
	cl, err := agent.OpenClient(h)
	if err != nil {
		return []doctor.Finding{{Check: "host-liveness", Severity: doctor.SeverityProblem, Message: "cannot open the folder: " + err.Error()}}
	}
	defer cl.Close()
	var out []doctor.Finding
	for _, p := range peers {
		if p.Role != "host" {
			continue
		}
		lv, err := cl.HostLiveness(p.ID)
		if err != nil {
			out = append(out, doctor.Finding{Check: "host-liveness", Severity: doctor.SeverityProblem, Message: fmt.Sprintf("host %q: %v", p.Name, err)})
			continue
		}
		f := doctor.Finding{Check: "host-liveness", Severity: doctor.SeverityWarn, Message: lv.Message}
		switch lv.Verdict {
		case agent.LivenessOK:
			f.Severity = doctor.SeverityOK
		case agent.LivenessNotAccepted:
			f.Severity = doctor.SeverityProblem
			f.Fix = "on the host, `bridge keys show`; pair this agent again if it is missing or revoked (docs/KEYS.md)"
		case agent.LivenessStopped:
			f.Fix = "start `bridge serve` on the host (or its service); requests wait in the folder meanwhile"
		case agent.LivenessDraining:
			f.Fix = "the host's daemon is stopping: start `bridge serve` (or its service) again once it stopped; requests wait in the folder meanwhile"
		case agent.LivenessStale:
			f.Fix = "check that `bridge serve` runs on the host and that the sync client runs on both machines"
			if lv.ClockAheadSeconds > 0 {
				f.Fix += "; and compare the two machines' clocks (`timedatectl`): enable NTP on both"
			}
		case agent.LivenessNoStamp:
			f.Fix = "check that the host trusts this agent (`bridge keys show` there) and runs `bridge serve`, and that the folder syncs"
		case agent.LivenessClockAhead:
			f.Fix = "compare the clocks of both machines (timedatectl); a stamp dated ahead is not believed either way"

		case agent.LivenessRotationPending:
			f.Fix = "wait for the sync to carry this agent's rotation statement to the host"
		}
		out = append(out, f)
	}
	return out
}

// ServiceCmd installs `bridge serve` as a user service.
type ServiceCmd struct {
	Install   ServiceInstallCmd   `cmd:"" help:"Write and start a user service running bridge serve for this home."`
	Uninstall ServiceUninstallCmd `cmd:"" help:"Stop and remove the user service."`
	Status    ServiceStatusCmd    `cmd:"" help:"Show whether the service is installed and the daemon runs."`
}

// serviceFlags are shared by the service commands.
type serviceFlags struct {
	Dir       string `name:"dir" placeholder:"DIR" help:"Install the unit here instead of the user's service directory."`
	FilesOnly bool   `name:"files-only" help:"Only write or remove the unit file; do not call systemctl or launchctl."`
}

func (f *serviceFlags) unit(g *Globals, allowRoot bool) (*trust.Home, *host.ServiceUnit, error) {
	h, err := g.openHome()
	if err != nil {
		return nil, nil, err
	}
	if h.Config.Role != "host" {
		return nil, nil, withHintf(errors.New("service: this home belongs to an agent"), "the service runs `bridge serve`, on the host")
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	home, err := filepath.Abs(h.Dir)
	if err != nil {
		return nil, nil, err
	}
	path, dropped := host.SafePath(os.Getenv("PATH"))
	for _, d := range dropped {
		g.note("warning: left %s out of the unit's PATH", d)
	}
	u, err := host.NewServiceUnit(host.ServiceOptions{GOOS: runtime.GOOS, Exe: exe, Home: home, Name: h.Config.Name, Dir: f.Dir,
		Root: allowRoot, Path: path})
	return h, u, err
}

func (g *Globals) runAll(cmds [][]string) error {
	for _, c := range cmds {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(c, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

func joinCmds(cmds [][]string) string {
	var s []string
	for _, c := range cmds {
		s = append(s, strings.Join(c, " "))
	}
	return strings.Join(s, "; ")
}

// cmdsOrEmpty is cmds for --json: `[]`, not `null`, when there is none.
func cmdsOrEmpty(cmds [][]string) [][]string {
	if cmds == nil {
		return [][]string{}
	}
	return cmds
}

// ServiceInstallCmd writes the unit.
type ServiceInstallCmd struct {
	serviceFlags
	DryRun    bool `name:"dry-run" help:"Print the unit and the commands; change nothing."`
	AllowRoot bool `name:"allow-root" help:"As root: write a unit that serves as root (serve --allow-root); refused otherwise."`
}

// isRoot: root's service is a system unit (host.ServiceOptions.Root).
func isRoot() bool { return runtime.GOOS != "windows" && os.Geteuid() == 0 }

func (c *ServiceInstallCmd) Run(g *Globals) error {
	root := isRoot()
	// As root, the dry run shows the unit --allow-root would write (the
	// only one install writes as root), with the refusal beside it.
	h, u, err := c.unit(g, root && (c.AllowRoot || c.DryRun))
	if err != nil {
		return err
	}
	refused := withHintf(errors.New("service install: refusing to install a service that runs as root"),
		"install it as the user whose tools the ops use; if you really mean root, pass --allow-root")
	noManager := u.ManagerMissing()
	if c.DryRun {
		if g.JSON {
			return g.printJSON(map[string]any{"path": u.Path(), "unit": u.Text, "would_run": cmdsOrEmpty(u.Enable), "dry_run": true,
				"refused_without_allow_root": root && !c.AllowRoot, "manager_missing": noManager})
		}
		g.printf("# %s\n%s", u.Path(), u.Text)
		g.note("would run: %s", joinCmds(u.Enable))
		if root && !c.AllowRoot {
			g.note("warning: %v without --allow-root (%s)", refused, refused.(*bridge.HintError).Hint)
		}
		if noManager != "" && !c.FilesOnly {
			g.note("warning: %s: install would refuse, as the unit would never start; run `bridge serve` under this machine's own supervisor, or pass --files-only to write the unit anyway", noManager)
		}
		return nil
	}
	if root && !c.AllowRoot {
		// serve refuses root without --allow-root: the unit would fail and
		// restart every few seconds.
		return &codeError{code: exitError, err: refused}
	}
	if noManager != "" && !c.FilesOnly {
		// Written, the unit would never start, and the systemctl commands
		// suggested would fail too.
		return &codeError{code: exitError, err: withHintf(fmt.Errorf("service install: %s: a unit written here would never start", noManager),
			"run `%s` under this machine's own supervisor (a container's entry point, supervisord, runit, a tmux session: docs/OPERATIONS.md); or pass --files-only to write the unit for a machine that boots with systemd", serveLine(h, root))}
	}
	if err := os.MkdirAll(u.Dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(u.Path(), []byte(u.Text), 0o644); err != nil {
		return err
	}
	if c.FilesOnly {
		if g.JSON {
			return g.printJSON(map[string]any{"path": u.Path(), "wrote": true, "started": false, "start_with": cmdsOrEmpty(u.Enable), "manager_missing": noManager})
		}
		g.printf("wrote %s\n", u.Path())
		if noManager != "" {
			g.note("%s here: start it on a machine that boots with systemd (%s), or run `%s` under this machine's own supervisor", noManager, joinCmds(u.Enable), serveLine(h, root))
		} else {
			g.note("start it with: %s", joinCmds(u.Enable))
		}
		return nil
	}
	if !g.JSON {
		g.printf("wrote %s\n", u.Path())
	}
	if err := g.runAll(u.Enable); err != nil {
		return withHintf(err, "the unit is written; start it by hand: %s", joinCmds(u.Enable))
	}
	if g.JSON {
		return g.printJSON(map[string]any{"path": u.Path(), "wrote": true, "started": true, "name": u.Name, "system": u.System})
	}
	g.printf("started %s (%s)\n", u.Name, u.System)
	return nil
}

// ServiceUninstallCmd removes the unit.
type ServiceUninstallCmd struct {
	serviceFlags
	DryRun bool `name:"dry-run" help:"Print what would be done; change nothing."`
}

func (c *ServiceUninstallCmd) Run(g *Globals) error {
	_, u, err := c.unit(g, isRoot())
	if err != nil {
		return err
	}
	if c.DryRun {
		if g.JSON {
			return g.printJSON(map[string]any{"path": u.Path(), "would_run": cmdsOrEmpty(u.Disable), "dry_run": true})
		}
		g.note("would run: %s", joinCmds(u.Disable))
		g.printf("would remove %s\n", u.Path())
		return nil
	}
	if _, err := os.Stat(u.Path()); errors.Is(err, fs.ErrNotExist) {
		if g.JSON {
			return g.printJSON(map[string]any{"path": u.Path(), "removed": false})
		}
		g.note("%s is not installed", u.Path())
		return nil
	}
	if !c.FilesOnly {
		if err := g.runAll(u.Disable); err != nil {
			g.note("%v", err) // removed anyway: a unit that failed to stop is still not wanted
		}
	}
	if err := os.Remove(u.Path()); err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"path": u.Path(), "removed": true})
	}
	g.printf("removed %s\n", u.Path())
	return nil
}

// ServiceStatusCmd reports on the unit and the daemon.
type ServiceStatusCmd struct {
	Dir string `name:"dir" placeholder:"DIR" help:"Look for the unit here instead of the user's service directory."`
}

func (c *ServiceStatusCmd) Run(g *Globals) error {
	h, u, err := (&serviceFlags{Dir: c.Dir}).unit(g, isRoot())
	if err != nil {
		return err
	}
	_, serr := os.Stat(u.Path())
	pid, running := operator.DaemonRunning(h)
	// Whether the daemon that runs is the service's: the service manager's
	// pid for the unit, when it answers (unknown otherwise: no systemd, a
	// --dir unit it does not know).
	servicePID, known := 0, false
	if serr == nil && u.ManagerMissing() == "" && len(u.MainPID) > 0 {
		if out, err := exec.Command(u.MainPID[0], u.MainPID[1:]...).Output(); err == nil {
			servicePID, known = host.ParseMainPID(string(out)), true
		}
	}
	asService := known && running && servicePID == pid
	noManager := u.ManagerMissing()
	if g.JSON {
		v := map[string]any{"system": u.System, "unit": u.Path(), "installed": serr == nil, "running": running, "manager_missing": noManager}
		if running {
			v["pid"] = pid
		}
		if known {
			v["service_pid"], v["as_service"] = servicePID, asService
		}
		return g.printJSON(v)
	}
	if serr == nil {
		g.printf("installed %s (%s)\n", u.Path(), u.System)
	} else {
		g.printf("not installed (%s)\n", u.Path())
	}
	if noManager != "" {
		g.printf("%s: no unit of it can run here\n", noManager)
	}
	switch {
	case !running:
		g.printf("bridge serve is not running\n")
	case asService:
		g.printf("bridge serve is running as the service (pid %d)\n", pid)
	case known && servicePID != 0:
		g.printf("bridge serve is running (pid %d), not the service's (it runs pid %d)\n", pid, servicePID)
	case known || serr != nil:
		g.printf("bridge serve is running (pid %d), started by hand, not by the service\n", pid)
	default:
		g.printf("bridge serve is running (pid %d); whether as the service, %s does not say\n", pid, u.System)
	}
	return nil
}

// absDir is dir made absolute, as it is if that fails.
func absDir(dir string) string {
	if a, err := filepath.Abs(dir); err == nil {
		return a
	}
	return dir
}

// serveLine is the command that runs this home's daemon, as a supervisor
// would run it.
func serveLine(h *trust.Home, root bool) string {
	line := "bridge serve --home " + absDir(h.Dir)
	if root {
		line += " --allow-root"
	}
	return line
}
