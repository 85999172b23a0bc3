package host

import (
	"flag"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/trust"
)

func TestMain(m *testing.M) {
	probe.New = func() *probe.Probe { return &probe.Probe{} }
	RunnerMain()
	if home := os.Getenv(testkit.ServeEnv); home != "" {
		os.Exit(serveForTest(home))
	}
	parallelByDefault(map[bool]int{false: 12, true: 8}[raceOn])
	os.Exit(m.Run())
}

// parallelByDefault runs up to n tests at once unless -test.parallel says
// otherwise. The tests here mostly wait (on daemons, their processes, the
// folder's events), a fraction of a core each even under the race detector:
// run GOMAXPROCS at a time, as go test does by default, a 2-core machine
// would sit idle most of the package's run. Without the race detector 12
// at a time (about 0.9 of a core: `go test -short` of the package went
// from 37 s to 31 s); under it 8, each test's CPU being several times more.
func parallelByDefault(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}

// serveForTest is `bridge serve` for the crash and model tests: the
// environment tunes it (testkit.Serve).
func serveForTest(home string) int {
	return testkit.Serve(home, func(h *trust.Home, o testkit.ServeOptions) (testkit.Daemon, error) {
		return NewDaemon(h, DaemonOptions{AllowRoot: true, Rescan: 200 * time.Millisecond, Grace: 200 * time.Millisecond,
			ApprovalTTL: o.ApprovalTTL, PendingTimeout: o.PendingTimeout, Skew: o.Skew, Logger: o.Logger})
	})
}

// Crash-injection steps, in pipeline order (DESIGN §4).
var crashSteps = []string{"claimed", "running", "mid-run", "published-output", "published", "staged", "gc"}
