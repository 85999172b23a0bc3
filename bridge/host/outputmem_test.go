package host

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/trust"
)

// agentMemEnv makes the test binary an agent that opens one result and
// prints its output's SHA-256 and its own peak RSS: "home id stream|load".
const agentMemEnv = "BRIDGE_TEST_AGENT_MEM"

const bigOutput = 48 << 20

const bigPolicy = `
[ops.big]
argv = ["sh", "-c", "head -c 50331648 /dev/zero | tr '\\0' x; echo done >&2"]
env = ["PATH"]
max_output = "64MiB"

[agents.cloud-1]
ops = ["big"]
`

// An op's output is not held in memory whole on either side: 48 MiB of
// output costs the daemon (capture, redaction scan, seal, publish) and the
// agent (verify, open, print) well under twice its size in peak RSS, where
// each took 4-5 times it when the output was kept in buffers. Peak RSS is
// the kernel's high-water mark of each process, so the bound (2x + 64 MiB)
// holds on any load, and the old code exceeds it by far (not under the race
// detector, whose shadow memory grows with the heap: there only the flow is
// checked).
func TestOutputMemoryBounded(t *testing.T) {
	t.Parallel()
	if spec := os.Getenv(agentMemEnv); spec != "" {
		agentMemChild(spec)
		return
	}
	if testing.Short() {
		t.Skip("48 MiB through both sides")
	}
	p := newPair(t, bigPolicy)
	d := startDaemonProcess(t, p)
	s, err := p.client.Submit(agent.SubmitOptions{Op: "big"})
	if err != nil {
		t.Fatal(err)
	}
	// The daemon answers; its peak RSS is read before it stops.
	testkit.WaitFor(t, 60*time.Second, "the result", func() bool {
		_, err := os.Stat(p.toAgent() + "/" + s.ID + ".result")
		return err == nil
	})
	hostPeak := peakRSS(t, d.Cmd.Process.Pid)
	d.Kill()
	want := sha256.Sum256([]byte(strings.Repeat("x", bigOutput)))
	limit := int64(2*bigOutput + 64<<20)
	t.Logf("daemon peak RSS %d MiB for %d MiB of output", hostPeak>>20, bigOutput>>20)
	if testkit.RaceOn {
		// The race detector's shadow memory scales with the heap: the
		// bound is for real builds. The flow still runs.
		limit = 1 << 62
	}
	if hostPeak > limit {
		t.Errorf("daemon peak RSS %d MiB, over %d MiB", hostPeak>>20, limit>>20)
	}
	for _, mode := range []string{"stream", "load"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOutputMemoryBounded$")
		cmd.Env = append(os.Environ(), agentMemEnv+"="+p.agentHome+" "+s.ID+" "+mode)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("agent (%s): %v\n%s", mode, err, out)
		}
		var sum string
		var peak int64
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "stdout-sha256 "); ok {
				sum = v
			}
			if v, ok := strings.CutPrefix(line, "peak-rss "); ok {
				peak, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		if sum != hex.EncodeToString(want[:]) || peak == 0 {
			t.Fatalf("agent (%s) printed:\n%s", mode, out)
		}
		t.Logf("agent (%s) peak RSS %d MiB", mode, peak>>20)
		if peak > limit {
			t.Errorf("agent (%s) peak RSS %d MiB, over %d MiB", mode, peak>>20, limit>>20)
		}
	}
}

// agentMemChild opens the result as `bridge result` does (stream) or as
// the library does by default (load), hashes the output, and prints its
// peak RSS.
func agentMemChild(spec string) {
	f := strings.Fields(spec)
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	h, err := trust.OpenHome(f[0])
	if err != nil {
		fail(err)
	}
	c, err := agent.OpenClient(h)
	if err != nil {
		fail(err)
	}
	c.StreamOutput = f[2] == "stream"
	out, err := c.Result(f[1])
	if err != nil {
		fail(err)
	}
	hs := sha256.New()
	if err := out.WriteOutput(hs, io.Discard); err != nil {
		fail(err)
	}
	fmt.Println("stdout-sha256", hex.EncodeToString(hs.Sum(nil)))
	fmt.Println("peak-rss", vmHWM(os.Getpid()))
	os.Exit(0)
}

// peakRSS is a live process's peak resident set, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	n := vmHWM(pid)
	if n == 0 {
		t.Fatalf("no VmHWM for process %d", pid)
	}
	return n
}

// vmHWM reads VmHWM from /proc (0 if it cannot).
func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// An answer whose publish fails is tried again with the same spooled
// output, redacted again: the spool outlives every attempt.
func TestSpooledOutputSurvivesAnswerRetry(t *testing.T) {
	t.Parallel()
	p := newPair(t, `
[ops.leak]
argv = ["sh", "-c", "echo before; echo token sk-abcdefghijklmnopqrstuvwxyz012345; echo after"]
env = ["PATH"]

[agents.cloud-1]
ops = ["leak"]
`)
	// A file where the private copies go: every publish fails until it
	// is gone.
	block := p.host.Path("results", p.agent.Config.ID)
	if err := os.MkdirAll(p.host.Path("results"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(block, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testkit.LockedBuffer
	p.log = slog.New(slog.NewTextHandler(&logs, nil))
	p.start(t, nil)
	s, err := p.client.Submit(agent.SubmitOptions{Op: "leak"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, "the op to run", func() bool {
		e := p.entry(t, s.ID)
		return e.Runs > 0
	})
	testkit.WaitFor(t, 30*time.Second, "three failed attempts to answer", func() bool {
		return strings.Count(logs.String(), `msg="answer: trying again"`) >= 3
	})
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	out := p.wait(t, s.ID)
	if got := string(out.Stdout); out.Receipt.Status != bridge.StatusDone || got != "before\ntoken [REDACTED]\nafter\n" {
		t.Fatalf("after the retries: %s %q (%s)", out.Receipt.Status, got, out.Receipt.Detail)
	}
}
