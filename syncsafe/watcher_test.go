package syncsafe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func newWatcher(t *testing.T, root string, opt WatchOptions) *Watcher {
	t.Helper()
	w, err := NewWatcher(root, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func logStats(t *testing.T, w *Watcher) {
	t.Helper()
	s := &w.stats
	t.Logf("events received %d; reads with channel > half full %d; pending-set overflows %d; "+
		"full walks %d (timer %d, suspected loss %d); subdir walks %d; event batches %d with %d paths",
		s.events.Load(), s.nearFull.Load(), s.setOverflow.Load(), s.fullWalks.Load(), s.timerWalks.Load(),
		s.lossWalks.Load(), s.subdirWalks.Load(), s.eventBatches.Load(), s.eventPathsOut.Load())
}

// TestWatcherBurstNoLoss creates 20,000 files in bursts, half of them in
// brand-new nested directories made mid-burst, with a 4-slot channel so
// notify really drops events and a consumer that sleeps between batches.
// Every name must be reported at least once.
func TestWatcherBurstNoLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("burst test skipped in -short mode")
	}
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "flat"), 0o755))
	w := newWatcher(t, root, WatchOptions{Rescan: 500 * time.Millisecond, Debounce: 20 * time.Millisecond, Buffer: 4})

	const bursts, perBurst = 20, 1000
	want := make(map[string]bool, bursts*perBurst)
	var (
		mu         sync.Mutex
		seen       = make(map[string]bool, bursts*perBurst)
		byEvent    = make(map[string]bool, bursts*perBurst)
		fullN, evN int
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumerDone := make(chan error, 1)
	go func() {
		for {
			b, err := w.Next(ctx)
			if err != nil {
				consumerDone <- err
				return
			}
			mu.Lock()
			if b.Full {
				fullN++
			} else {
				evN++
			}
			for _, p := range b.Paths {
				seen[p] = true
				if !b.Full {
					byEvent[p] = true
				}
			}
			mu.Unlock()
			time.Sleep(30 * time.Millisecond) // a slow consumer
		}
	}()

	for i := range bursts {
		dir := "flat"
		for j := range perBurst {
			if j == perBurst/2 && i%2 == 0 {
				// A brand-new nested directory, filled at once.
				dir = fmt.Sprintf("n%02d/b/c", i)
				must(t, os.MkdirAll(filepath.Join(root, dir), 0o755))
			}
			rel := fmt.Sprintf("%s/f%02d-%04d.dat", dir, i, j)
			want[rel] = true
			must(t, os.WriteFile(filepath.Join(root, rel), []byte(rel), 0o644))
		}
	}

	deadline := time.Now().Add(45 * time.Second)
	for {
		mu.Lock()
		missing := 0
		for p := range want {
			if !seen[p] {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			logStats(t, w)
			t.Fatalf("%d of %d names never reported", missing, len(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-consumerDone; !errors.Is(err, context.Canceled) {
		t.Errorf("Next after cancel: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	missedByEvents := 0
	for p := range want {
		if !byEvent[p] {
			missedByEvents++
		}
	}
	logStats(t, w)
	t.Logf("all %d names reported: %d full batches, %d event batches; %d names never came from an event batch (dropped events or coalesced into full walks)",
		len(want), fullN, evN, missedByEvents)
	if w.stats.nearFull.Load() == 0 || w.stats.fullWalks.Load() < 2 {
		t.Error("the loss path did not run: no near-full channel read, or no full walk after the first")
	}
}

// TestWatcherLossTriggersFullWalk makes drops certain: the drain goroutine is
// held back until the 4-slot channel is full, so notify discards the rest of
// 200 events. With the rescan timer an hour away, only the near-full check
// can bring the other files back, as one Full batch.
func TestWatcherLossTriggersFullWalk(t *testing.T) {
	root := t.TempDir()
	gate := make(chan struct{})
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: 10 * time.Millisecond, Buffer: 4, drainGate: gate})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := w.Next(ctx)
	if err != nil || !b.Full || len(b.Paths) != 0 {
		t.Fatalf("first batch = %+v, %v; want an empty Full batch", b, err)
	}
	const n = 200
	for i := range n {
		must(t, os.WriteFile(filepath.Join(root, fmt.Sprintf("f%03d", i)), nil, 0o644))
	}
	for len(w.c) < cap(w.c) {
		if ctx.Err() != nil {
			t.Fatalf("channel never filled: %d of %d", len(w.c), cap(w.c))
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	b, err = w.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logStats(t, w)
	if !b.Full || len(b.Paths) != n {
		t.Fatalf("batch after overflow: Full=%v with %d paths, want a Full batch of %d", b.Full, len(b.Paths), n)
	}
	if w.stats.nearFull.Load() == 0 || w.stats.lossWalks.Load() == 0 {
		t.Error("near-full channel not detected")
	}
}

// TestWatcherRenameIntoPlace: a file written elsewhere and renamed in (as
// Publish and every sync client do) is reported by an event batch; the temp
// names on the way are not.
func TestWatcherRenameIntoPlace(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "sub"), 0o755))
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if b, err := w.Next(ctx); err != nil || !b.Full {
		t.Fatalf("first batch = %+v, %v", b, err)
	}
	writeFile(t, filepath.Join(outside, "staged"), "a")
	must(t, os.Rename(filepath.Join(outside, "staged"), filepath.Join(root, "sub", "x.manifest")))
	writeFile(t, filepath.Join(root, "~$y.payload.tmp"), "b")
	writeFile(t, filepath.Join(root, ".syncthing.z.tmp"), "c")
	must(t, os.Rename(filepath.Join(root, "~$y.payload.tmp"), filepath.Join(root, "y.payload")))
	must(t, os.Rename(filepath.Join(root, ".syncthing.z.tmp"), filepath.Join(root, "z")))

	want := map[string]bool{"sub/x.manifest": true, "y.payload": true, "z": true}
	for len(want) > 0 {
		b, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("still waiting for %v: %v", want, err)
		}
		if b.Full {
			t.Fatalf("unexpected Full batch %v", b.Paths)
		}
		for _, p := range b.Paths {
			if k := Classify(filepath.Base(p)).Kind; k == KindTemp {
				t.Errorf("event batch reported temp %s", p)
			}
			delete(want, p)
		}
	}
}

// TestWatcherEventsFirst: with EventsFirst the first batch reports only
// what changed after NewWatcher, not the files already there.
func TestWatcherEventsFirst(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "old"), "a")
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: 10 * time.Millisecond, EventsFirst: true})
	writeFile(t, filepath.Join(root, "new"), "b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := w.Next(ctx)
	if err != nil || b.Full || !slices.Equal(b.Paths, []string{"new"}) {
		t.Fatalf("first batch = %+v, %v; want the event for new only", b, err)
	}
}

// TestWatcherNewSubdir: files created right after "mkdir -p" inside the new
// directories are found without waiting for a rescan.
func TestWatcherNewSubdir(t *testing.T) {
	root := t.TempDir()
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 20 {
		dir := filepath.Join(root, fmt.Sprintf("t%02d", i), "b", "c")
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "f"), nil, 0o644))
		want[fmt.Sprintf("t%02d/b/c/f", i)] = true
	}
	for len(want) > 0 {
		b, err := w.Next(ctx)
		if err != nil {
			logStats(t, w)
			t.Fatalf("still missing %d: %v", len(want), err)
		}
		for _, p := range b.Paths {
			delete(want, p)
		}
	}
	logStats(t, w)
}

func TestWatcherSkipAndClose(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "private", "secret"), "x")
	writeFile(t, filepath.Join(root, "pub", "a"), "x")
	writeFile(t, filepath.Join(root, "pub", ".DS_Store"), "x")
	must(t, os.Symlink("pub/a", filepath.Join(root, "link")))
	w := newWatcher(t, root, WatchOptions{
		Rescan: time.Hour, Debounce: 10 * time.Millisecond,
		Skip: func(rel string, isDir bool) bool { return isDir && rel == "private" },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := w.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Full batches list every regular file (litter too), never links or
	// skipped directories.
	if got := fmt.Sprint(b.Paths); !b.Full || got != "[pub/.DS_Store pub/a]" {
		t.Fatalf("first batch = %v (Full=%v)", got, b.Full)
	}
	// What is neither: the link, and the directory Skip left out.
	if got := fmt.Sprint(b.Irregular); got != "[link private]" {
		t.Fatalf("first batch's irregular entries = %v", got)
	}
	writeFile(t, filepath.Join(root, "private", "new"), "x")
	writeFile(t, filepath.Join(root, "pub", "b"), "x")
	b, err = w.Next(ctx)
	if err != nil || fmt.Sprint(b.Paths) != "[pub/b]" {
		t.Fatalf("event batch = %v, %v; want [pub/b]", b.Paths, err)
	}

	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if _, err := w.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("idle Next = %v, want DeadlineExceeded", err)
	}
	must(t, w.Close())
	if _, err := w.Next(ctx); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("Next after Close = %v, want fs.ErrClosed", err)
	}
	must(t, w.Close())
}

// TestWatcherRescanUnderSteadyStream: a stream of events that never goes
// quiet must not postpone the periodic full walk.
func TestWatcherRescanUnderSteadyStream(t *testing.T) {
	root := t.TempDir()
	w := newWatcher(t, root, WatchOptions{Rescan: 200 * time.Millisecond, Debounce: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.Next(ctx); err != nil {
		t.Fatal(err)
	}
	// The writer never pauses, so events are always pending when Next
	// looks: only an explicit check of the timer lets the rescan through.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			os.WriteFile(filepath.Join(root, fmt.Sprintf("s%d", i%50)), []byte("x"), 0o644)
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for events := 0; ; {
		b, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("no Full batch during a steady stream (%d event batches): %v", events, err)
		}
		if b.Full {
			t.Logf("Full batch after %d event batches", events)
			logStats(t, w)
			// Each event batch takes at least Debounce + the 20ms sleep, so
			// at most 5 fit into Rescan before the timer fires; the next
			// call must then walk.
			if events > 6 {
				t.Errorf("rescan postponed by %d event batches", events)
			}
			return
		}
		events++
		time.Sleep(20 * time.Millisecond) // events pile up meanwhile
	}
}

// A full walk reuses the previous walk's listing of a directory that has not
// changed since well before it was listed, and lists again one that changed:
// a file added later is in the next full batch, events or not.
func TestWatcherReusesUnchangedListings(t *testing.T) {
	// Longer than any stall of a loaded machine between a change and the
	// walk after it; the directories made "old" below are an hour old.
	defer func(d time.Duration) { listingTrust = d }(listingTrust)
	listingTrust = time.Minute
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "a", "one"), "x")
	old := time.Now().Add(-time.Hour)
	must(t, os.Chtimes(filepath.Join(root, "a"), old, old))
	must(t, os.Chtimes(root, old, old))
	w := newWatcher(t, root, WatchOptions{Rescan: 50 * time.Millisecond, Debounce: -1, EventsFirst: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	full := func() Batch {
		t.Helper()
		for {
			b, err := w.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if b.Full {
				return b
			}
		}
	}
	if b := full(); fmt.Sprint(b.Paths) != "[a/one]" {
		t.Fatalf("first walk: %v", b.Paths)
	}
	if b := full(); fmt.Sprint(b.Paths) != "[a/one]" || w.stats.reusedLists.Load() != 2 {
		t.Fatalf("second walk: %v, %d listings reused, want both", b.Paths, w.stats.reusedLists.Load())
	}
	writeFile(t, filepath.Join(root, "a", "two"), "x") // a's modification time moves
	reused := w.stats.reusedLists.Load()
	if b := full(); fmt.Sprint(b.Paths) != "[a/one a/two]" {
		t.Fatalf("walk after a change: %v", b.Paths)
	}
	if got := w.stats.reusedLists.Load() - reused; got != 1 {
		t.Fatalf("walk after a change reused %d listings, want 1 (the root's)", got)
	}
	// Changed within the trust window: listed again every time until its
	// last change is a second older than the listing.
	reused = w.stats.reusedLists.Load()
	if b := full(); fmt.Sprint(b.Paths) != "[a/one a/two]" {
		t.Fatalf("next walk: %v", b.Paths)
	}
	if got := w.stats.reusedLists.Load() - reused; got != 1 {
		t.Fatalf("a directory changed just now was reused (%d listings reused, want 1)", got)
	}
	// However old, a listing is read again at least every tenth walk.
	must(t, os.Chtimes(filepath.Join(root, "a"), old, old))
	reused = w.stats.reusedLists.Load()
	for range 20 {
		full()
	}
	if reads := 2*20 - (w.stats.reusedLists.Load() - reused); reads < 4 {
		t.Fatalf("20 walks of 2 unchanged directories read them %d times, want at least 4", reads)
	}
	// A file added behind a modification time put back (what a file system
	// that keeps none looks like) is still found, by the walk that reads
	// the directory again.
	writeFile(t, filepath.Join(root, "a", "three"), "x")
	must(t, os.Chtimes(filepath.Join(root, "a"), old, old))
	found := false
	for i := 0; i <= maxListingReuse && !found; i++ {
		found = fmt.Sprint(full().Paths) == "[a/one a/three a/two]"
	}
	if !found {
		t.Fatalf("a file added behind a reset modification time was not found in %d walks", maxListingReuse+1)
	}
	logStats(t, w)
}

// An idle rescan of a folder that did not change allocates no batch: its
// listings are reused and the walk before's batch is handed out again
// (Batch.Same); a changed folder's paths go into a slice sized by the walk
// before (issue 25: grown by appends, 20,000 paths beside 10,000 finished
// requests cost 1.5 MB per rescan, and a collection every rescan or two),
// and one that shrank is not kept at its old size. Bytes counted by the
// runtime, not a time.
func TestFullWalkOfAnUnchangedFolderAllocatesNoBatch(t *testing.T) {
	defer func(d time.Duration) { listingTrust = d }(listingTrust)
	listingTrust = time.Minute
	root := t.TempDir()
	const perDir = 1500
	old := time.Now().Add(-time.Hour)
	for _, d := range []string{"a", "b"} {
		must(t, os.Mkdir(filepath.Join(root, d), 0o755))
		for i := range perDir {
			must(t, os.WriteFile(filepath.Join(root, d, fmt.Sprintf("%032x.manifest", i)), nil, 0o644))
		}
		must(t, os.Chtimes(filepath.Join(root, d), old, old))
	}
	must(t, os.Chtimes(root, old, old))
	w := newWatcher(t, root, WatchOptions{Rescan: time.Hour, Debounce: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if b, err := w.Next(ctx); err != nil || !b.Full || len(b.Paths) != 2*perDir {
		t.Fatalf("first walk: full %v, %d paths, %v", b.Full, len(b.Paths), err)
	}
	// Only Next's goroutine walks: this test is that goroutine now.
	var before, after runtime.MemStats
	var b Batch
	var err error
	for range 3 {
		runtime.ReadMemStats(&before)
		b, err = w.fullWalk()
		runtime.ReadMemStats(&after)
		if err != nil || len(b.Paths) != 2*perDir {
			t.Fatalf("walk: %d paths, %v", len(b.Paths), err)
		}
	}
	if w.stats.reusedLists.Load() < 3*3 {
		t.Fatalf("%d listings reused in three walks of three unchanged directories, want 9", w.stats.reusedLists.Load())
	}
	batch := uint64(len(b.Paths)) * uint64(unsafe.Sizeof(""))
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("a walk of %d unchanged files allocated %d bytes; its paths are %d", 2*perDir, got, batch)
	// The walk before's batch, reported again (Batch.Same): what is
	// allocated is the walk's own few bytes, not the batch.
	if got > batch/8 || !b.Same {
		t.Fatalf("a walk of an unchanged folder of %d files allocated %d bytes (Same %v), want at most an eighth of its paths' %d",
			2*perDir, got, b.Same, batch)
	}
	// A folder that shrank is walked into a batch of its new size from the
	// walk after the first that saw it: a writer who once planted many
	// files does not make every later walk allocate for them.
	for i := 10; i < perDir; i++ {
		must(t, os.Remove(filepath.Join(root, "a", fmt.Sprintf("%032x.manifest", i))))
		must(t, os.Remove(filepath.Join(root, "b", fmt.Sprintf("%032x.manifest", i))))
	}
	for range 2 {
		if b, err = w.fullWalk(); err != nil || len(b.Paths) != 20 {
			t.Fatalf("walk of the shrunk folder: %d paths, %v", len(b.Paths), err)
		}
	}
	if cap(b.Paths) > 2*len(b.Paths) {
		t.Fatalf("the second walk of a folder shrunk to %d files made room for %d", len(b.Paths), cap(b.Paths))
	}
}
