//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// baseline is the reference design the issue compares against: a worker
// that polls a directory once a second, takes one JSON request file, runs
// it, and writes a JSON result file. No signatures, no ledger, no fsync:
// its cost is the poll, by design.
type baseline struct {
	dir    string
	seq    atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

type baselineRequest struct {
	ID   string   `json:"id"`
	Argv []string `json:"argv"` // empty: a ping
}

type baselineResult struct {
	ID     string `json:"id"`
	Exit   int    `json:"exit"`
	Output string `json:"output"`
}

func startBaseline(dir string, poll time.Duration) (*baseline, error) {
	for _, d := range []string{"req", "res", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &baseline{dir: dir, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		tk := time.NewTicker(poll)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
				b.serveOne()
			}
		}
	}()
	return b, nil
}

func (b *baseline) stop() { b.cancel(); <-b.done }

// serveOne takes the oldest request (names sort by submission) and answers it.
func (b *baseline) serveOne() {
	entries, err := os.ReadDir(filepath.Join(b.dir, "req"))
	if err != nil || len(entries) == 0 {
		return
	}
	name := entries[0].Name()
	p := filepath.Join(b.dir, "req", name)
	data, err := os.ReadFile(p)
	if err != nil {
		return
	}
	os.Remove(p)
	var req baselineRequest
	res := baselineResult{}
	if err := json.Unmarshal(data, &req); err != nil {
		res.Exit = -1
	} else if len(req.Argv) > 0 {
		out, err := exec.Command(req.Argv[0], req.Argv[1:]...).CombinedOutput()
		res.Output = string(out)
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			res.Exit = ee.ExitCode()
		}
	} else {
		res.Output = "pong\n"
	}
	res.ID = req.ID
	out, _ := json.Marshal(res)
	b.writeAtomic(filepath.Join(b.dir, "res", name), out)
}

func (b *baseline) writeAtomic(dst string, data []byte) error {
	tmp := filepath.Join(b.dir, "tmp", filepath.Base(dst))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// roundTrip submits a request and polls for its result every 10 ms: the
// client side is made generous so the ratio measures the worker's poll.
func (b *baseline) roundTrip(argv []string) (time.Duration, error) {
	name := fmt.Sprintf("%020d-%s.json", time.Now().UnixNano(), strconv.FormatInt(b.seq.Add(1), 10))
	data, _ := json.Marshal(baselineRequest{ID: name, Argv: argv})
	start := time.Now()
	if err := b.writeAtomic(filepath.Join(b.dir, "req", name), data); err != nil {
		return 0, err
	}
	deadline := start.Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(filepath.Join(b.dir, "res", name))
		if err == nil {
			var res baselineResult
			if err := json.Unmarshal(data, &res); err != nil || res.ID != name || res.Exit != 0 {
				return 0, fmt.Errorf("baseline result %s: %s (%v)", name, data, err)
			}
			return time.Since(start), nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("baseline: no result for %s", name)
}

// latency runs n round trips one after the other, each after a random
// pause of up to one poll interval, so submissions do not lock onto the
// worker's ticker phase.
func (b *baseline) latency(argv []string, n int, poll time.Duration) ([]time.Duration, error) {
	var ds []time.Duration
	for range n {
		time.Sleep(time.Duration(rand.Int64N(int64(poll))))
		d, err := b.roundTrip(argv)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return slices.Clip(ds), nil
}
