package host

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// The collector's pace for `bridge serve`. A daemon keeps its ledger and
// its finished set in memory, about 1 KB per request it remembers, and
// allocates mostly short-lived garbage per request. Go's default (GOGC=100)
// lets the heap grow to twice the live data between collections: a small
// daemon collects cheaply and often enough, but one that remembers 100,000
// requests would hold a second 100 MB of garbage. The earlier GOGC=25 held
// the heap near the live data, at the price of a collection every few
// requests for a small daemon: a fifth of the CPU of a burst (BENCHMARKS.md).
//
// Instead the daemon keeps GOGC=100 and a soft memory limit of the live
// heap plus gcHeadroom, set again after every collection: a collection
// comes when the heap has grown by the smaller of the live data and the
// headroom. A small daemon collects as Go does; a large one holds at most
// the headroom of garbage, and marks its large live heap seldom (every
// gcHeadroom of allocation, not every 25 %).
const gcHeadroom = 32 << 20

// TuneDaemonGC sets the collector's pace for a daemon process, unless the
// GOGC or GOMEMLIMIT environment variable sets it.
func TuneDaemonGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	tuneOnce.Do(func() {
		tuned.Store(true)
		followLiveHeap(struct{}{})
	})
}

var (
	tuneOnce sync.Once
	tuned    atomic.Bool  // TuneDaemonGC set the limit: loading may lift it
	follows  atomic.Int64 // times followLiveHeap ran and re-armed: a collection's cleanup, counted

	// limitMu makes a cleanup's look at loading and its setting of the
	// limit one step against gcLoading's: a cleanup that looked just before
	// a load began would otherwise set the last collection's limit inside
	// the load (seen in CI).
	limitMu sync.Mutex
	loading int // loads begun and not ended (daemons of one process, in tests): no limit; under limitMu
)

// gcLoading lifts the soft limit while a daemon loads its ledger and its
// finished set, until the returned function. The heap then grows from
// nothing to its live size, and a limit of the last collection's live heap
// plus the headroom made a collection every gcHeadroom of that growth, each
// marking the growing heap again: beside 100,000 finished requests, about a
// fifth of the CPU of a start and 100-150 ms before it served. Go's own pace
// (twice the live heap) collects about log2(live) times instead.
func gcLoading() (end func()) {
	if !tuned.Load() {
		return func() {}
	}
	limitMu.Lock()
	defer limitMu.Unlock()
	loading++
	debug.SetMemoryLimit(math.MaxInt64)
	return sync.OnceFunc(func() {
		limitMu.Lock()
		defer limitMu.Unlock()
		if loading--; loading == 0 {
			setLimitFromLive()
		}
	})
}

// followLiveHeap sets the memory limit from the live heap the last
// collection found, and arms itself for the next collection: a cleanup
// runs once the collector finds its object unreachable.
func followLiveHeap(struct{}) {
	setLimitUnlessLoading()
	// Large enough not to share an allocation with anything else.
	runtime.AddCleanup(new([64]byte), followLiveHeap, struct{}{})
	// Counted last: a count seen means the next collection's cleanup is
	// armed (a test that collected as soon as it saw the count could
	// collect before the arming, and wait for a cleanup that never came).
	follows.Add(1)
}

// setLimitUnlessLoading is a cleanup's look at the loads and its setting
// of the limit, in one step.
func setLimitUnlessLoading() {
	limitMu.Lock()
	defer limitMu.Unlock()
	if loading == 0 {
		setLimitFromLive()
	}
}

// setLimitFromLive sets the soft limit to the live heap the last
// collection found plus the headroom.
func setLimitFromLive() {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		if live := sample[0].Value.Uint64(); live > 0 && live < math.MaxInt64-gcHeadroom {
			debug.SetMemoryLimit(int64(live) + gcHeadroom)
		}
	}
}
