package host

import (
	"io/fs"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/syncsafe"
)

// resultDir is what the result check knows of one agent's result directory
// in the folder: the directory as it was when a share of its results began
// to be checked, and how many shares were checked since, the directory
// unchanged all the while.
//
// Only dispatchFull (the watcher's goroutine) uses it.
type resultDir struct {
	st      dirState  // zero: not seen yet, or not a directory then
	at      time.Time // when that check began
	shares  int       // the round's size (shares) then
	covered int       // shares checked in a row since, the directory as st
	skips   int       // rescans in a row that checked none of its results
	turn    int       // the share its next check takes
}

// keyRun is where one agent's keys are in a rescan's sorted keys.
type keyRun struct {
	agent  string
	lo, hi int
}

// dirState is what shows that a directory is unchanged: its identity and
// its modification and change times (a modification time set back moves
// the change time). The zero value is no directory.
type dirState struct {
	ino          uint64
	mtime, ctime int64
}

func dirStateOf(fi fs.FileInfo) dirState {
	if fi == nil || !fi.IsDir() {
		return dirState{}
	}
	return dirState{ino: fileIno(fi), mtime: fi.ModTime().UnixNano(), ctime: syncsafe.ChangeTime(fi).UnixNano()}
}

// ownWrites records, by agent, the daemon's own changes to the agent's
// result directory that the result check need not take for a folder
// writer's: the directory's state just before the first of them and just
// after the last, while each began where the one before left it. The
// liveness stamps, rewritten every 5 minutes, are such changes: without
// this, beside 10,000 finished requests (a round of 11 rescans, 5.5
// minutes at 30 s rescans) the checks would never pause.
type ownWrites struct {
	mu sync.Mutex
	m  map[string]ownChange
}

type ownChange struct{ before, after dirState }

// note records that the daemon changed agent's result directory from
// before to after (states taken just before and just after its write).
func (o *ownWrites) note(agent string, before, after dirState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]ownChange{}
	}
	if prev, ok := o.m[agent]; ok && prev.after == before {
		before = prev.before
	}
	o.m[agent] = ownChange{before, after}
}

// take returns and forgets what note recorded for agent.
func (o *ownWrites) take(agent string) (ownChange, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.m[agent]
	delete(o.m, agent)
	return c, ok
}

// ownWrite does write, a change of agent's result directory, and notes it
// as the daemon's own (ownWrites), unless the directory at that name was
// another one after it (replaced meanwhile: not the daemon's doing; on
// Windows, where no inode is seen, this is not told either). A
// folder writer's change made between the two looks that enclose the write
// (its fsyncs and rename: milliseconds, more on a slow disk), or in the
// same timestamp tick just after the second, is not told apart from it:
// such a result is found by a later share, as one written over in place
// (maxResultSkips).
func (b *base) ownWrite(agent string, write func() error) error {
	dir := bridge.ToAgentDir(b.me, agent)
	before, berr := b.folder.Lstat(dir)
	err := write()
	if err == nil && berr == nil {
		if after, aerr := b.folder.Lstat(dir); aerr == nil {
			if bs, as := dirStateOf(before), dirStateOf(after); bs.ino == as.ino && as != (dirState{}) {
				b.ownDirs.note(agent, bs, as)
			}
		}
	}
	return err
}

// maxResultSkips bounds how many rescans in a row may check none of an
// agent's results: the tenth checks a share whatever its directory says,
// for a result written over in place (which moves no directory time), a
// change hidden in the tick of one of the daemon's own writes (ownWrite),
// and a file system that keeps no directory times: every result within
// 10 × shares rescans (at 30 s rescans and 10,000 finished requests, 50
// minutes).
const maxResultSkips = 9

// shareToCheck is the share of keys (finished "agent/id" keys, sorted, so
// each agent's are adjacent) whose results this rescan checks, each agent's
// in a round of its own (DESIGN invariant 6). An agent's results are checked only while one
// may have been lost or replaced: a share at each rescan until a whole
// round was checked with its result directory unchanged and the keys
// the same (a result removed, renamed, or another renamed over it moves
// the directory's times, so none of these goes unchecked; the daemon's own
// liveness stamps do not count, ownWrite), then none until either changes
// or maxResultSkips rescans have passed. fresh says that
// the keys were found anew (false: they are the very keys of the call
// before); they are after dispatchFull's pass through the names (the
// folder, the finished set or the refused marks changed), which starts
// every round again: a finished request delivered again (its result
// lost with it, say) is checked as it would be without the pause. An idle
// daemon beside 10,000 finished requests so looks at one directory a
// rescan, not at 2,000 files (issue 25: a third of an idle rescan's CPU).
func (f *finishedSet) shareToCheck(keys []string, shares int, fresh bool, trusted func(agent string) bool) []string {
	var check []string
	if fresh || f.runs == nil {
		// Found anew: where each agent's keys begin. Otherwise they are
		// the very keys of the rescan before (dispatchFull), and going
		// through 10,000 of them to compare their agents was most of a
		// paused rescan's own CPU.
		f.runs = f.runs[:0]
		for i := 0; i < len(keys); {
			agent := keys[i][:len(keys[i])-33]
			j := i + 1
			for j < len(keys) && keys[j][:len(keys[j])-33] == agent {
				j++
			}
			f.runs = append(f.runs, keyRun{agent, i, j})
			i = j
		}
	}
	seen := make(map[string]*resultDir, len(f.dirs))
	for _, r := range f.runs {
		agent, run := r.agent, keys[r.lo:r.hi]
		if !trusted(agent) {
			continue // dispatch ignores its files too: no evaluation
		}
		rd := f.dirs[agent]
		if rd == nil {
			rd = &resultDir{}
		}
		seen[agent] = rd
		now := time.Now()
		fi, _ := f.folder.Lstat(bridge.ToAgentDir(f.me, agent))
		st := dirStateOf(fi) // zero if gone or not a directory: every result is lost, check them
		own, ownOK := f.ownDirs.take(agent)
		if ownOK && !fresh && st != (dirState{}) && rd.st != (dirState{}) && own.before == rd.st && own.after == st {
			// Changed since by the daemon alone: as if this look had
			// begun the round's checks so far.
			rd.st, rd.at = st, now
			f.probe.Add(probe.ResultOwnChanges)
		}
		trust := int64(f.limits.resultDirTrust)
		same := !fresh && st != (dirState{}) && st == rd.st && rd.shares == shares &&
			rd.at.UnixNano()-max(st.mtime, st.ctime) > trust
		if same && rd.covered >= shares && rd.skips < maxResultSkips {
			rd.skips++
			f.probe.Add(probe.ResultSkips)
			continue
		}
		if !same {
			rd.st, rd.at, rd.shares, rd.covered = st, now, shares, 0
		}
		turn := rd.turn % shares
		for _, key := range run {
			if shares == 1 || int(fnv32a(key))%shares == turn {
				check = append(check, key)
			}
		}
		f.probe.Add(probe.ResultChecks)
		rd.turn++
		rd.covered++
		rd.skips = 0
	}
	f.dirs = seen // an agent with no finished request left is forgotten
	return check
}
