package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/syncbridge/bridge/bridge"
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
}

// Path is where the unit file goes.
func (u *ServiceUnit) Path() string { return filepath.Join(u.Dir, u.Name) }

// NewServiceUnit renders the unit for goos ("linux", "darwin") that runs exe
// with --home home; name (the host's) names the unit. dir overrides where
// it is installed (default ~/.config/systemd/user or ~/Library/LaunchAgents).
func NewServiceUnit(goos, exe, home, name, dir string, allowRoot bool) (*ServiceUnit, error) {
	hd, err := os.UserHomeDir()
	if err != nil && dir == "" {
		return nil, err
	}
	name = bridge.SanitizeName(name, "host")
	switch goos {
	case "linux":
		if dir == "" {
			dir = filepath.Join(hd, ".config", "systemd", "user")
		}
		unit := "bridge-" + name + ".service"
		return &ServiceUnit{System: "systemd", Name: unit, Dir: dir, Text: systemdUnit(exe, home, allowRoot),
			Enable:  [][]string{{"systemctl", "--user", "daemon-reload"}, {"systemctl", "--user", "enable", "--now", unit}},
			Disable: [][]string{{"systemctl", "--user", "disable", "--now", unit}},
		}, nil
	case "darwin":
		if dir == "" {
			dir = filepath.Join(hd, "Library", "LaunchAgents")
		}
		label := "dev.syncbridge." + name
		p := filepath.Join(dir, label+".plist")
		return &ServiceUnit{System: "launchd", Name: label + ".plist", Dir: dir, Text: launchdPlist(label, exe, home, allowRoot),
			Enable:  [][]string{{"launchctl", "load", "-w", p}},
			Disable: [][]string{{"launchctl", "unload", "-w", p}},
		}, nil
	}
	return nil, bridge.WithHint(fmt.Errorf("service: no user service manager known for %s", goos), "run `bridge serve --home %s` under your own supervisor", home)
}

// systemdQuote quotes one word for ExecStart (systemd.syntax(7)).
func systemdQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\"'\\$%") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `$$`, `%`, `%%`)
	return `"` + r.Replace(s) + `"`
}

func systemdUnit(exe, home string, allowRoot bool) string {
	root := ""
	if allowRoot {
		root = " --allow-root"
	}
	return fmt.Sprintf(`[Unit]
Description=syncbridge host daemon (%[2]s)
Documentation=https://github.com/syncbridge/bridge/blob/main/docs/OPERATIONS.md
After=network-online.target

[Service]
Type=simple
ExecStart=%[1]s serve --home %[3]s%[4]s --log-format json
Restart=on-failure
RestartSec=5s
# A drained stop: the first SIGTERM lets running ops finish their ladder.
KillSignal=SIGTERM
TimeoutStopSec=2min
NoNewPrivileges=yes

[Install]
WantedBy=default.target
`, systemdQuote(exe), home, systemdQuote(home), root)
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

func launchdPlist(label, exe, home string, allowRoot bool) string {
	logs := filepath.Join(home, "serve.log")
	root := ""
	if allowRoot {
		root = "\n\t\t<string>--allow-root</string>"
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
	<string>%s</string>
</dict>
</plist>
`, xmlEscape(label), xmlEscape(exe), xmlEscape(home), root, xmlEscape(logs))
}
