package systest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/trust"
)

func TestMain(m *testing.M) {
	probe.New = func(home string) *probe.Probe {
		p := &probe.Probe{}
		probes.Store(home, p)
		return p
	}
	host.RunnerMain()
	if home := os.Getenv(testkit.ServeEnv); home != "" {
		os.Exit(testkit.Serve(home, func(h *trust.Home, o testkit.ServeOptions) (testkit.Daemon, error) {
			return host.NewDaemon(h, host.DaemonOptions{AllowRoot: true, Rescan: 200 * time.Millisecond, Grace: 200 * time.Millisecond,
				ApprovalTTL: o.ApprovalTTL, PendingTimeout: o.PendingTimeout, Skew: o.Skew, Logger: o.Logger})
		}))
	}
	testkit.ParallelByDefault(map[bool]int{false: 12, true: 8}[testkit.RaceOn])
	os.Exit(m.Run())
}

// probes holds the probe of the last daemon made for each host home (by
// its directory): what the simulator reads of its daemon's ledger.
var probes sync.Map

// probeOf is the probe of the daemon made last for home: a caller takes it
// right after NewDaemon (another daemon of the same home, GC's or
// Reconcile's, would replace it). It is forgotten when the test ends.
func probeOf(t testing.TB, home *trust.Home) *probe.Probe {
	p, ok := probes.Load(home.Dir)
	if !ok {
		t.Fatalf("no daemon was made for %s", home.Dir)
	}
	t.Cleanup(func() { probes.CompareAndDelete(home.Dir, p) })
	return p.(*probe.Probe)
}

// pair is a host home and an agent home on two folders a real sync client
// keeps in step (syncthingHomes, loopHomes), with the agent's client open.
type pair struct {
	folder, hostHome, agentHome string
	host, agent                 *trust.Home
	client                      *agent.Client
	logs                        *testkit.LockedBuffer       // the log of start's daemon, for a failed wait
	skew                        time.Duration               // for the daemons of start and startCrashProc; 0: the default
	halt                        func(context.Context) error // stops start's daemon (nil: none runs)
}

// newPair is a host and an agent on one local folder, trusting each other,
// the host with policyText.
func newPair(t *testing.T, policyText string) *pair {
	t.Helper()
	base := t.TempDir()
	p := &pair{hostHome: filepath.Join(base, "host"), agentHome: filepath.Join(base, "agent")}
	p.folder, p.host = testkit.InitHost(t, base, policyText)
	p.agent, p.client = testkit.InitAgent(t, p.host, p.agentHome, "cloud-1")
	if _, err := p.host.Trust(p.agent.BundleText(), "cloud-1"); err != nil {
		t.Fatal(err)
	}
	return p
}

// start runs p's host daemon in this process, its ops' environment this
// process's with env's overrides, until stop or the test's end.
func (p *pair) start(t *testing.T, env map[string]string) {
	t.Helper()
	if p.logs == nil {
		p.logs = &testkit.LockedBuffer{}
	}
	p.halt = runDaemon(t, p.host, host.DaemonOptions{Rescan: 500 * time.Millisecond, Grace: 200 * time.Millisecond, Skew: p.skew,
		Logger: slog.New(slog.NewTextHandler(p.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Env: func(k string) (string, bool) {
			if v, ok := env[k]; ok {
				return v, true
			}
			return os.LookupEnv(k)
		}})
}

// stop stops start's daemon, as a signal stops `bridge serve`, and fails
// the test if its Close does.
func (p *pair) stop(t *testing.T) {
	if p.halt == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.halt(ctx); err != nil {
		t.Errorf("daemon close: %v", err)
	}
	p.halt = nil
}

// wait waits up to 20 s for id's answer.
func (p *pair) wait(t *testing.T, id string) *agent.Outcome {
	t.Helper()
	return testkit.Wait(t, p.client, id, p.waitFailed)
}

// entry is id's ledger entry, read beside the daemon.
func (p *pair) entry(t *testing.T, id string) ledger.Entry {
	t.Helper()
	return testkit.Entry(t, p.host, id)
}

func (p *pair) toHost() string {
	return filepath.Join(p.folder, bridge.ToHostDir(p.host.Config.ID, p.agent.Config.ID))
}

func (p *pair) toAgent() string {
	return filepath.Join(p.folder, bridge.ToAgentDir(p.host.Config.ID, p.agent.Config.ID))
}

func (p *pair) sealManual(t *testing.T, op string, args map[string]string, tweak func(*bridge.NewRequest)) (id string, manifest, payload []byte) {
	t.Helper()
	return testkit.SealManual(t, p.client, p.agent, p.host.Config.ID, op, args, tweak)
}

// waitFailed is what a timed-out wait for id can tell (testkit.WaitFailed).
func (p *pair) waitFailed(id string) string {
	return testkit.WaitFailed(p.logs, id, p.toHost(), p.toAgent())
}

// startDaemonProcess runs the test binary as `bridge serve` for p's host.
func startDaemonProcess(t *testing.T, p *pair, env ...string) *testkit.Process {
	t.Helper()
	return testkit.Start(t, p.hostHome, env...)
}

// runDaemon runs a daemon for home in this process until the test ends or
// the returned stop is called.
func runDaemon(t *testing.T, home *trust.Home, opt host.DaemonOptions) (stop func(context.Context) error) {
	t.Helper()
	opt.AllowRoot = true // tests run as root
	d, err := host.NewDaemon(home, opt)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Run(t, d)
}
