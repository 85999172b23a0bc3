package host

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/trust"
)

// ServiceUnit is a user service that runs `bridge serve` for one home:
// a systemd --user unit on Linux, a launchd agent on macOS.
type ServiceUnit struct {
	System string // "systemd" or "launchd"
	Name   string // unit file name: bridge-<host>.service, dev.syncbridge.<host>.plist
	Dir    string // where it is installed
	Text   string
	// Enable and Disable are the commands that start and stop it (printed,
	// and run by `bridge service install|uninstall` unless --dry-run).
	Enable, Disable [][]string
	// MainPID is the command that prints the pid the service manager runs
	// for the unit (0 or nothing when none): `service status` tells the
	// service's daemon from one started by hand.
	MainPID []string
	root    bool
}

// ManagerMissing says why the service manager cannot start the unit on this
// machine, or "": no systemd running (a container, WSL without it, an init
// of another kind), or for a user unit no user manager (no login session,
// or lingering off). A unit written there would never start, and the
// commands suggested would fail.
func (u *ServiceUnit) ManagerMissing() string {
	if u.System != "systemd" {
		return ""
	}
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return "systemd is not running on this machine (no /run/systemd/system)"
	}
	if u.root {
		return ""
	}
	run := os.Getenv("XDG_RUNTIME_DIR")
	if run == "" {
		run = fmt.Sprintf("/run/user/%d", os.Getuid())
	}
	if _, err := os.Stat(filepath.Join(run, "systemd")); err != nil {
		return fmt.Sprintf("no systemd user manager runs for this user (no %s)", filepath.Join(run, "systemd"))
	}
	return ""
}

// Path is where the unit file goes.
func (u *ServiceUnit) Path() string { return filepath.Join(u.Dir, u.Name) }

// ServiceOptions say what unit NewServiceUnit renders.
type ServiceOptions struct {
	GOOS string // "linux" or "darwin"
	Exe  string // the bridge binary
	Home string // the host's home, absolute
	Name string // the host's name, which names the unit
	Dir  string // where the unit goes; "" for the default
	// Root: the unit serves as root (serve --allow-root). On Linux it is
	// then a system unit (/etc/systemd/system, `systemctl` without
	// --user): root has no user manager to start a user unit on most
	// systems.
	Root bool
	// Path is the PATH the daemon (and an op whose policy passes PATH)
	// runs with: a service manager's own is minimal (no ~/go/bin, no
	// /usr/local/go/bin), so the installing shell's is written in.
	Path string
}

// NewServiceUnit renders the unit that runs `bridge serve` for o.Home: a
// systemd unit on Linux (a user unit in ~/.config/systemd/user, or for
// root a system unit), a launchd agent on macOS (~/Library/LaunchAgents).
func NewServiceUnit(o ServiceOptions) (*ServiceUnit, error) {
	hd, err := os.UserHomeDir()
	if err != nil && o.Dir == "" && !(o.Root && o.GOOS == "linux") {
		return nil, err
	}
	dir := o.Dir
	name := trust.SanitizeName(o.Name, "host")
	switch o.GOOS {
	case "linux":
		unit := "bridge-" + name + ".service"
		ctl := []string{"systemctl", "--user"}
		if o.Root {
			ctl = []string{"systemctl"}
			if dir == "" {
				dir = "/etc/systemd/system"
			}
		} else if dir == "" {
			dir = filepath.Join(hd, ".config", "systemd", "user")
		}
		with := func(args ...string) []string { return append(append([]string{}, ctl...), args...) }
		return &ServiceUnit{System: "systemd", Name: unit, Dir: dir, Text: systemdUnit(o),
			Enable:  [][]string{with("daemon-reload"), with("enable", "--now", unit)},
			Disable: [][]string{with("disable", "--now", unit)},
			MainPID: with("show", "--property=MainPID", "--value", unit),
			root:    o.Root,
		}, nil
	case "darwin":
		if dir == "" {
			dir = filepath.Join(hd, "Library", "LaunchAgents")
		}
		label := "dev.syncbridge." + name
		p := filepath.Join(dir, label+".plist")
		return &ServiceUnit{System: "launchd", Name: label + ".plist", Dir: dir, Text: launchdPlist(label, o),
			Enable:  [][]string{{"launchctl", "load", "-w", p}},
			Disable: [][]string{{"launchctl", "unload", "-w", p}},
			MainPID: []string{"launchctl", "list", label},
		}, nil
	}
	return nil, bridge.WithHint(fmt.Errorf("service: no user service manager known for %s", o.GOOS), "run `bridge serve --home %s` under your own supervisor", o.Home)
}

// systemdQuote quotes one word for ExecStart (systemd.syntax(7)).
func systemdQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\"'\\$%") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `$$`, `%`, `%%`)
	return `"` + r.Replace(s) + `"`
}

func systemdUnit(o ServiceOptions) string {
	root, target, env := "", "default.target", ""
	if o.Root {
		root, target = " --allow-root", "multi-user.target"
	}
	if o.Path != "" {
		env = "Environment=" + systemdQuote("PATH="+o.Path) + "\n"
	}
	return fmt.Sprintf(`[Unit]
Description=syncbridge host daemon (%[2]s)
Documentation=https://github.com/syncbridge/bridge/blob/main/docs/OPERATIONS.md
After=network-online.target

[Service]
Type=simple
%[5]sExecStart=%[1]s serve --home %[3]s%[4]s --log-format json
Restart=on-failure
RestartSec=5s
# A drained stop: the first SIGTERM, to the daemon alone, lets running ops
# finish their ladder; what is left after the timeout is killed.
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec=2min
# A cgroup of its own to hold each op's processes, across a crash too
# (bridge doctor: containment).
Delegate=yes
NoNewPrivileges=yes

[Install]
WantedBy=%[6]s
`, systemdQuote(o.Exe), o.Home, systemdQuote(o.Home), root, env, target)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

func launchdPlist(label string, o ServiceOptions) string {
	logs := filepath.Join(o.Home, "serve.log")
	root, env := "", ""
	if o.Root {
		root = "\n\t\t<string>--allow-root</string>"
	}
	if o.Path != "" {
		env = "\n\t<key>EnvironmentVariables</key>\n\t<dict>\n\t\t<key>PATH</key>\n\t\t<string>" + xmlEscape(o.Path) + "</string>\n\t</dict>"
	}
	return fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>%s</string>
	<key>ProgramArguments</key>
	<array>
		<string>%s</string>
		<string>serve</string>
		<string>--home</string>
		<string>%s</string>%s
		<string>--log-format</string>
		<string>json</string>
	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>ThrottleInterval</key>
	<integer>5</integer>
	<key>StandardErrorPath</key>
	<string>%s</string>%s
</dict>
</plist>
`, xmlEscape(label), xmlEscape(o.Exe), xmlEscape(o.Home), root, xmlEscape(logs), env)
}

// SafePath keeps the entries of a PATH a service may run programs from:
// absolute, existing directories that neither group nor others can write
// and that belong to this user or root. Anything else in the unit would let
// another user put a program in front of the ops' own (root installing from
// a shell that kept a user's PATH, `sudo -E`), or is a relative entry that
// means nothing to a service. dropped says why each one was left out.
func SafePath(path string) (kept string, dropped []string) {
	var out []string
	for _, dir := range filepath.SplitList(path) {
		if why := policy.UnsafePathDir(dir); why != "" {
			dropped = append(dropped, fmt.Sprintf("%q (%s)", dir, why))
			continue
		}
		if !slices.Contains(out, dir) {
			out = append(out, dir)
		}
	}
	return strings.Join(out, string(filepath.ListSeparator)), dropped
}

// ParseMainPID reads what MainPID printed: systemd's bare number, or
// launchd's `"PID" = N;` line. 0 when the service runs nothing.
func ParseMainPID(out string) int {
	out = strings.TrimSpace(out)
	if n, err := strconv.Atoi(out); err == nil {
		return n
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), `"PID" = `); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(v, ";"))
			return n
		}
	}
	return 0
}
