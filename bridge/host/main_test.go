package host

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
)

// serveEnv makes the test binary act as `bridge serve` for the home it
// names: crash tests run the daemon as a real process they can SIGKILL.
const serveEnv = "BRIDGE_TEST_SERVE"

func TestMain(m *testing.M) {
	RunnerMain()
	if home := os.Getenv(serveEnv); home != "" {
		os.Exit(serveForTest(home))
	}
	os.Exit(m.Run())
}

func serveForTest(home string) int {
	h, err := bridge.OpenHome(home)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d, err := NewDaemon(h, DaemonOptions{AllowRoot: true, Rescan: 200 * time.Millisecond, Grace: 200 * time.Millisecond,
		Logger: bridge.NewLogger(os.Stderr, "text", bridge.LogDebug)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := d.Open(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Println("ready")
	d.Run(ctx)
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.Close(cctx)
	return 0
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
