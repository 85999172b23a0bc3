package testkit

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/trust"
)

// Run opens d and runs it in this process until the test ends or stop is
// called, as `bridge serve` does on a signal: Run returns, then Close
// drains until closeCtx is done; stop returns Close's error (a drain cut
// short by closeCtx is one), and a second call nil. The test's end stops it
// within 10 s: a test that failed while an op blocks must not hang.
func Run(t testing.TB, d Daemon) (stop func(closeCtx context.Context) error) {
	t.Helper()
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func(closeCtx context.Context) (err error) {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon run: %v", err)
			}
			err = d.Close(closeCtx)
		})
		return err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stop(ctx)
	})
	return stop
}

// SealManual seals a request of client's agent home for hostID outside
// Submit, with tweak's changes to it, and has the client remember it: the
// test publishes its files itself (late, torn, twice, through a sync
// client). It returns the request's id and its files.
func SealManual(t testing.TB, client *agent.Client, home *trust.Home, hostID, op string, args map[string]string, tweak func(*bridge.NewRequest)) (id string, manifest, payload []byte) {
	t.Helper()
	return SealEdited(t, client, home, hostID, op, args, tweak, nil)
}

// SealEdited is SealManual with edit's changes to the sealed files (a
// flipped byte: a bad signature, a payload its manifest does not pin),
// made before the client remembers the manifest, as an agent that sent
// those very files would have.
func SealEdited(t testing.TB, client *agent.Client, home *trust.Home, hostID, op string, args map[string]string, tweak func(*bridge.NewRequest), edit func(manifest, payload []byte) ([]byte, []byte)) (id string, manifest, payload []byte) {
	t.Helper()
	_, hb, err := home.Peer(hostID)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	n := bridge.NewRequest{ID: bridge.NewRequestID(), Agent: home.Identity(), AgentID: home.Config.ID, Host: hb,
		Call: bridge.Call{Op: op, Args: args}, Created: now, Expires: now.Add(time.Hour)}
	if tweak != nil {
		tweak(&n)
	}
	var buf bytes.Buffer
	m, r, err := bridge.SealRequest(&buf, n)
	if err != nil {
		t.Fatal(err)
	}
	pl := buf.Bytes()
	if edit != nil {
		m, pl = edit(bytes.Clone(m), bytes.Clone(pl))
	}
	if err := client.Remember(&agent.Sent{V: 1, ID: r.ID, Host: hb.ID, HostName: "laptop", Op: op, Args: args,
		ManifestSHA256: bridge.SHA256Hex(m), Created: r.Created, Expires: r.Expires}, m); err != nil {
		t.Fatal(err)
	}
	return r.ID, m, pl
}

// Wait waits up to 20 s for the answer to id; a wait that fails says
// what failed(id) can tell of it.
func Wait(t testing.TB, client *agent.Client, id string, failed func(id string) string) *agent.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := client.Wait(ctx, id, nil)
	if err != nil {
		t.Fatalf("wait %s: %v\n%s", id, err, failed(id))
	}
	return out
}

// WaitFailed says what a wait for id that timed out can tell: the daemon's
// log (if logs kept it), the request's files in dirs (the folder's
// directories both ways), and the goroutines of this process that mention
// the host or the runner, so a stall seen once in CI shows where it waited.
func WaitFailed(logs *LockedBuffer, id string, dirs ...string) string {
	var b strings.Builder
	if logs != nil {
		fmt.Fprintf(&b, "the daemon's log:\n%s\n", logs.String())
	}
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		fmt.Fprintf(&b, "%s:", dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), id) {
				info, _ := e.Info()
				size := int64(-1)
				if info != nil {
					size = info.Size()
				}
				fmt.Fprintf(&b, " %s (%d bytes)", e.Name(), size)
			}
		}
		b.WriteString("\n")
	}
	stacks := make([]byte, 8<<20)
	stacks = stacks[:runtime.Stack(stacks, true)]
	b.WriteString("goroutines of the host and the runner:\n")
	for _, g := range bytes.Split(stacks, []byte("\n\n")) {
		if bytes.Contains(g, []byte("bridge/host.")) || bytes.Contains(g, []byte("bridge/runner.")) {
			b.Write(g)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// InitHost makes a host home "laptop" at base/host on a new folder
// base/folder, with policyText as its policy.
func InitHost(t testing.TB, base, policyText string) (folder string, host *trust.Home) {
	t.Helper()
	folder = filepath.Join(base, "folder")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	host, err := trust.InitHome(filepath.Join(base, "host"), "host", "laptop", folder)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host.Path(trust.PolicyName), []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	return folder, host
}

// InitAgent makes an agent home called name at dir on host's folder,
// trusting host (which does not trust it yet), and opens its client until
// the test ends.
func InitAgent(t testing.TB, host *trust.Home, dir, name string) (*trust.Home, *agent.Client) {
	t.Helper()
	a, err := trust.InitHome(dir, "agent", name, host.Config.Folder)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Trust(host.BundleText(), "laptop"); err != nil {
		t.Fatal(err)
	}
	c, err := agent.OpenClient(a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return a, c
}
