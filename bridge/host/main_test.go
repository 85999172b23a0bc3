package host

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
)

// serveEnv makes the test binary act as `bridge serve` for the home it
// names: crash tests run the daemon as a real process they can SIGKILL.
const serveEnv = "BRIDGE_TEST_SERVE"

func TestMain(m *testing.M) {
	newProbe = func() *probe { return &probe{} }
	RunnerMain()
	if home := os.Getenv(serveEnv); home != "" {
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

// serveForTest is `bridge serve` for the crash and model tests, tuned by
// the environment: BRIDGE_TEST_DRAIN (how long the first signal drains,
// default 5s), BRIDGE_TEST_APPROVAL_TTL, BRIDGE_TEST_PENDING_TIMEOUT,
// BRIDGE_TEST_SKEW, BRIDGE_TEST_RESCANS (print the count of full rescans
// on stdout as it grows), BRIDGE_TEST_CRASH_AT (the crash-injection step, see
// probe.crashAt), BRIDGE_TEST_POWER_CUT (the crash loses the ledger's
// unsynced writes, probe.powerCut), and BRIDGE_TEST_EVENTS (a file
// that gets one line per lifecycle event taken, for coverage). As the real
// serve, a second signal kills the running ops and exits 130.
func serveForTest(home string) int {
	h, err := trust.OpenHome(home)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	drain := envDuration("BRIDGE_TEST_DRAIN", 5*time.Second)
	d, err := NewDaemon(h, DaemonOptions{AllowRoot: true, Rescan: 200 * time.Millisecond, Grace: 200 * time.Millisecond,
		ApprovalTTL: envDuration("BRIDGE_TEST_APPROVAL_TTL", 0), PendingTimeout: envDuration("BRIDGE_TEST_PENDING_TIMEOUT", 0),
		Skew: envDuration("BRIDGE_TEST_SKEW", 0), Logger: bridge.NewLogger(os.Stderr, "text", bridge.LogDebug)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d.probe.crashAt = os.Getenv("BRIDGE_TEST_CRASH_AT")
	d.probe.powerCut = os.Getenv("BRIDGE_TEST_POWER_CUT") != ""
	if p := os.Getenv("BRIDGE_TEST_EVENTS"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		d.probe.onEvent = func(ev event) { f.Write([]byte(string(ev) + "\n")) }
	}
	if err := d.Open(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		cancel()
		<-sig
		d.Abort()
		os.Exit(130)
	}()
	fmt.Println("ready")
	if os.Getenv("BRIDGE_TEST_RESCANS") != "" {
		// Each full rescan dispatched, as a line on stdout: a test of what
		// a daemon process did not do waits for counted rescans, never a
		// time (daemonProcess.waitRescans).
		go func() {
			last := -1
			for {
				d.fin.mu.Lock()
				n := d.fin.rescans
				d.fin.mu.Unlock()
				if n != last {
					fmt.Printf("rescans %d\n", n)
					last = n
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	d.Run(ctx)
	cctx, stop := context.WithTimeout(context.Background(), drain)
	defer stop()
	d.Close(cctx)
	return 0
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// n is a tally's count so far (0 without a probe).
func (p *probe) n(t tally) int64 {
	if p == nil {
		return 0
	}
	return p.counts[t].Load()
}

// Crash-injection steps, in pipeline order (DESIGN §4).
var crashSteps = []string{"claimed", "running", "mid-run", "published-output", "published", "staged", "gc"}
