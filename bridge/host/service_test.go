package host

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestServiceUnits(t *testing.T) {
	t.Parallel()
	u, err := NewServiceUnit(ServiceOptions{GOOS: "linux", Exe: "/usr/local/bin/bridge", Home: "/home/me/bridge state", Name: "Laptop", Dir: "/u"})
	if err != nil {
		t.Fatal(err)
	}
	if u.Path() != "/u/bridge-laptop.service" || u.System != "systemd" {
		t.Errorf("systemd unit at %s (%s)", u.Path(), u.System)
	}
	if !strings.Contains(u.Text, "\nExecStart=/usr/local/bin/bridge serve --home \"/home/me/bridge state\" --log-format json\n") {
		t.Errorf("ExecStart not quoted as systemd wants:\n%s", u.Text)
	}
	if r, err := NewServiceUnit(ServiceOptions{GOOS: "linux", Exe: "/b", Home: "/h", Name: "x", Dir: "/d", Root: true}); err != nil || !strings.Contains(r.Text, "ExecStart=/b serve --home /h --allow-root --log-format json\n") {
		t.Errorf("linux unit for root: %v\n%v", err, r)
	}
	if r, err := NewServiceUnit(ServiceOptions{GOOS: "darwin", Exe: "/b", Home: "/h", Name: "x", Dir: "/d", Root: true}); err != nil || !strings.Contains(r.Text, "<string>/h</string>\n\t\t<string>--allow-root</string>\n\t\t<string>--log-format</string>") {
		t.Errorf("launchd plist for root: %v\n%v", err, r)
	}
	m, err := NewServiceUnit(ServiceOptions{GOOS: "darwin", Exe: "/opt/bridge", Home: "/Users/me/a&b", Name: "laptop", Dir: "/la", Path: "/opt/x&y/bin:/usr/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Path() != "/la/dev.syncbridge.laptop.plist" || m.Enable[0][0] != "launchctl" {
		t.Errorf("launchd agent at %s, enable %v", m.Path(), m.Enable)
	}
	for _, want := range []string{"<string>/opt/bridge</string>", "<string>serve</string>", "<string>/Users/me/a&amp;b</string>", "<key>RunAtLoad</key>", "<key>PATH</key>\n\t\t<string>/opt/x&amp;y/bin:/usr/bin</string>"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("plist lacks %s:\n%s", want, m.Text)
		}
	}
	// The installing shell's PATH reaches the daemon; as root, a system
	// unit that systemctl without --user starts.
	r, err := NewServiceUnit(ServiceOptions{GOOS: "linux", Exe: "/b", Home: "/h", Name: "x", Root: true, Path: "/opt/tools/bin:/usr/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Dir != "/etc/systemd/system" || slices.Contains(r.Enable[1], "--user") || !strings.Contains(r.Text, "\nEnvironment=PATH=/opt/tools/bin:/usr/bin\n") ||
		!strings.Contains(r.Text, "WantedBy=multi-user.target") {
		t.Errorf("root unit in %s, enable %v:\n%s", r.Dir, r.Enable, r.Text)
	}
	if _, err := NewServiceUnit(ServiceOptions{GOOS: "plan9", Exe: "/bin/bridge", Home: "/h", Name: "x", Dir: "/d"}); err == nil {
		t.Error("an unknown OS got a unit")
	}
}

// TestOperationsShowsUnits keeps the unit texts in docs/OPERATIONS.md equal
// to what `bridge service install` writes.
func TestOperationsShowsUnits(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, unit := range []string{
		systemdUnit(ServiceOptions{Exe: "/usr/local/bin/bridge", Home: "/home/me/.config/bridge", Path: "/home/me/go/bin:/usr/local/bin:/usr/bin:/bin"}),
		launchdPlist("dev.syncbridge.laptop", ServiceOptions{Exe: "/usr/local/bin/bridge", Home: "/Users/me/Library/Application Support/bridge",
			Path: "/Users/me/go/bin:/opt/homebrew/bin:/usr/bin:/bin"}),
	} {
		if !strings.Contains(string(doc), unit) {
			t.Errorf("docs/OPERATIONS.md does not show this unit as written:\n%s", unit)
		}
	}
}

// A service's PATH keeps only directories no one else can write: another
// user's directory, or one anyone may write (/tmp), would let them put a
// program in front of the ops' own; relative entries mean nothing there.
func TestSafePath(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	good, open := filepath.Join(base, "good"), filepath.Join(base, "open")
	for _, d := range []string{good, open} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	path := strings.Join([]string{good, ".", "bin", open, filepath.Join(base, "missing"), good}, string(filepath.ListSeparator))
	kept, dropped := SafePath(path)
	if kept != good || len(dropped) != 4 {
		t.Fatalf("kept %q, dropped %v", kept, dropped)
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		if err := os.Mkdir(other, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if kept, _ := SafePath(other); kept != "" {
			t.Fatalf("another user's directory kept: %q", kept)
		}
	}
}

// The pid a service manager runs for the unit, as `service status` reads
// it to tell the service's daemon from one started by hand: systemd's
// `show --property=MainPID --value` and launchd's `launchctl list LABEL`.
func TestParseMainPID(t *testing.T) {
	t.Parallel()
	for out, want := range map[string]int{
		"4242\n": 4242,
		"0\n":    0,
		"":       0,
		"{\n\t\"LimitLoadToSessionType\" = \"Aqua\";\n\t\"Label\" = \"dev.syncbridge.laptop\";\n\t\"PID\" = 977;\n\t\"Program\" = \"/usr/local/bin/bridge\";\n};\n": 977,
		"{\n\t\"Label\" = \"dev.syncbridge.laptop\";\n\t\"LastExitStatus\" = 256;\n};\n":                                                                            0,
	} {
		if got := ParseMainPID(out); got != want {
			t.Errorf("ParseMainPID(%q) = %d, want %d", out, got, want)
		}
	}
}
