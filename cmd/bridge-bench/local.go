//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/trust"
)

// benchPolicy allows the exec'd no-op and echo (users.go). Their concurrency is raised from the
// default of one so the throughput run measures the pipeline, not a queue
// of one.
const benchPolicy = `
[ops.noop]
description = "exec true"
argv        = ["true"]
concurrency = 16

[ops.echo]
description = "echo ok"
argv        = ["echo", "ok"]
concurrency = 16

[agents.bench]
ops = ["noop", "echo"]
`

const noopOp = "noop"

// local is a host and an agent sharing one directory, as in bridge demo.
type local struct {
	base, folder string
	host, agent  *trust.Home
	client       *agent.Client
	daemon       *host.Daemon
	cancel       context.CancelFunc
	done         chan error
}

func setupLocal(base string) (*local, error) {
	l := &local{base: base, folder: filepath.Join(base, "folder")}
	if err := os.MkdirAll(l.folder, 0o755); err != nil {
		return nil, err
	}
	var err error
	if _, serr := os.Stat(filepath.Join(base, "host")); serr == nil {
		// A -dir of an earlier run: its homes and what its folder holds
		// are used again (a scale fill takes minutes).
		if l.host, err = trust.OpenHome(filepath.Join(base, "host")); err != nil {
			return nil, err
		}
		if l.agent, err = trust.OpenHome(filepath.Join(base, "agent")); err != nil {
			return nil, err
		}
		if l.client, err = agent.OpenClient(l.agent); err != nil {
			return nil, err
		}
		return l, nil
	}
	if l.host, err = trust.InitHome(filepath.Join(base, "host"), "host", "bench-host", l.folder); err != nil {
		return nil, err
	}
	if l.agent, err = trust.InitHome(filepath.Join(base, "agent"), "agent", "bench", l.folder); err != nil {
		return nil, err
	}
	if _, err := l.host.Trust(l.agent.BundleText(), "bench"); err != nil {
		return nil, err
	}
	if _, err := l.agent.Trust(l.host.BundleText(), "bench-host"); err != nil {
		return nil, err
	}
	if err := os.WriteFile(l.host.Path(trust.PolicyName), []byte(benchPolicy), 0o600); err != nil {
		return nil, err
	}
	if l.client, err = agent.OpenClient(l.agent); err != nil {
		return nil, err
	}
	return l, nil
}

// start runs the daemon in this process, as `bridge serve` would with the
// default rescan interval.
func (l *local) start() error {
	d, err := host.NewDaemon(l.host, host.DaemonOptions{AllowRoot: true})
	if err != nil {
		return err
	}
	if err := d.Open(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.daemon, l.cancel, l.done = d, cancel, make(chan error, 1)
	go func() { l.done <- d.Run(ctx) }()
	return nil
}

func (l *local) stop() error {
	if l.cancel == nil {
		return nil
	}
	l.cancel()
	err := <-l.done
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l.cancel = nil
	if cerr := l.daemon.Close(ctx); cerr != nil {
		return cerr
	}
	return err
}

func (l *local) close() {
	l.stop()
	l.client.Close()
}

// roundTrip submits op and waits until the agent holds the verified
// result: what `bridge run` does, minus printing.
func roundTrip(c *agent.Client, op string) (time.Duration, error) {
	start := time.Now()
	s, err := c.Submit(agent.SubmitOptions{Op: op, TTL: time.Hour})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := c.Wait(ctx, s.ID, nil)
	if err != nil {
		return 0, fmt.Errorf("wait %s: %w", s.ID, err)
	}
	d := time.Since(start)
	if out.Receipt.Status != bridge.StatusDone {
		return 0, fmt.Errorf("%s: %s (%s) %s", op, out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail)
	}
	return d, nil
}

// latency runs n round trips one after the other.
func latency(c *agent.Client, op string, n int) ([]time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for range n {
		d, err := roundTrip(c, op)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// tput is a throughput run's outcome.
type tput struct {
	n       int
	wall    time.Duration
	cpu     time.Duration // user+system, this process and its reaped children
	perSec  float64
	cpuPerR time.Duration
}

// throughput runs n round trips with inflight of them in flight at once.
func throughput(n, inflight int, one func() error) (tput, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, inflight)
	cpu0 := cpuTime()
	start := time.Now()
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := one(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	cpu := cpuTime() - cpu0
	select {
	case err := <-errs:
		return tput{}, err
	default:
	}
	return tput{n: n, wall: wall, cpu: cpu, perSec: float64(n) / wall.Seconds(), cpuPerR: cpu / time.Duration(n)}, nil
}

// cpuTime is the user and system time of this process and of its children
// that were waited for (the ops the daemon ran).
func cpuTime() time.Duration {
	var total time.Duration
	for _, who := range []int{syscall.RUSAGE_SELF, syscall.RUSAGE_CHILDREN} {
		var ru syscall.Rusage
		if syscall.Getrusage(who, &ru) == nil {
			total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	return total
}

// pct returns the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// earlier counts the requests an earlier run of the same -dir left in the
// folder (each has one manifest in the agent's request directory).
func (l *local) earlier() int {
	dir := filepath.Join(l.folder, filepath.FromSlash(bridge.ToHostDir(l.host.Config.ID, l.agent.Config.ID)))
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), "."+bridge.ExtManifest) {
			n++
		}
	}
	return n
}
