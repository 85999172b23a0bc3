package systest

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
)

// Unison and rclone bisync, run for real beside the real-Syncthing tests:
// two local directories kept in step by the client running in the
// background, the host's folder on side A and the agent's on side B. The
// client runs with the settings docs/OPERATIONS.md gives, read from the same
// files the doc points at (fixtures/clients; TestDocsClientSettings checks
// the doc shows them), so the doc and what was tested cannot drift.
//
// BRIDGE_UNISON / BRIDGE_RCLONE name the binaries (default: unison / rclone
// in PATH). Without one the test skips, unless BRIDGE_REQUIRE_UNISON=1 /
// BRIDGE_REQUIRE_RCLONE=1 (CI), then it fails.

// clientBinary finds a sync client's binary or ends the test: a loud skip
// locally, a failure when the require variable is 1.
func clientBinary(t *testing.T, def, binVar, requireVar string) string {
	t.Helper()
	name := os.Getenv(binVar)
	if name == "" {
		name = def
	}
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	msg := fmt.Sprintf("real-%s test NOT RUN: %q not found (%v); install it (apt-get install %s) or set %s", def, name, err, def, binVar)
	if os.Getenv(requireVar) == "1" {
		t.Fatal(msg + " (" + requireVar + "=1 makes this a failure)")
	}
	t.Skip("*** " + msg + " ***")
	return ""
}

// clientFixture is the path of a file in fixtures/clients.
func clientFixture(name string) string {
	return filepath.Join("..", "..", "..", "fixtures", "clients", name)
}

// loopClient is a sync client running in the background between A and B.
type loopClient struct {
	t       *testing.T
	name    string // the client name syncsafe.Classify gives its copies
	A, B    string // the host's folder, the agent's folder
	base    string // scratch: logs, the client's own state
	command func() *exec.Cmd
	cmd     *exec.Cmd
	done    chan struct{}
	runs    int
	p       *pair // the homes, once made
}

// start runs the client's command in a process group of its own.
func (c *loopClient) start() {
	c.t.Helper()
	c.runs++
	cmd := c.command()
	logf, err := os.OpenFile(filepath.Join(c.base, c.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	fmt.Fprintf(logf, "--- start %d: %s\n", c.runs, strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", c.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	c.cmd, c.done = cmd, done
}

// stop ends the client between two of its runs: SIGTERM to the client
// (Unison, or the loop's shell), then a wait for the rest of its process
// group, so a bisync run the loop started finishes first; SIGKILL to the
// group after 10 s. It is idempotent. (Runs cut off midway happen anyway:
// the daemon writes while the client runs.)
func (c *loopClient) stop() {
	if c.cmd == nil {
		return
	}
	pg := -c.cmd.Process.Pid
	c.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
	}
	for time.Now().Before(deadline) && syscall.Kill(pg, 0) == nil {
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(pg, syscall.SIGKILL)
	<-c.done
	c.cmd = nil
}

// logTail is the end of the client's log, for failure messages.
func (c *loopClient) logTail() string {
	b, _ := os.ReadFile(filepath.Join(c.base, c.name+".log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return fmt.Sprintf("\n--- %s log (tail) ---\n%s", c.name, b)
}

// folderFiles maps every file under dir, but the clients' temps, to its
// content.
func folderFiles(dir string) map[string]string {
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || syncsafe.Classify(d.Name()).Kind == syncsafe.KindTemp {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil {
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

// same reports whether A and B hold the same files, and the first
// difference.
func (c *loopClient) same() (bool, string) {
	a, b := folderFiles(c.A), folderFiles(c.B)
	for k, v := range a {
		if w, ok := b[k]; !ok {
			return false, k + " only on A"
		} else if v != w {
			return false, k + " differs"
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			return false, k + " only on B"
		}
	}
	return true, ""
}

// waitSame waits until A and B hold the same files.
func (c *loopClient) waitSame(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := c.same()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: the folders differ after %s: %s%s", c.name, timeout, why, c.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func newLoopClient(t *testing.T, name string, command func(c *loopClient) *exec.Cmd) *loopClient {
	base := t.TempDir()
	c := &loopClient{t: t, name: name, A: filepath.Join(base, "A"), B: filepath.Join(base, "B"), base: base}
	for _, d := range []string{c.A, c.B} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.command = func() *exec.Cmd { return command(c) }
	t.Cleanup(c.stop)
	return c
}

// startUnison runs Unison with fixtures/clients/unison.prf as its profile,
// the two folders as its roots.
func startUnison(t *testing.T) *loopClient {
	bin := clientBinary(t, "unison", "BRIDGE_UNISON", "BRIDGE_REQUIRE_UNISON")
	c := newLoopClient(t, "unison", func(c *loopClient) *exec.Cmd {
		// Unison's archive locks (lk* in its state directory) are left
		// behind by a run that stop ended with SIGKILL, after 10 s on a
		// loaded machine, and the next run then refuses to start ("the
		// archives are locked": CI42). stop waits for the process group to
		// be gone before a start, so no other Unison holds them.
		locks, _ := filepath.Glob(filepath.Join(c.base, "unison-state", "lk*"))
		for _, l := range locks {
			if err := os.Remove(l); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bin, "bridge", c.A, c.B)
		cmd.Env = append(os.Environ(), "HOME="+c.base, "UNISON="+filepath.Join(c.base, "unison-state"))
		return cmd
	})
	prf, err := os.ReadFile(clientFixture("unison.prf"))
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(c.base, "unison-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "bridge.prf"), prf, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(bin, "-version").CombinedOutput()
	t.Logf("%s", bytes.TrimSpace(out))
	c.start()
	return c
}

// startRclone runs fixtures/clients/rclone-loop.sh with the agent's folder
// as PATH1 (it wins when a --resync is needed: see OPERATIONS.md) and a copy
// of the filters file (bisync writes FILTERS.md5 beside it).
func startRclone(t *testing.T) *loopClient {
	bin := clientBinary(t, "rclone", "BRIDGE_RCLONE", "BRIDGE_REQUIRE_RCLONE")
	loop, err := filepath.Abs(clientFixture("rclone-loop.sh"))
	if err != nil {
		t.Fatal(err)
	}
	c := newLoopClient(t, "rclone", func(c *loopClient) *exec.Cmd {
		cmd := exec.Command("sh", loop, c.B, c.A, filepath.Join(c.base, "filters.txt"), "1")
		cmd.Env = append(os.Environ(), "HOME="+c.base, "XDG_CACHE_HOME="+filepath.Join(c.base, "cache"),
			"RCLONE_CONFIG="+filepath.Join(c.base, "rclone.conf"),
			"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		return cmd
	})
	filters, err := os.ReadFile(clientFixture("rclone-filters.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.base, "filters.txt"), filters, 0o600); err != nil {
		t.Fatal(err)
	}
	// An empty config is enough for local paths.
	if err := os.WriteFile(filepath.Join(c.base, "rclone.conf"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(bin, "version").CombinedOutput()
	t.Logf("%s", bytes.SplitN(out, []byte("\n"), 2)[0])
	c.start()
	return c
}

// rcloneWorkdir is where the loop keeps bisync's listings and lock.
func (c *loopClient) rcloneWorkdir() string {
	return filepath.Join(c.base, "cache", "rclone", "bisync")
}

// loopHomes pairs a host home on A with an agent home on B, through the
// sync: the agent is initialised once the host's marker reached B.
func loopHomes(t *testing.T, c *loopClient) *pair {
	t.Helper()
	base := t.TempDir()
	p := &pair{folder: c.A, hostHome: filepath.Join(base, "host"), agentHome: filepath.Join(base, "agent")}
	var err error
	if p.host, err = trust.InitHome(p.hostHome, "host", "laptop", c.A); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		// Whole, not just there: rclone 1.60 copies in place, and an
		// agent's init refuses a marker it is still writing.
		if b, err := os.ReadFile(filepath.Join(c.B, syncsafe.MarkerName)); err == nil && string(b) == syncsafe.MarkerContent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host's marker did not reach B in 60s%s", c.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.pairAcross(t, c.B, func() { c.waitSame(60 * time.Second) })
	return p
}
