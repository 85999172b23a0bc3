package host

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/trust"
)

// pair is a host and an agent sharing one folder, with the host daemon
// running in this process.
type pair struct {
	folder, hostHome, agentHome string
	host, agent                 *trust.Home
	daemon                      *Daemon
	cancel                      context.CancelFunc
	done                        chan error
	client                      *agent.Client
	skew                        time.Duration         // for the daemons of start and startCrashProc; 0: the default
	log                         *slog.Logger          // for the daemon of start; nil: its debug log kept in logs
	logs                        *testkit.LockedBuffer // the log of start's daemon when log is nil, for a failed wait
	tune                        func(*limits)         // shrinks the bounds of start's daemon (limit); nil: the defaults
	rescan                      time.Duration         // the full walks' interval of start's daemon; 0: 500 ms
}

// limit has start's daemon run with f's change to its limits: each test
// sets its own daemon's, so tests of different bounds run side by side.
func (p *pair) limit(f func(*limits)) {
	prev := p.tune
	p.tune = func(l *limits) {
		if prev != nil {
			prev(l)
		}
		f(l)
	}
}

// noSettle lets the daemon remember a refused file at once, however fresh
// its change time (a test cannot make one old).
func noSettle(l *limits) { l.markSettle = 0 }

const testPolicy = `
[ops.echo]
argv = ["echo", "{msg}"]
env = ["PATH"]
timeout = "30s"
[ops.echo.args.msg]
type = "string"
pattern = "[a-zA-Z0-9 ]{0,64}"

[ops.count]
argv = ["sh", "-c", "echo run >> \"$COUNT_FILE\"; echo counted", "count"]
env = ["PATH", "COUNT_FILE"]

[ops.slow]
argv = ["sh", "-c", "echo started >> \"$COUNT_FILE\"; sleep 30"]
env = ["PATH", "COUNT_FILE"]
idempotent = false

[ops.slowidem]
argv = ["sh", "-c", "echo started >> \"$COUNT_FILE\"; sleep 30"]
env = ["PATH", "COUNT_FILE"]
idempotent = true

[ops.env]
argv = ["env"]
env = ["PATH"]

[ops.secret]
argv = ["true"]

[agents.cloud-1]
ops = ["echo", "count", "slow", "slowidem", "env"]
`

func newPair(t *testing.T, policyText string) *pair {
	t.Helper()
	p := newUnpaired(t, policyText, "cloud-1")
	if _, err := p.host.Trust(p.agent.BundleText(), "cloud-1"); err != nil {
		t.Fatal(err)
	}
	return p
}

// newUnpaired is a pair whose agent trusts the host while the host does
// not trust the agent yet: the quick start's state before `bridge pair`
// on the host.
func newUnpaired(t *testing.T, policyText, name string) *pair {
	t.Helper()
	base := t.TempDir()
	p := &pair{hostHome: filepath.Join(base, "host")}
	p.folder, p.host = testkit.InitHost(t, base, policyText)
	p.addAgent(t, filepath.Join(base, "agent"), name)
	return p
}

// addAgent makes a new agent home at dir for p's host, trusting it, as p's
// agent (the host does not trust it yet).
func (p *pair) addAgent(t *testing.T, dir, name string) {
	t.Helper()
	p.agentHome = dir
	p.agent, p.client = testkit.InitAgent(t, p.host, dir, name)
}

// serveOpened runs an opened daemon until the test ends, for a test that
// does something between Open and Run (runDaemon does both at once).
func serveOpened(t *testing.T, d *Daemon) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		d.Close(cctx)
	})
}

// runDaemon opens a daemon for home and runs it until the test ends (or
// stopDaemon). It is the in-process `bridge serve` of tests that need their
// own options.
func runDaemon(t *testing.T, home *trust.Home, opt DaemonOptions) *Daemon {
	t.Helper()
	return runDaemonTuned(t, home, opt, nil)
}

// runDaemonTuned is runDaemon with the daemon's limits changed by tune
// (if not nil) before it opens.
func runDaemonTuned(t *testing.T, home *trust.Home, opt DaemonOptions, tune func(*limits)) *Daemon {
	t.Helper()
	opt.AllowRoot = true // tests run as root
	d, err := NewDaemon(home, opt)
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(&d.limits)
	}
	stop := testkit.Run(t, d)
	stoppers.Store(d, stop)
	return d
}

// stoppers holds each runDaemon's stop function (testkit.Run's).
var stoppers sync.Map

// stopDaemon stops a daemon runDaemon started, as `bridge serve` does on a
// signal: Run returns, then Close drains until closeCtx is done.
func stopDaemon(d *Daemon, closeCtx context.Context) {
	if stop, ok := stoppers.Load(d); ok {
		stop.(func(context.Context) error)(closeCtx)
	}
}

// envWith is a daemon environment: the process's, with extra overrides.
func envWith(extra map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if v, ok := extra[k]; ok {
			return v, true
		}
		return os.LookupEnv(k)
	}
}

func (p *pair) start(t *testing.T, env map[string]string) {
	t.Helper()
	logger := p.log
	if logger == nil {
		if p.logs == nil {
			p.logs = &testkit.LockedBuffer{}
		}
		logger = slog.New(slog.NewTextHandler(p.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	rescan := p.rescan
	if rescan == 0 {
		rescan = 500 * time.Millisecond
	}
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true, Rescan: rescan, Grace: 200 * time.Millisecond,
		Skew: p.skew, Env: envWith(env), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if p.tune != nil {
		p.tune(&d.limits)
	}
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.daemon, p.cancel, p.done = d, cancel, make(chan error, 1)
	go func() { p.done <- d.Run(ctx) }()
	t.Cleanup(func() { p.stop(t) })
}

func (p *pair) stop(t *testing.T) {
	if p.cancel == nil {
		return
	}
	p.cancel()
	if err := <-p.done; err != nil {
		t.Errorf("daemon run: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.daemon.Close(ctx); err != nil {
		t.Errorf("daemon close: %v", err)
	}
	p.cancel = nil
}

func (p *pair) run(t *testing.T, o agent.SubmitOptions) *agent.Outcome {
	t.Helper()
	s, err := p.client.Submit(o)
	if err != nil {
		t.Fatal(err)
	}
	return p.wait(t, s.ID)
}

// waitFailed says what a wait that timed out can tell: the daemon's log (when
// start kept it), the request's files on both sides, and the goroutines of
// the process that mention the host or the runner, so a stall seen once in
// CI shows where it waited.
func (p *pair) waitFailed(id string) string {
	return testkit.WaitFailed(p.logs, id, p.toHost(), p.toAgent())
}
