package host

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"

	"github.com/syncbridge/bridge/bridge/ledger"
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

// While a daemon idles (its ledger naps: nothing came for a few seconds),
// the limit is its live heap and the runtime's own memory plus
// gcIdleSlack and a quarter of the live heap. Idle, it allocates only for
// its rescans (under a megabyte each beside 10,000 finished requests), so
// it collects every few rescans, each a few milliseconds of CPU, where Go's
// pace let the heap grow to twice the live data and kept that resident
// (issue 25: 31.3 MiB beside 10,000 finished requests, 1.51× the
// reference's). The first use of the ledger sets the busy headroom again.
const gcIdleSlack = 2 << 20

// TuneDaemonGC sets the collector's pace for a daemon process, unless the
// GOGC or GOMEMLIMIT environment variable sets it.
func TuneDaemonGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	tuned.Store(true)
	tuneOnce.Do(func() { followLiveHeap(struct{}{}) })
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
	awake   int // daemons whose ledger is awake (ledgerSleeps); under limitMu
	napping int // daemons whose ledger naps: with some and none awake, the process idles; under limitMu
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
	if tuned.Load() { // not in a test process whose tuning test ended
		setLimitUnlessLoading()
	}
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

// ledgerSleeps is told each change of a daemon's ledger, from was to now
// (ledger.SetSleepHook): the limit follows whether any daemon of the
// process is busy. A closed ledger counts neither way: a stopping daemon's
// last work is not idling.
func ledgerSleeps(was, now ledger.Wakefulness) {
	limitMu.Lock()
	defer limitMu.Unlock()
	count := func(w ledger.Wakefulness, d int) {
		switch w {
		case ledger.Awake:
			awake += d
		case ledger.Napping:
			napping += d
		}
	}
	count(was, -1)
	count(now, +1)
	if tuned.Load() && loading == 0 {
		setLimitFromLive()
	}
}

// setLimitFromLive sets the soft limit to the live heap the last
// collection found plus the headroom: gcHeadroom, or while the process
// idles its runtime's memory beside the heap, a quarter of the live heap
// and gcIdleSlack. Under limitMu.
func setLimitFromLive() {
	limit, ok := liveLimit(awake <= 0 && napping > 0)
	if ok {
		debug.SetMemoryLimit(limit)
	}
}

// liveLimit is the limit setLimitFromLive sets, busy or idle.
func liveLimit(idle bool) (int64, bool) {
	sample := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
	}
	metrics.Read(sample)
	var v [6]uint64
	for i, s := range sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return 0, false
		}
		v[i] = s.Value.Uint64()
	}
	live := v[0]
	if live == 0 || live > math.MaxInt64/4 {
		return 0, false
	}
	if !idle {
		return int64(live) + gcHeadroom, true
	}
	// The limit counts all the runtime's memory: stacks, the collector's
	// and the scheduler's own, beside the heap's pages.
	runtimeOwn := v[1] - v[2] - v[3] - v[4] - v[5]
	if runtimeOwn > math.MaxInt64/4 {
		return int64(live) + gcHeadroom, true
	}
	return int64(runtimeOwn+live+live/4) + gcIdleSlack, true
}
