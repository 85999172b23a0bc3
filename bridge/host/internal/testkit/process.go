package testkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/trust"
)

// ServeEnv makes the test binary act as `bridge serve` for the home it
// names (its TestMain calls Serve): crash tests run the daemon as a real
// process they can SIGKILL.
const ServeEnv = "BRIDGE_TEST_SERVE"

// Daemon is what Serve needs of a host daemon (host.Daemon).
type Daemon interface {
	Open() error
	Run(context.Context) error
	Close(context.Context) error
	Abort() int
}

// ServeOptions are what the environment of a daemon process asks of its
// daemon; the caller makes the daemon with them.
type ServeOptions struct {
	ApprovalTTL    time.Duration // BRIDGE_TEST_APPROVAL_TTL
	PendingTimeout time.Duration // BRIDGE_TEST_PENDING_TIMEOUT
	Skew           time.Duration // BRIDGE_TEST_SKEW
	Logger         *slog.Logger  // debug, on stderr
}

// Serve is `bridge serve` for the crash, model and sync-client tests, tuned
// by the environment: BRIDGE_TEST_DRAIN (how long the first signal drains,
// default 5s), ServeOptions' variables, BRIDGE_TEST_RESCANS (print the
// count of full rescans on stdout as it grows), BRIDGE_TEST_CRASH_AT (the
// crash-injection step, probe.Probe's CrashAt), BRIDGE_TEST_POWER_CUT (the
// crash loses the ledger's unsynced writes, its PowerCut), and
// BRIDGE_TEST_EVENTS (a file that gets one line per lifecycle event taken,
// for coverage). As the real serve, a second signal kills the running ops
// and exits 130. It returns the process's exit status.
func Serve(home string, newDaemon func(*trust.Home, ServeOptions) (Daemon, error)) int {
	h, err := trust.OpenHome(home)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var events *os.File
	if p := os.Getenv("BRIDGE_TEST_EVENTS"); p != "" {
		if events, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// Only this process's daemon reads the crash step from the
	// environment: a daemon the tests make in process never does.
	var pr *probe.Probe
	probe.New = func() *probe.Probe {
		pr = &probe.Probe{CrashAt: os.Getenv("BRIDGE_TEST_CRASH_AT"), PowerCut: os.Getenv("BRIDGE_TEST_POWER_CUT") != ""}
		if events != nil {
			pr.OnEvent = func(ev string) { events.Write([]byte(ev + "\n")) }
		}
		return pr
	}
	d, err := newDaemon(h, ServeOptions{
		ApprovalTTL: envDuration("BRIDGE_TEST_APPROVAL_TTL", 0), PendingTimeout: envDuration("BRIDGE_TEST_PENDING_TIMEOUT", 0),
		Skew: envDuration("BRIDGE_TEST_SKEW", 0), Logger: bridge.NewLogger(os.Stderr, "text", bridge.LogDebug)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
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
		// time (Process.WaitRescans).
		go func() {
			last := int64(-1)
			for {
				if n := pr.N(probe.Rescans); n != last {
					fmt.Printf("rescans %d\n", n)
					last = n
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	d.Run(ctx)
	cctx, stop := context.WithTimeout(context.Background(), envDuration("BRIDGE_TEST_DRAIN", 5*time.Second))
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

// A Process is the test binary run as `bridge serve` (ServeEnv).
type Process struct {
	Cmd     *exec.Cmd
	Log     *os.File      // its stderr: the daemon's debug log
	Done    chan struct{} // closed once the process exited (and was reaped)
	rescans atomic.Int64  // full rescans the process dispatched so far
}

// Start starts a daemon process for the host home hostHome, with env added
// to this process's environment, and waits until it is ready; it is
// killed when the test ends.
func Start(t testing.TB, hostHome string, env ...string) *Process {
	t.Helper()
	d, err := Launch(t, hostHome, false, env...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Launch is Start that says why the process did not get ready; with
// crashOK, a process that exited at an injected crash before it was ready
// (the start-up scan can reach the step first) is returned as started.
func Launch(t testing.TB, hostHome string, crashOK bool, env ...string) (*Process, error) {
	logf, err := os.OpenFile(filepath.Join(t.TempDir(), "serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), ServeEnv+"="+hostHome, "BRIDGE_TEST_RESCANS=1"), env...)
	cmd.Stderr = logf
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan bool, 1)
	d := &Process{Cmd: cmd, Log: logf, Done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
			if n, ok := strings.CutPrefix(sc.Text(), "rescans "); ok {
				if v, err := strconv.ParseInt(n, 10, 64); err == nil {
					d.rescans.Store(v)
				}
			}
		}
		ready <- false
	}()
	go func() { cmd.Wait(); close(d.Done) }()
	select {
	case ok := <-ready:
		if !ok {
			<-d.Done
			if crashOK && cmd.ProcessState.ExitCode() == probe.CrashExit {
				return d, nil
			}
			b, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("daemon process did not start (%v):\n%s%s", cmd.ProcessState, b, lockHolders(filepath.Join(hostHome, "serve.lock")))
		}
	case <-time.After(15 * time.Second):
		d.Kill()
		return nil, errors.New("daemon process did not get ready")
	}
	t.Cleanup(func() { d.Kill() })
	return d, nil
}

// lockHolders names the processes that have file open, for a lock that
// was not free.
func lockHolders(file string) string {
	var out strings.Builder
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && l == file {
			pid := strings.Split(fd, "/")[2]
			cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			stat, _ := os.ReadFile("/proc/" + pid + "/stat")
			fmt.Fprintf(&out, "%s holds it: %q (%s)\n", pid, strings.ReplaceAll(string(cmd), "\x00", " "), strings.TrimSpace(string(stat)))
		}
	}
	return out.String()
}

// WaitRescans waits until the process has dispatched n more full rescans
// (every 200 ms): a test of what it did not do waits for counted events.
func (d *Process) WaitRescans(t testing.TB, n int) {
	t.Helper()
	want := d.rescans.Load() + int64(n)
	WaitFor(t, time.Minute, fmt.Sprintf("%d more rescans of the daemon process", n), func() bool { return d.rescans.Load() >= want })
}

// Exited reports whether the process ended.
func (d *Process) Exited() bool {
	select {
	case <-d.Done:
		return true
	default:
		return false
	}
}

// Kill kills the process, as a power cut would stop it, and reaps it.
func (d *Process) Kill() {
	if !d.Exited() {
		d.Cmd.Process.Signal(syscall.SIGKILL)
	}
	<-d.Done
}

// Stop stops the process with one signal (a drained stop) or two (the
// second kills the running ops and exits at once).
func (d *Process) Stop(t testing.TB, signals int) {
	if d.Exited() {
		return
	}
	d.Cmd.Process.Signal(syscall.SIGTERM)
	if signals > 1 {
		time.Sleep(100 * time.Millisecond)
		d.Cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-d.Done:
	case <-time.After(20 * time.Second):
		d.Kill()
		t.Errorf("the daemon did not stop within 20s of %d signal(s)", signals)
	}
}
