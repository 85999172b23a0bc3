package host

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TuneDaemonGC keeps the default GC percent and follows the live heap with
// a soft memory limit, set again after each collection; GOGC or GOMEMLIMIT
// in the environment leave both alone.
//
// Not in parallel: it sets the process's memory limit, and t.Setenv.
func TestTuneDaemonGC(t *testing.T) {
	limit := func() int64 { return debug.SetMemoryLimit(-1) }
	defer debug.SetMemoryLimit(limit())
	// Once tuned, the process follows its live heap for good: the check of
	// GOGC is made only where nothing tuned it yet (a first -count).
	if !tuned.Load() {
		t.Setenv("GOGC", "100")
		TuneDaemonGC()
		if got := limit(); got != math.MaxInt64 {
			t.Fatalf("with GOGC set: memory limit %d, want none", got)
		}
	}
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	TuneDaemonGC()
	keep := make([]byte, 48<<20) // live data: the limit follows it
	for i := range keep {
		keep[i] = byte(i)
	}
	// Each collection runs the cleanup that sets the limit; wait for one
	// that saw the live 48 MiB (counted collections, not a fixed sleep).
	var got int64
	for range 50 {
		runtime.GC()
		time.Sleep(time.Millisecond) // cleanups run on their own goroutine
		if got = limit(); got >= 48<<20+gcHeadroom {
			break
		}
	}
	runtime.KeepAlive(keep)
	if got < 48<<20+gcHeadroom || got > 48<<20+gcHeadroom+64<<20 {
		t.Fatalf("memory limit %d with 48 MiB live, want about live + %d", got, gcHeadroom)
	}
}

// While a daemon loads, the soft limit is lifted, and set again from the
// live heap when the load ends; collections during the load leave it lifted.
//
// Not in parallel: it sets the process's memory limit, and t.Setenv.
func TestGCLoadingLiftsTheLimit(t *testing.T) {
	limit := tunedForTest(t)
	end := gcLoading()
	t.Cleanup(end) // a failure below must not leave the load on for the tests after it
	for range 3 {
		// Wait for the collection's cleanup to have run (counted, not a
		// fixed sleep): only then does the limit say what it did.
		before := follows.Load()
		runtime.GC()
		for deadline := time.Now().Add(10 * time.Second); follows.Load() == before; {
			if time.Now().After(deadline) {
				t.Fatal("no cleanup ran after a collection")
			}
			time.Sleep(time.Millisecond)
		}
		if got := limit(); got != math.MaxInt64 {
			t.Fatalf("during the load, after a collection: memory limit %d, want none", got)
		}
	}
	// A second daemon's load that ends inside this one leaves the limit
	// lifted (two daemons in one process: the tests).
	gcLoading()()
	if got := limit(); got != math.MaxInt64 {
		t.Fatalf("an inner load ended inside another: memory limit %d, want none", got)
	}
	end()
	end() // counted once: Open calls it twice
	if got := limit(); got == math.MaxInt64 || got < gcHeadroom {
		t.Fatalf("after the load: memory limit %d, want the live heap + %d", got, gcHeadroom)
	}
	// Had the second end counted, the next load's end would leave the
	// count below zero and the limit lifted for good.
	gcLoading()()
	if got := limit(); got == math.MaxInt64 {
		t.Fatal("after a load whose end was called twice, the next load left the limit lifted")
	}
	tuned.Store(false)
	gcLoading()()
	if got := limit(); got == math.MaxInt64 {
		t.Fatalf("untuned (GOGC in the environment): the load changed the limit to none")
	}
}

// A collection's cleanup that runs while a load begins never sets a limit
// inside the load: the cleanup's look at "loading" and its setting of the
// limit are one step against gcLoading's. The CI once saw a limit of the
// last collection's live heap right after gcLoading (a cleanup queued by
// an earlier collection had looked before the load began and set after).
//
// Not in parallel: it sets the process's memory limit.
func TestGCCleanupNeverSetsALimitInsideALoad(t *testing.T) {
	limit := tunedForTest(t)
	// Collections run without a pause beside the loads, each queueing the
	// cleanup that sets the limit when no load is on.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	defer func() { close(stop); <-done }()
	// A cleanup, counted; never a wait without an end (a cleanup stuck on
	// the lock fails here, not at the test binary's timeout).
	cleanups := func(k int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for n := follows.Load(); follows.Load() < n+k; runtime.Gosched() {
			if time.Now().After(deadline) {
				t.Fatalf("no collection's cleanup ran in 10 s (%d of %d)", follows.Load()-n, k)
			}
		}
	}
	// Up to 300 loads (the old code failed within 3 to 119 of them), for
	// at most 5 s: each forced collection marks the whole test binary's
	// heap, and the loop keeps both CPUs busy.
	start := time.Now()
	for i := 0; i < 300 && time.Since(start) < 5*time.Second; i++ {
		// Out of a load for a while, at a varied point of a collection's
		// cycle: a cleanup is then as likely to be in its step as not.
		cleanups(1)
		time.Sleep(time.Duration(i%20) * 50 * time.Microsecond)
		end := gcLoading()
		// Two cleanups later, any that looked before the load began has set
		// what it would: the limit must still be none.
		cleanups(2)
		if got := limit(); got != math.MaxInt64 {
			end()
			t.Fatalf("load %d, after two collections' cleanups: memory limit %d, want none", i, got)
		}
		end()
	}
}

// tunedForTest tunes the collector as a daemon does, for the test, and
// returns a look at the memory limit; the limit and the tuning are put
// back after it.
func tunedForTest(t *testing.T) (limit func() int64) {
	limit = func() int64 { return debug.SetMemoryLimit(-1) }
	was, wasTuned := limit(), tuned.Load()
	t.Cleanup(func() { debug.SetMemoryLimit(was); tuned.Store(wasTuned) })
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	TuneDaemonGC()
	tuned.Store(true) // an earlier test may have tuned with GOGC set
	return limit
}
