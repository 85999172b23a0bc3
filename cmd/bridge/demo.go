package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
)

// DemoCmd runs the whole loop on temporary folders: a host and an agent
// sharing one folder (no sync client needed: both sides see the same
// directory), the daemon in this process.
type DemoCmd struct {
	Keep bool `help:"Keep the temporary directories and print where they are."`
}

const demoPolicy = `# The demo host's policy: what the agent "cloud-1" may run.
[ops.echo]
description = "print a message"
argv        = ["echo", "{msg}"]
env         = ["PATH"]
timeout     = "10s"
[ops.echo.args.msg]
type    = "string"
pattern = "[A-Za-z0-9 ,.!]{1,80}"

[ops.count]
description = "append a line to a file and say how many runs there were"
argv        = ["sh", "-c", "echo run >> \"$DEMO_COUNT\"; wc -l < \"$DEMO_COUNT\""]
env         = ["PATH", "DEMO_COUNT"]
idempotent  = false

[ops.deploy]
description = "an op this agent is NOT allowed to run"
argv        = ["echo", "deploying"]

[agents.cloud-1]
ops = ["echo", "count"]
`

func (c *DemoCmd) Run(g *Globals) error {
	base, err := os.MkdirTemp("", "bridge-demo-")
	if err != nil {
		return err
	}
	if c.Keep {
		defer g.note("kept %s", base)
	} else {
		defer os.RemoveAll(base)
	}
	out := g.stdout
	step := func(format string, args ...any) { fmt.Fprintf(out, "\n== "+format+"\n", args...) }
	say := func(format string, args ...any) { fmt.Fprintf(out, "   "+format+"\n", args...) }

	folder := filepath.Join(base, "synced-folder")
	countFile := filepath.Join(base, "count.txt")
	if err := os.Mkdir(folder, 0o755); err != nil {
		return err
	}
	step("set up: a host and an agent share %s", folder)
	hh, err := trust.InitHome(filepath.Join(base, "host-home"), "host", "laptop", folder)
	if err != nil {
		return err
	}
	ah, err := trust.InitHome(filepath.Join(base, "agent-home"), "agent", "cloud-1", folder)
	if err != nil {
		return err
	}
	if _, err := hh.Trust(ah.BundleText(), "cloud-1"); err != nil {
		return err
	}
	if _, err := ah.Trust(hh.BundleText(), "laptop"); err != nil {
		return err
	}
	say("host  laptop   fingerprint %s", hh.Bundle().Fingerprint())
	say("agent cloud-1  fingerprint %s", ah.Bundle().Fingerprint())
	say("each side trusts the other's bundle (`bridge keys export` / `bridge keys trust`)")
	if err := os.WriteFile(hh.Path(trust.PolicyName), []byte(demoPolicy), 0o600); err != nil {
		return err
	}
	say("policy: cloud-1 may run echo and count; deploy exists but is not allowed")

	var logBuf lockedBuffer // the daemon logs from its goroutines while we read
	d, err := host.NewDaemon(hh, host.DaemonOptions{AllowRoot: true,
		Rescan: 300 * time.Millisecond, Logger: bridge.NewLogger(&logBuf, "text", bridge.LogInfo),
		Env: func(k string) (string, bool) {
			if k == "DEMO_COUNT" {
				return countFile, true
			}
			return os.LookupEnv(k)
		},
	})
	if err != nil {
		return err
	}
	if err := d.Open(); err != nil {
		return err
	}
	defer runDaemon(d)()
	say("host daemon started (`bridge serve`)")

	cl, err := agent.OpenClient(ah)
	if err != nil {
		return err
	}
	defer cl.Close()
	run := func(o agent.SubmitOptions) (*agent.Outcome, error) {
		s, err := cl.Submit(o)
		if err != nil {
			return nil, err
		}
		wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer wcancel()
		res, err := cl.Wait(wctx, s.ID, nil)
		if err != nil {
			return nil, fmt.Errorf("demo: waiting for %s: %w", s.ID, err)
		}
		return res, nil
	}

	step("1. an allowed op runs")
	say("$ bridge run echo msg='hello from the agent'")
	res, err := run(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hello from the agent"}})
	if err != nil {
		return err
	}
	say("-> %s, exit %d, stdout: %q", res.Receipt.Status, res.Receipt.ExitCode, res.Stdout)
	say("   receipt: ran %v under policy %s…", res.Receipt.Argv, res.Receipt.PolicySHA256[:12])
	if res.Receipt.Status != bridge.StatusDone || string(res.Stdout) != "hello from the agent\n" {
		return errors.New("demo: the allowed op did not run as expected")
	}
	cl.Ack(res)

	step("2. an op the policy does not allow is rejected")
	say("$ bridge run deploy")
	res, err = run(agent.SubmitOptions{Op: "deploy"})
	if err != nil {
		return err
	}
	say("-> %s (%s): %s", res.Receipt.Status, res.Receipt.Reason, res.Receipt.Detail)
	if res.Receipt.Status != bridge.StatusRejected {
		return errors.New("demo: the denied op was not rejected")
	}
	cl.Ack(res)

	step("3. the same --key twice: answered from the ledger, run once")
	say("$ bridge run --key build-42 count   (twice)")
	first, err := run(agent.SubmitOptions{Op: "count", Key: "build-42"})
	if err != nil {
		return err
	}
	second, err := run(agent.SubmitOptions{Op: "count", Key: "build-42"})
	if err != nil {
		return err
	}
	runs := countLines(countFile)
	say("-> first  id %s… said %q", first.Receipt.ID[:12], strings.TrimSpace(string(first.Stdout)))
	say("-> second id %s… said %q (the same result)", second.Receipt.ID[:12], strings.TrimSpace(string(second.Stdout)))
	say("-> the op ran %d time(s)", runs)
	if first.Receipt.ID != second.Receipt.ID || runs != 1 {
		return errors.New("demo: the keyed repeat ran again")
	}

	step("4. a duplicate delivery is ignored")
	say("the sync client delivers the request again, plus a conflict copy of its manifest")
	manifest := filepath.Join(folder, bridge.RequestPath(hh.Config.ID, ah.Config.ID, first.Receipt.ID, bridge.ExtManifest))
	data, err := os.ReadFile(manifest)
	if err != nil {
		return err
	}
	conflict := strings.TrimSuffix(manifest, ".manifest") + ".sync-conflict-20260101-120000-ABCDEFG.manifest"
	if err := os.WriteFile(conflict, data, 0o644); err != nil {
		return err
	}
	// Re-deliver: remove and write the manifest back, as a resurrection does.
	os.Remove(manifest)
	if err := os.WriteFile(manifest, data, 0o644); err != nil {
		return err
	}
	time.Sleep(time.Second) // a few rescans
	entries, err := operator.LedgerEntries(hh)
	if err != nil {
		return err
	}
	state := "?"
	for _, e := range entries {
		if e.ID == first.Receipt.ID {
			state = fmt.Sprintf("%s, started %d time(s)", e.State, e.Runs)
		}
	}
	runs = countLines(countFile)
	say("-> ledger: %s; the op ran %d time(s)", state, runs)
	if runs != 1 {
		return errors.New("demo: a duplicate delivery ran again")
	}
	cl.Ack(second)

	step("done: all four behaviours shown")
	say("host log:")
	for _, line := range strings.Split(strings.TrimSpace(logBuf.String()), "\n") {
		say("  %s", trimLog(line))
	}
	return nil
}

// lockedBuffer is a bytes.Buffer safe for the daemon's concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func countLines(p string) int {
	f, err := os.Open(p)
	if err != nil {
		return 0
	}
	defer f.Close()
	data, _ := io.ReadAll(f)
	return bytes.Count(data, []byte("\n"))
}

// trimLog drops the timestamp of a slog text line for the demo's output.
func trimLog(line string) string {
	if i := strings.Index(line, "level="); i >= 0 {
		return line[i:]
	}
	return line
}

// runDaemon runs an opened daemon in the background, as `bridge serve` runs
// one in the foreground; stop ends it and closes it, giving its runs up to
// 10 s to end.
func runDaemon(d *host.Daemon) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return func() {
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		d.Close(cctx)
	}
}
