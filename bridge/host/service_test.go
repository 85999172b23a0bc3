package host

import (
	"os"
	"strings"
	"testing"
)

func TestServiceUnits(t *testing.T) {
	u, err := NewServiceUnit("linux", "/usr/local/bin/bridge", "/home/me/bridge state", "Laptop", "/u", false)
	if err != nil {
		t.Fatal(err)
	}
	if u.Path() != "/u/bridge-laptop.service" || u.System != "systemd" {
		t.Errorf("systemd unit at %s (%s)", u.Path(), u.System)
	}
	if !strings.Contains(u.Text, "\nExecStart=/usr/local/bin/bridge serve --home \"/home/me/bridge state\" --log-format json\n") {
		t.Errorf("ExecStart not quoted as systemd wants:\n%s", u.Text)
	}
	if r, err := NewServiceUnit("linux", "/b", "/h", "x", "/d", true); err != nil || !strings.Contains(r.Text, "ExecStart=/b serve --home /h --allow-root --log-format json\n") {
		t.Errorf("linux unit for root: %v\n%v", err, r)
	}
	if r, err := NewServiceUnit("darwin", "/b", "/h", "x", "/d", true); err != nil || !strings.Contains(r.Text, "<string>/h</string>\n\t\t<string>--allow-root</string>\n\t\t<string>--log-format</string>") {
		t.Errorf("launchd plist for root: %v\n%v", err, r)
	}
	m, err := NewServiceUnit("darwin", "/opt/bridge", "/Users/me/a&b", "laptop", "/la", false)
	if err != nil {
		t.Fatal(err)
	}
	if m.Path() != "/la/dev.syncbridge.laptop.plist" || m.Enable[0][0] != "launchctl" {
		t.Errorf("launchd agent at %s, enable %v", m.Path(), m.Enable)
	}
	for _, want := range []string{"<string>/opt/bridge</string>", "<string>serve</string>", "<string>/Users/me/a&amp;b</string>", "<key>RunAtLoad</key>"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("plist lacks %s:\n%s", want, m.Text)
		}
	}
	if _, err := NewServiceUnit("plan9", "/bin/bridge", "/h", "x", "/d", false); err == nil {
		t.Error("an unknown OS got a unit")
	}
}

// TestOperationsShowsUnits keeps the unit texts in docs/OPERATIONS.md equal
// to what `bridge service install` writes.
func TestOperationsShowsUnits(t *testing.T) {
	doc, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, unit := range []string{
		systemdUnit("/usr/local/bin/bridge", "/home/me/.config/bridge", false),
		launchdPlist("dev.syncbridge.laptop", "/usr/local/bin/bridge", "/Users/me/Library/Application Support/bridge", false),
	} {
		if !strings.Contains(string(doc), unit) {
			t.Errorf("docs/OPERATIONS.md does not show this unit as written:\n%s", unit)
		}
	}
}
