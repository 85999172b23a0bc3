//go:build linux

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge/host"
)

func TestMain(m *testing.M) {
	// The harness re-executes its own binary (the daemon's runner shim,
	// the scale and seal children): here that is this test binary.
	host.RunnerMain()
	if childMain() {
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuickRun runs the whole harness with tiny counts: every section must
// complete and report its rows. The figures themselves are not checked.
func TestQuickRun(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"-quick", "-n", "5", "-tput-n", "10", "-inflight", "4", "-scale-n", "40", "-payload-mib", "2",
		"-poll", "50ms", "-floor-n", "5", "-dir", t.TempDir()}
	if err := run(args, &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	for _, row := range []string{
		"| floor: fsync", "| floor: exec'd no-op round trip",
		"| local ping round trip p50 (n=5) |", "| local exec'd no-op round trip p99 (n=5) |",
		"| throughput ping, 4 in flight (n=10) |", "| throughput exec'd no-op",
		"finished requests: daemon ready", "finished requests: idle rescan", "finished requests: daemon RSS",
		"| seal + open of 2 MiB",
	} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q in:\n%s", row, out.String())
		}
	}
}

func TestFlags(t *testing.T) {
	var errb bytes.Buffer
	if _, err := parse([]string{"-skip", "nosuch"}, &errb); err == nil {
		t.Error("an unknown -skip section was accepted")
	}
	if _, err := parse([]string{"-n", "0"}, &errb); err == nil {
		t.Error("-n 0 was accepted")
	}
	c, err := parse([]string{"-quick", "-n", "7"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if c.n != 7 || c.tputN != 60 || c.payloadMiB != 16 {
		t.Errorf("-quick with -n 7: got n=%d tput-n=%d payload=%d; want the explicit n kept and quick defaults for the rest", c.n, c.tputN, c.payloadMiB)
	}
}
