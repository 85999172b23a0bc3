// Package probe is what the tests see of a daemon and make it do: counters of
// what it read and woke for, the lifecycle events it took, and a crash at a
// named durable step.
//
// Only a test binary makes one, by setting New: a production daemon's probe
// is nil, every method is a no-op on nil, and nothing in a `serve`'s
// environment or options can make it exit mid-step. The package is internal
// to bridge/host, so cmd/bridge cannot import it; within bridge/host only
// test code sets New: the tests' TestMain and testkit's serve role, which
// only test files import (host's TestOnlyTestsSetTheProbe holds it so).
package probe

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"

	"strings"
	"sync/atomic"

	"github.com/syncbridge/bridge/bridge/ledger"
)

// New makes the probe of a daemon of the host home at home; set only in a
// test binary: by its TestMain, and unset for a moment by the test that
// shows a daemon without it has no probe.
var New func(home string) *Probe

// A Probe belongs to one daemon.
type Probe struct {
	// CrashAt names a durable step at which the daemon exits abruptly, as
	// a power cut would stop it ("step" or "step#n" for the n-th time).
	CrashAt string
	// PowerCut makes the crash lose what a power cut would: the ledger
	// file is cut to its length at its last fsync (lazy writes gone), and
	// the files the daemon wrote without an fsync (Unsynced: in the home
	// and the folder) are emptied or removed (Cut), as a journalled file
	// system may leave a file whose name was committed before its data, or
	// neither.
	PowerCut bool
	// CutZeros makes Cut leave every such file at its size and times with
	// zeros for its bytes, as a file system that commits a file's size
	// before its data may (ext4 data=writeback, NTFS): the worst case for
	// whatever vouches for a file by its size and time.
	CutZeros bool
	// OnEvent sees every lifecycle event as it is taken (DESIGN §6).
	OnEvent func(event string)
	// Opened runs once Open has loaded the trusted agents, before the
	// control loop starts watching the home: a test pairs an agent there.
	Opened func()
	// Entries, set by the daemon's Open, lists its ledger as the daemon
	// holds it (what its file shows may lag behind: lazy writes).
	Entries func() ([]ledger.Entry, error)

	crashCount atomic.Int64
	counts     [tallies]atomic.Int64

	umu      sync.Mutex
	unsynced map[string]bool
}

// A Tally is one of the probe's counters.
type Tally int

const (
	ManifestReads    Tally = iota // manifests read for an evaluation
	CancelReads                   // cancel files read
	ControlWakes                  // the control loop's wake-ups
	SweepScans                    // the sweeps' scans of the ledger
	TempSweeps                    // sweeps of the temporaries a crash left (sweepTemps)
	ControlEnds                   // returns of the control loop
	FinishedLookups               // look-ups of the finished set by a rescan (dispatchFull)
	RescanLooks                   // the control loop's looks brought by a rescan
	Collections                   // the control loop's collections (the first after the start-up scan, then periodic)
	TimerWakes                    // the control loop's wakes for a deadline of its own
	LivenessRounds                // liveness stamps written for their interval (refreshLiveness)
	ResultChecks                  // shares of an agent's results a rescan checked (shareToCheck)
	ResultSkips                   // rescans that checked none of an agent's results, its directory unchanged
	ResultOwnChanges              // result directories found changed by the daemon's own writes alone
	SameRescans                   // rescans that took the one before's findings: the folder and finished set unchanged (dispatchFull)
	RotationFollows               // agents whose rotation statements a batch followed (followStatements)
	Rescans                       // full rescans dispatched (dispatchFull)
	FinishedMarks                 // results compared with their private copies and marked finished (markFinished)
	tallies
)

// Unsynced notes files written without an fsync, under every name
// they may have when a power cut comes (a rename is no fsync either): a
// PowerCut crash cuts those still there to nothing (Cut). Nothing is kept
// without PowerCut.
func (p *Probe) Unsynced(paths ...string) {
	if p == nil || !p.PowerCut {
		return
	}
	p.umu.Lock()
	defer p.umu.Unlock()
	if p.unsynced == nil {
		p.unsynced = map[string]bool{}
	}
	for _, path := range paths {
		p.unsynced[path] = true
	}
}

// Synced takes back Unsynced's note of paths: their bytes were fsynced
// since (a rename that follows may still be lost, not the bytes).
func (p *Probe) Synced(paths ...string) {
	if p == nil || !p.PowerCut {
		return
	}
	p.umu.Lock()
	defer p.umu.Unlock()
	for _, path := range paths {
		delete(p.unsynced, path)
	}
}

// Cut does to the files Unsynced noted that are there what a power cut
// may: in path order, it empties one (the name without the data, the worst
// for a reader), removes the next (the name lost too), and so on.
func (p *Probe) Cut() {
	p.umu.Lock()
	defer p.umu.Unlock()
	n := 0
	for _, path := range slices.Sorted(maps.Keys(p.unsynced)) {
		fi, err := os.Lstat(path)
		if err != nil {
			continue // gone meanwhile (renamed, removed): nothing to cut
		}
		switch {
		case p.CutZeros:
			os.WriteFile(path, make([]byte, fi.Size()), 0o600) // same size
			os.Chtimes(path, fi.ModTime(), fi.ModTime())       // same time
		case n%2 == 0:
			os.Truncate(path, 0)
		default:
			os.Remove(path)
		}
		n++
	}
}

// CrashExit is the exit status of an injected crash.
const CrashExit = 86

// Add counts one more of t.
func (p *Probe) Add(t Tally) {
	if p != nil {
		p.counts[t].Add(1)
	}
}

// N is t's count so far (0 without a probe).
func (p *Probe) N(t Tally) int64 {
	if p == nil {
		return 0
	}
	return p.counts[t].Load()
}

// Event passes a lifecycle event to OnEvent.
func (p *Probe) Event(ev string) {
	if p != nil && p.OnEvent != nil {
		p.OnEvent(ev)
	}
}

// Crashing reports whether the tests asked for a crash at step (its first
// or any time), without counting it.
func (p *Probe) Crashing(step string) bool {
	if p == nil {
		return false
	}
	name, _, _ := strings.Cut(p.CrashAt, "#")
	return p.CrashAt != "" && name == step
}

// CrashNow reports whether the daemon is to exit at this pass of step: the
// step is CrashAt's, and this is its n-th pass when CrashAt names one.
func (p *Probe) CrashNow(step string) bool {
	if !p.Crashing(step) {
		return false
	}
	_, nth, _ := strings.Cut(p.CrashAt, "#")
	return nth == "" || fmt.Sprint(p.crashCount.Add(1)) == nth
}
