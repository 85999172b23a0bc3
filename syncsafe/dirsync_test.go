package syncsafe

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Every caller of a shared directory fsync returns only after an fsync that
// started after the caller arrived has completed: a rename made before the
// call is covered. Failed fsyncs are retried by the callers they left
// uncovered.
func TestDirSyncCoversEveryCaller(t *testing.T) {
	var s dirSync
	var arrived atomic.Int64 // renames done so far
	var mu sync.Mutex
	var completed []int64 // for each successful fsync: how many renames it covers
	var calls, fails atomic.Int64
	fsync := func() error {
		covers := arrived.Load()
		time.Sleep(200 * time.Microsecond)
		if calls.Add(1)%2 == 1 { // every other one, the first included
			fails.Add(1)
			return errors.New("injected")
		}
		mu.Lock()
		completed = append(completed, covers)
		mu.Unlock()
		return nil
	}
	const n = 200
	var wg sync.WaitGroup
	var errs atomic.Int64
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Duration(i%20) * 100 * time.Microsecond) // arrive in waves
			mine := arrived.Add(1)
			for {
				err := s.do(fsync)
				if err == nil {
					break
				}
				errs.Add(1) // the caller whose own fsync failed sees it
			}
			mu.Lock()
			defer mu.Unlock()
			for _, c := range completed {
				if c >= mine {
					return
				}
			}
			t.Errorf("caller %d returned before any fsync covering it completed", mine)
		})
	}
	wg.Wait()
	if errs.Load() != fails.Load() {
		t.Errorf("%d fsyncs failed but %d callers saw a failure", fails.Load(), errs.Load())
	}
	if fails.Load() == 0 {
		t.Errorf("no injected failure happened (%d fsyncs): the test did not test retries", calls.Load())
	}
	t.Logf("%d callers, %d fsyncs (%d failed)", n, calls.Load(), fails.Load())
}
