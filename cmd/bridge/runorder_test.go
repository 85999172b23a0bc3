package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/trust"
)

// ackSpy is the stdout of a `bridge run`: at its first write it notes
// whether the run had acked the result already.
type ackSpy struct {
	mu       sync.Mutex
	dir      string
	out      strings.Builder
	written  bool
	ackFirst bool
}

func (a *ackSpy) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.written {
		a.written = true
		acks, _ := filepath.Glob(filepath.Join(a.dir, "*."+bridge.ExtAck))
		a.ackFirst = len(acks) > 0
	}
	return a.out.Write(p)
}

// `bridge run` prints the verified output before it acks: the ack (the
// home's copies of the result, then <id>.ack) is off the path the user
// waits on, and it still happens before the command exits.
func TestRunPrintsBeforeAck(t *testing.T) {
	folder, h, a := pairedHomes(t)
	if _, err := h.Trust(a.BundleText(), "cloud-1"); err != nil {
		t.Fatal(err)
	}
	policy := "[ops.echo]\nargv = [\"echo\", \"{msg}\"]\nenv = [\"PATH\"]\n[ops.echo.args.msg]\ntype = \"string\"\n\n[agents.cloud-1]\nops = [\"echo\"]\n"
	if err := os.WriteFile(filepath.Join(h.Dir, "policy.toml"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	defer serveInProcess(t, h)()

	spy := &ackSpy{dir: filepath.Join(folder, filepath.FromSlash(bridge.ToHostDir(h.Config.ID, a.Config.ID)))}
	if code := realMain([]string{"--home", a.Dir, "run", "--timeout", "30s", "echo", "msg=hi"}, strings.NewReader(""), spy, io.Discard); code != 0 {
		t.Fatalf("run exited %d: %q", code, spy.out.String())
	}
	if spy.out.String() != "hi\n" {
		t.Fatalf("run printed %q", spy.out.String())
	}
	if spy.ackFirst {
		t.Fatal("run acked the result before it printed the output")
	}
	if acks, _ := filepath.Glob(filepath.Join(spy.dir, "*."+bridge.ExtAck)); len(acks) != 1 {
		t.Fatalf("after run: %d acks, want 1", len(acks))
	}
}

// pairedHomes makes a host home "laptop" and an agent home "cloud-1" on one
// folder, the agent trusting the host (the host's trust of the agent is
// the caller's to add).
func pairedHomes(t *testing.T) (folder string, h, a *trust.Home) {
	t.Helper()
	base := t.TempDir()
	folder = filepath.Join(base, "folder")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := trust.InitHome(filepath.Join(base, "host"), "host", "laptop", folder)
	if err != nil {
		t.Fatal(err)
	}
	a, err = trust.InitHome(filepath.Join(base, "agent"), "agent", "cloud-1", folder)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Trust(h.BundleText(), "laptop"); err != nil {
		t.Fatal(err)
	}
	return folder, h, a
}

// serveInProcess runs a daemon for home h in this process until stop.
func serveInProcess(t *testing.T, h *trust.Home) (stop func()) {
	t.Helper()
	d, err := host.NewDaemon(h, host.DaemonOptions{AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	return runDaemon(d)
}
