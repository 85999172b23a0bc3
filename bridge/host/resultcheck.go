package host

import (
	"io/fs"
	"os"
	"time"

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
	fi      fs.FileInfo // nil: not seen yet, or not a directory then
	ctime   int64       // fi's change time: a modification time set back moves it
	at      time.Time   // when that check began
	shares  int         // the rotation's size then
	covered int         // shares checked in a row since, the directory as fi
	skips   int         // rescans in a row that checked none of its results
	turn    int         // the share its next check takes
}

// maxResultSkips bounds how many rescans in a row may check none of an
// agent's results: the tenth checks a share whatever its directory says,
// for a result written over in place (which moves no directory time) whose
// event notify dropped, and for a file system that keeps no directory
// times (every result within 10 × shares rescans: at 30 s rescans and
// 10,000 finished requests, 50 minutes).
const maxResultSkips = 9

// shareToCheck is the share of keys (finished "agent/id" keys, sorted, so
// each agent's are adjacent) whose results this rescan checks, each agent's
// in a rotation of its own. An agent's results are checked only while one
// may have been lost or replaced: a share at each rescan until a whole
// rotation was checked with its result directory unchanged and the keys
// the same (a result removed, renamed, or another renamed over it moves
// the directory's times, so none of these goes unchecked), then none until
// either changes or maxResultSkips rescans have passed. fresh says that
// the keys were found anew (dispatchFull's pass through the names: the
// folder, the finished set or the refused marks changed), which starts
// every rotation again: a finished request delivered again (its result
// lost with it, say) is checked as it would be without the pause. An idle
// daemon beside 10,000 finished requests so looks at one directory a
// rescan, not at 2,000 files (issue 25: a third of an idle rescan's CPU).
func (f *finishedSet) shareToCheck(keys []string, shares int, fresh bool, trusted func(agent string) bool) []string {
	var check []string
	seen := make(map[string]*resultDir, len(f.dirs))
	for i := 0; i < len(keys); {
		agent := keys[i][:len(keys[i])-33]
		j := i + 1
		for j < len(keys) && keys[j][:len(keys[j])-33] == agent {
			j++
		}
		run := keys[i:j]
		i = j
		if !trusted(agent) {
			continue // dispatch ignores its files too: no evaluation
		}
		rd := f.dirs[agent]
		if rd == nil {
			rd = &resultDir{}
		}
		seen[agent] = rd
		fi, err := f.folder.Lstat(bridge.ToAgentDir(f.me, agent))
		if err != nil || !fi.IsDir() {
			fi = nil // gone or replaced by a file: every result is lost, check them
		}
		var ctime int64
		if fi != nil {
			ctime = syncsafe.ChangeTime(fi).UnixNano()
		}
		same := !fresh && fi != nil && rd.fi != nil && os.SameFile(fi, rd.fi) &&
			fi.ModTime().Equal(rd.fi.ModTime()) && ctime == rd.ctime && rd.shares == shares &&
			rd.at.Sub(fi.ModTime()) > f.limits.resultDirTrust && rd.at.UnixNano()-ctime > int64(f.limits.resultDirTrust)
		if same && rd.covered >= shares && rd.skips < maxResultSkips {
			rd.skips++
			f.probe.add(resultSkips)
			continue
		}
		if !same {
			rd.fi, rd.ctime, rd.at, rd.shares, rd.covered = fi, ctime, time.Now(), shares, 0
		}
		turn := rd.turn % shares
		for _, key := range run {
			if shares == 1 || int(fnv32a(key))%shares == turn {
				check = append(check, key)
			}
		}
		f.probe.add(resultChecks)
		rd.turn++
		rd.covered++
		rd.skips = 0
	}
	f.dirs = seen // an agent with no finished request left is forgotten
	return check
}
