package testkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
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
	probe.New = func(string) *probe.Probe {
		cut := os.Getenv("BRIDGE_TEST_POWER_CUT")
		pr = &probe.Probe{CrashAt: os.Getenv("BRIDGE_TEST_CRASH_AT"), PowerCut: cut != "", CutZeros: cut == "zeros"}
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
	ready   chan struct{} // closed once it said it serves
	read    chan struct{} // closed once its stdout was read to the end
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
	d, err := spawn(t, hostHome, env...)
	if err != nil {
		return nil, err
	}
	select {
	case <-d.ready:
	case <-d.Done:
		if d.readyAfterExit() { // it served, then exited
			return d, nil
		}
		if crashOK && d.Cmd.ProcessState.ExitCode() == probe.CrashExit {
			return d, nil
		}
		return nil, fmt.Errorf("daemon process did not start (%v):\n%s%s", d.Cmd.ProcessState, d.LogText(), lockHolders(filepath.Join(hostHome, "serve.lock")))
	case <-time.After(15 * time.Second):
		d.Kill()
		return nil, errors.New("daemon process did not get ready")
	}
	return d, nil
}

// readyAfterExit reports, for a process that exited, whether it said it
// serves: what it wrote before it exited is read to the end first (up to
// a second: a child of its ops that kept the pipe open must not stall it).
func (d *Process) readyAfterExit() bool {
	select {
	case <-d.read:
	case <-time.After(time.Second):
	}
	select {
	case <-d.ready:
		return true
	default:
		return false
	}
}

// StartCrashing starts a daemon process that is to exit at the crash step
// at (BRIDGE_TEST_CRASH_AT), without waiting for it to be ready: the crash
// may come first (WaitReady, WaitCrash).
func StartCrashing(t testing.TB, hostHome, at string, env ...string) *Process {
	t.Helper()
	d, err := spawn(t, hostHome, append([]string{"BRIDGE_TEST_CRASH_AT=" + at}, env...)...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// spawn starts the process; it is killed, and its log closed, when the
// test ends. Its stdout is a pipe of this process's own (not StdoutPipe,
// which Wait closes as the process exits, losing a last line not yet read).
func spawn(t testing.TB, hostHome string, env ...string) (*Process, error) {
	logf, err := os.OpenFile(filepath.Join(t.TempDir(), "serve.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), ServeEnv+"="+hostHome, "BRIDGE_TEST_RESCANS=1"), env...)
	cmd.Stdout, cmd.Stderr = w, logf
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		logf.Close()
		return nil, err
	}
	d := &Process{Cmd: cmd, Log: logf, Done: make(chan struct{}), ready: make(chan struct{}), read: make(chan struct{})}
	go func() {
		defer close(d.read)
		defer r.Close()
		var once sync.Once
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if sc.Text() == "ready" {
				once.Do(func() { close(d.ready) })
			}
			if n, ok := strings.CutPrefix(sc.Text(), "rescans "); ok {
				if v, err := strconv.ParseInt(n, 10, 64); err == nil {
					d.rescans.Store(v)
				}
			}
		}
		io.Copy(io.Discard, r) // a line too long for the scanner: the pipe is drained still
	}()
	go func() { cmd.Wait(); close(d.Done) }()
	t.Cleanup(func() { d.Kill(); logf.Close() })
	return d, nil
}

// WaitReady waits until the daemon holds its lock and serves.
func (d *Process) WaitReady(t testing.TB) {
	t.Helper()
	select {
	case <-d.ready:
	case <-d.Done:
		if !d.readyAfterExit() {
			t.Fatalf("the daemon exited before it was ready (%v):\n%s", d.Cmd.ProcessState, d.LogText())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon did not get ready:\n%s", d.LogText())
	}
}

// WaitCrash waits for the injected crash at step at: exit status
// probe.CrashExit, and no data race reported on the way.
func (d *Process) WaitCrash(t testing.TB, at string) {
	t.Helper()
	select {
	case <-d.Done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the daemon did not crash at %q within 20s (step not reached?):\n%s", at, d.LogText())
	}
	if code := d.Cmd.ProcessState.ExitCode(); code != probe.CrashExit {
		t.Fatalf("the daemon exited with %d, want %d (crash at %q):\n%s", code, probe.CrashExit, at, d.LogText())
	}
	// os.Exit skips the race detector's exit report; its warnings are in
	// the log as they happen.
	if log := d.LogText(); strings.Contains(log, "DATA RACE") {
		t.Fatalf("the daemon process reported a data race:\n%s", log)
	}
}

// LogText is the daemon's log so far.
func (d *Process) LogText() string {
	b, _ := os.ReadFile(d.Log.Name())
	return string(b)
}

// WaitLockFree waits until a crashed daemon's lock on home is released: the
// kernel releases it when the last descriptor of the dead process's lock
// file closes, which on a loaded machine can lag its exit status.
func WaitLockFree(t testing.TB, home *trust.Home) {
	t.Helper()
	WaitFor(t, 10*time.Second, "the crashed daemon's lock to be released", func() bool {
		l, err := syncsafe.Lock(home.Path("serve.lock"))
		if err == nil {
			l.Unlock()
		}
		return err == nil
	})
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
