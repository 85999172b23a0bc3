package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/doctor"
)

// TestDoctorFindings plants what a testscript cannot: an agent clock ahead
// of the host's, few inotify watches, a full disk and old keys.
func TestDoctorFindings(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	// The host's clock runs 5 minutes behind: the agent's looks ahead.
	runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond, Now: func() time.Time { return time.Now().Add(-5 * time.Minute) }})
	if out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}}); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("echo: %+v", out.Receipt)
	}
	inotify := filepath.Join(t.TempDir(), "max_user_watches")
	os.WriteFile(inotify, []byte("100\n"), 0o644)
	found := Doctor(p.host, doctor.Options{InotifyPath: inotify, MinFree: 1 << 62, MaxKeyAge: time.Nanosecond,
		Now: func() time.Time { return time.Now().Add(48 * time.Hour) }})
	want := map[string]string{
		"clock-skew": "warn agent cloud-1's clock runs ", // about 5m ahead
		"inotify":    "warn fs.inotify.max_user_watches is 100",
		"disk":       "problem only ",
		"key-age":    "warn this party's keys are 2 days old",
		"daemon":     "ok bridge serve is running (pid ",
		"marker":     "ok ",
	}
	got := map[string]string{}
	for _, f := range found {
		if f.Severity != doctor.SeverityOK && f.Fix == "" {
			t.Errorf("%s: %s has no fix", f.Check, f.Message)
		}
		got[f.Check] = f.Severity + " " + f.Message
	}
	for check, w := range want {
		if !strings.HasPrefix(got[check], w) {
			t.Errorf("%s: %q, want %q...", check, got[check], w)
		}
	}
}
