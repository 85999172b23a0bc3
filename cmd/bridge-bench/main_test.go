//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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
// complete and report its rows (the fsync rows too: "not measured" where
// strace is missing). The figures themselves are not checked.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	var out, errb bytes.Buffer
	args := []string{"-quick", "-n", "5", "-tput-n", "10", "-inflight", "4", "-scale-n", "40", "-payload-mib", "2",
		"-poll", "50ms", "-client-poll", "50ms", "-pause", "50ms", "-idle-window", "300ms", "-floor-n", "5", "-dir", t.TempDir()}
	if err := run(args, &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	for _, row := range []string{
		"| floor: fsync", "| floor: exec'd no-op round trip",
		"| baseline sporadic round trip, client polling every 10 ms (n=2) |",
		"| baseline sporadic round trip, a client process per request polling every 50ms (n=2) |",
		"| sporadic library round trip", "| sporadic `bridge run echo`",
		"| back to back, library, `bridge serve` process, fresh folder (n=4) |", "| back to back, `bridge run`, fresh folder (n=4) |",
		"| back to back, library, 60 unacked results in the folder (n=4) |", "| back to back, `bridge run`, 60 unacked results",
		"| baseline burst: 8 into its queue at once", "| burst of 8 through the CLI", "| burst of 8 through the library",
		"| burst of 8 through the CLI, 60 unacked results", "| burst of 8 through the library, 60 unacked results",
		"| idle `bridge serve`, empty folder", "| idle `bridge serve`, 60 finished",
		"| baseline idle, empty queue: Python worker, as the reference runs", "| baseline idle, empty queue: Go worker",
		"| baseline idle, beside 60 finished requests (its journal and processed/), restarted: Python worker",
		"| baseline idle, beside 60 finished requests (its journal and processed/), restarted: Go worker",
		"| fsyncs per round trip, `bridge run` + `bridge serve`", "| fsyncs per round trip, library",
		"| local ping round trip p50 (n=5), back to back, daemon in-process |", "| local exec'd no-op round trip p99 (n=5)",
		"| throughput ping, 4 in flight (n=10)", "| throughput exec'd no-op",
		"finished requests: daemon ready", "finished requests: idle rescan", "finished requests: daemon RSS",
		"| seal + open of 2 MiB",
	} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("no row %q in:\n%s", row, out.String())
		}
	}
	// With python3 at hand the Python worker is measured: it idled, then
	// answered a request.
	if _, err := exec.LookPath("python3"); err == nil {
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, "Python worker") && strings.Contains(line, "not measured") {
				t.Errorf("python3 is in PATH, yet: %s", line)
			}
		}
	}
}

// TestBuildFailure: when the bridge binary does not build, the run goes
// on and the rows that need the binary say so.
func TestBuildFailure(t *testing.T) {
	defer func(p string) { bridgePkg = p }(bridgePkg)
	bridgePkg = "./cmd/nosuch"
	var out, errb bytes.Buffer
	args := []string{"-quick", "-n", "2", "-skip", "floor,baseline,burst,idle,tput,scale,junk,seal,syncthing", "-b2b-n", "1", "-dir", t.TempDir()}
	if err := run(args, &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	for _, row := range []string{
		"| sporadic library round trip", "| sporadic `bridge run echo`",
		"| back to back, library, `bridge serve` process, fresh folder (n=0) |", "| back to back, `bridge run`, 60 unacked results",
		"| fsyncs per round trip, `bridge run` + `bridge serve`",
		"| daemon CPU per request, exec'd no-op beside ping and fork/exec | not measured",
	} {
		found := false
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(line, row) {
				found = true
				if !strings.Contains(line, "not measured: `go build ./cmd/nosuch` failed") {
					t.Errorf("row without the reason: %s", line)
				}
			}
		}
		if !found {
			t.Errorf("no row %q in:\n%s", row, out.String())
		}
	}
	if !strings.Contains(out.String(), "| local ping round trip p50 (n=2)") {
		t.Errorf("the rows that need no binary are missing:\n%s", out.String())
	}
	// Skipped sections leave no rows and no zero figures beside others.
	if strings.Contains(out.String(), "| floor:") || strings.Contains(out.String(), "(n=0): ") || strings.Contains(out.String(), "floor 0.00 ms") {
		t.Errorf("figures of skipped sections in:\n%s", out.String())
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
	if _, err := parse([]string{"-pause", "0s"}, &errb); err == nil {
		t.Error("-pause 0s was accepted")
	}
	for _, s := range sections {
		if _, err := parse([]string{"-skip", s}, &errb); err != nil {
			t.Errorf("-skip %s: %v", s, err)
		}
	}
	if c.n != 7 || c.tputN != 60 || c.payloadMiB != 16 {
		t.Errorf("-quick with -n 7: got n=%d tput-n=%d payload=%d; want the explicit n kept and quick defaults for the rest", c.n, c.tputN, c.payloadMiB)
	}
}

// TestReadTrace parses strace -f -ttt lines as strace writes them: pids
// padded with spaces or absent, calls split by another thread's, signals.
func TestReadTrace(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t")
	text := `7191  1796178204.212076 fsync(5)        = 0
12345 1796178204.300000 fdatasync(7 <unfinished ...>
7192  1796178204.300100 --- SIGURG {si_signo=SIGURG} ---
12345 1796178204.300200 <... fdatasync resumed>) = 0
1796178204.400000 write(1, "ok\n", 3) = 3
7191  1796178204.500000 write(2, "x", 1) = 1
7353  1796178204.600000 +++ exited with 0 +++
`
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	evs, err := readTrace(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 {
		t.Fatalf("got %d events, want 4: %+v", len(evs), evs)
	}
	if n := countSyncs(evs, 0, 2e9); n != 2 {
		t.Errorf("%d syncs, want 2", n)
	}
	if n := countSyncs(evs, 1796178204.25, 2e9); n != 1 {
		t.Errorf("%d syncs after the first, want 1", n)
	}
	if evs[1].call != "fdatasync" || evs[1].arg0 != "7" {
		t.Errorf("an unfinished call parsed as %+v", evs[1])
	}
	if evs[2].call != "write" || evs[2].arg0 != "1" || evs[2].ts != 1796178204.4 {
		t.Errorf("write to stdout parsed as %+v", evs[2])
	}
}
