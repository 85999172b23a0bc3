package systest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/trust"
)

func TestMain(m *testing.M) {
	probe.New = func() *probe.Probe { return &probe.Probe{} }
	host.RunnerMain()
	if home := os.Getenv(testkit.ServeEnv); home != "" {
		os.Exit(testkit.Serve(home, func(h *trust.Home, o testkit.ServeOptions) (testkit.Daemon, error) {
			return host.NewDaemon(h, host.DaemonOptions{AllowRoot: true, Rescan: 200 * time.Millisecond, Grace: 200 * time.Millisecond,
				ApprovalTTL: o.ApprovalTTL, PendingTimeout: o.PendingTimeout, Skew: o.Skew, Logger: o.Logger})
		}))
	}
	os.Exit(m.Run())
}

// pair is a host home and an agent home on two folders a real sync client
// keeps in step (syncthingHomes, loopHomes), with the agent's client open.
type pair struct {
	folder, hostHome, agentHome string
	host, agent                 *trust.Home
	client                      *agent.Client
	logs                        *testkit.LockedBuffer // the log of an in-process daemon, for a failed wait
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
func runDaemon(t *testing.T, home *trust.Home, opt host.DaemonOptions) (stop func(context.Context)) {
	t.Helper()
	opt.AllowRoot = true // tests run as root
	d, err := host.NewDaemon(home, opt)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.Run(t, d)
}
