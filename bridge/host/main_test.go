package host

import (
	"os"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/trust"
)

func TestMain(m *testing.M) {
	probe.New = func(string) *probe.Probe { return &probe.Probe{} }
	RunnerMain()
	if home := os.Getenv(testkit.ServeEnv); home != "" {
		os.Exit(serveForTest(home))
	}
	testkit.ParallelByDefault(map[bool]int{false: 12, true: 8}[testkit.RaceOn])
	os.Exit(m.Run())
}

// serveForTest is `bridge serve` for the crash and model tests: the
// environment tunes it (testkit.Serve).
func serveForTest(home string) int {
	return testkit.Serve(home, func(h *trust.Home, o testkit.ServeOptions) (testkit.Daemon, error) {
		return NewDaemon(h, DaemonOptions{AllowRoot: true, Rescan: 200 * time.Millisecond, Grace: 200 * time.Millisecond,
			ApprovalTTL: o.ApprovalTTL, PendingTimeout: o.PendingTimeout, Skew: o.Skew, Logger: o.Logger})
	})
}
