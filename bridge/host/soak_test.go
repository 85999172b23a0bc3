package host

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// soakTime is how long TestHostileWriterSoak runs: 6 s, times N with
// BRIDGE_SOAK=N (TESTING.md).
func soakTime(t *testing.T) time.Duration {
	d := 6 * time.Second
	if s := os.Getenv("BRIDGE_SOAK"); s != "" {
		k, err := strconv.Atoi(s)
		if err != nil || k < 1 {
			t.Fatalf("BRIDGE_SOAK=%q: want a positive integer", s)
		}
		d *= time.Duration(k)
	}
	return d
}

func dirSize(root string) int64 {
	var n int64
	filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestHostileWriterSoak: a folder writer without keys keeps replacing the
// daemon's directories, planting links and junk, squatting result names and
// flooding files and directories, while real requests flow. Every request is
// answered, none runs twice, the host's home grows by a bounded amount and
// the daemon's kernel watches stay bounded.
//
// Not in parallel: it counts the inotify watches of the whole process.
func TestHostileWriterSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	e := newEdge(t)
	e.daemon(t)
	root := filepath.Join(e.folder, bridge.ToHostRoot(e.host.Config.ID))
	hostDir := filepath.Dir(root)
	watches0 := inotifyWatches(t)
	home0 := dirSize(e.hostHome)
	// Where the writer's links point: a directory of the test's own, so
	// that what goes through them stays in it, and the daemon's writes
	// through them, if any, are seen (below).
	elsewhere := t.TempDir()

	var (
		mu      sync.Mutex
		ids     []string
		swap    sync.RWMutex // the writer's directory swaps, against the agent's submits
		ctx, cn = context.WithTimeout(context.Background(), soakTime(t))
	)
	defer cn()
	hostile := func(rng *rand.Rand) {
		n := strconv.Itoa(rng.IntN(1 << 30))
		switch rng.IntN(7) {
		case 0: // junk manifests
			for range 20 {
				os.WriteFile(filepath.Join(e.toHost(), bridge.NewRequestID()+"."+bridge.ExtManifest), []byte("junk "+n), 0o644)
			}
		case 1: // junk directories, deep and at the top
			os.MkdirAll(filepath.Join(e.toHost(), "junk"+n, "a", "b"), 0o755)
			os.MkdirAll(filepath.Join(root, bridge.NewRequestID(), "x"), 0o755)
		case 2: // squat the result names of a recent request
			mu.Lock()
			var id string
			if len(ids) > 0 {
				id = ids[rng.IntN(len(ids))]
			}
			mu.Unlock()
			if id != "" {
				for _, name := range []string{id + ".result", id + ".output", "~$" + id + ".output.tmp", "~$" + id + ".result.tmp"} {
					if _, err := os.Lstat(filepath.Join(e.toAgent(), name)); err != nil {
						os.MkdirAll(filepath.Join(e.toAgent(), name, "deep"), 0o755)
					}
				}
			}
		case 3: // links where the host keeps its directories, and at request names
			os.Symlink("/usr", filepath.Join(e.toHost(), bridge.NewRequestID()+"."+bridge.ExtManifest))
			os.Symlink("/usr", filepath.Join(root, "link"+n))
		case 4: // to-host moved away and copied back, as a sync client applies a rename
			swap.Lock()
			if os.Rename(root, root+".away") == nil {
				exec.Command("cp", "-a", root+".away", root).Run()
				os.RemoveAll(root + ".away")
			}
			swap.Unlock()
		case 5: // the agent's result directory replaced by a link
			if os.RemoveAll(e.toAgent()) == nil {
				os.Symlink(elsewhere, e.toAgent())
			}
		case 6: // hosts/<host> litter
			os.WriteFile(filepath.Join(hostDir, "litter"+n), []byte("x"), 0o644)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for ctx.Err() == nil {
			hostile(rng)
			time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		}
	}()

	// Real requests, a few at a time, until the soak ends.
	errs := make(chan error, 1000)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				swap.RLock()
				s, err := e.client.Submit(agent.SubmitOptions{Op: "block", TTL: time.Hour})
				swap.RUnlock()
				if err != nil {
					continue // the writer had a directory away: nothing was sent
				}
				mu.Lock()
				ids = append(ids, s.ID)
				mu.Unlock()
				wctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				out, err := e.client.Wait(wctx, s.ID, nil)
				cancel()
				switch {
				case err != nil:
					errs <- fmt.Errorf("worker %d: %s never answered: %w", w, s.ID, err)
				case out.Receipt.Status != bridge.StatusDone:
					errs <- fmt.Errorf("worker %d: %s answered %s (%s)", w, s.ID, out.Receipt.Status, out.Receipt.Reason)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, id := range ids {
		if n := e.starts(t, "block", id); n > 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	t.Logf("%d requests answered under a hostile writer", len(ids))
	if len(ids) < 5 {
		t.Errorf("only %d requests went through", len(ids))
	}
	grown, watches := dirSize(e.hostHome)-home0, inotifyWatches(t)-watches0
	t.Logf("the host's home grew by %d KiB; %d more kernel watches", grown>>10, watches)
	// Each request leaves a ledger record, audit lines and a result copy
	// (a few KiB); the junk must add no more than the line budget allows.
	if limit := int64(len(ids))*16<<10 + 2<<20; grown > limit {
		t.Errorf("the host's home grew by %d bytes, more than %d", grown, limit)
	}
	if watches > 4 {
		t.Errorf("%d more kernel watches", watches)
	}
	// The writer made only directories through its links (the squats of
	// case 2); a file there is the daemon's, written through a link.
	filepath.WalkDir(elsewhere, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("the daemon wrote %s through the writer's link", p)
		}
		return nil
	})
}
