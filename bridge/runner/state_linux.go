package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The records of a State, in its directory:
//
//   - keepers.lock: its shared lock is held by the daemon's open file
//     description, which every keeper shares (keeper_linux.go) and keeps
//     until its run has ended. A daemon that takes it exclusively knows no
//     keeper of an earlier daemon lives.
//   - cgroups: the parent cgroup under which this directory's runs make
//     theirs (bridge-run-<tag>-*), one per line, written before the first
//     run: a cgroup outlives the daemon that made it, and the next daemon
//     may start in another cgroup (another login session, say). A parent
//     stays while a cgroup of this directory's, or of a foreign id's (see
//     id.dev), under it holds a process.
//   - id, id.dev: the id that names the cgroups, and what binds it to this
//     directory, with the foreign ids (stateID, state.go).
//
// Neither keepers.lock nor cgroups is flushed to disk: a record of running processes matters only
// while the machine stays up, and what the kernel keeps of a file it just
// wrote survives any crash of the daemon.

// statePlat is what a State holds on Linux beside its records.
type statePlat struct {
	guard *keeper // the cgroup mode's guard, nil without one
	// closed: no keeper may go back to this State's pool (guarded by the
	// pool's lock).
	closed bool
}

// closePlat lets go of the guard (it ends what is left of the runs'
// cgroups, and exits) and of the idle keepers.
func (s *State) closePlat() {
	if s.guard != nil {
		s.guard.close()
		s.guard = nil
	}
	dropKeepers(s)
}

// continueKeepers sends SIGCONT to every keeper process that holds the
// lock file's inode as its descriptor 4 (a look at /proc once, at start).
func continueKeepers(lock *os.File) {
	var want unix.Stat_t
	if unix.Fstat(int(lock.Fd()), &want) != nil {
		return
	}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), "\x00"+keeperArg) {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+d.Name()+"/fd/"+strconv.Itoa(keeperLockFD), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			_ = unix.Kill(pid, unix.SIGCONT)
		}
	}
}

// recordMode writes the containment in force to the file "mode", for
// `bridge doctor` to read while the daemon runs (it cannot tell from
// outside: another user's cgroup rights, a fall back after a failure).
func (s *State) recordMode() {
	tmp := filepath.Join(s.dir, "mode.tmp")
	if os.WriteFile(tmp, []byte(Containment(0)+"\n"), 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(s.dir, "mode"))
	}
}

// recover waits for the keepers of an earlier daemon to end their runs and
// ends the earlier runs' cgroups, before this daemon's first run.
func (s *State) recover(wait time.Duration) (Leftovers, error) {
	setupContainment()
	var lo Leftovers
	start := time.Now()
	deadline := start.Add(wait)
	lock, err := os.OpenFile(filepath.Join(s.dir, "keepers.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return lo, fmt.Errorf("open the runs' lock: %w", err)
	}
	s.lock = lock
	if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		// Keepers of an earlier daemon hold it: one its op stopped
		// (SIGSTOP) would never end its run; continued, it does.
		continueKeepers(lock)
	}
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return lo, fmt.Errorf("lock %s: %w", lock.Name(), err)
		}
		if time.Now().After(deadline) {
			lo.Unended = fmt.Sprintf("the keeper processes of an earlier daemon's runs were still ending them after %s", wait)
			break
		}
		time.Sleep(pause)
	}
	// Shared from now on, with this daemon's keepers (and any earlier one
	// still ending its run).
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return lo, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}

	record := filepath.Join(s.dir, "cgroups")
	data, _ := os.ReadFile(record)
	parents := strings.Fields(string(data))
	contain.mu.Lock()
	current := ""
	if contain.kind == containCgroup {
		current = contain.parent
	}
	contain.mu.Unlock()
	if current != "" && !slices.Contains(parents, current) {
		parents = append(parents, current)
	}
	prefix := cgroupStatePrefix + s.tag + "-"
	var keep []string // parents still holding a cgroup of ours
	if current != "" {
		keep = append(keep, current)
	}
	for _, parent := range parents {
		ents, err := os.ReadDir(parent)
		if err != nil && !os.IsNotExist(err) {
			lo.Unended = fmt.Sprintf("the cgroups of an earlier daemon's runs under %s cannot be read: %v", parent, err)
			keep = append(keep, parent)
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			n, ok := endCgroup(filepath.Join(parent, e.Name()), max(time.Until(deadline), 100*time.Millisecond))
			lo.Ended += n
			if !ok {
				lo.Unended = fmt.Sprintf("the cgroup %s of an earlier daemon's run could not be emptied", filepath.Join(parent, e.Name()))
				if !slices.Contains(keep, parent) {
					keep = append(keep, parent)
				}
			}
		}
	}
	// The cgroups of ids this directory had before its identity changed
	// may be another daemon's (the original of a copy): never ended here,
	// but while one holds a process, an earlier run may live on.
	var still []string
	for _, id := range s.foreign {
		busy := ""
		for _, parent := range parents {
			ents, err := os.ReadDir(parent)
			if err != nil && !os.IsNotExist(err) {
				// Unread is not empty: keep the id, and the parent.
				busy = parent
				if !slices.Contains(keep, parent) {
					keep = append(keep, parent)
				}
				continue
			}
			for _, e := range ents {
				dir := filepath.Join(parent, e.Name())
				if e.IsDir() && strings.HasPrefix(e.Name(), cgroupStatePrefix+id+"-") && cgroupPopulated(dir) {
					busy = dir
					// Looked at again by the next start, whatever
					// cgroup that one is in.
					if !slices.Contains(keep, parent) {
						keep = append(keep, parent)
					}
				}
			}
		}
		if busy != "" {
			still = append(still, id)
			lo.Unended = fmt.Sprintf("the cgroup %s, of this directory's runs before its device or inode changed (a copy, or a file system that does not keep inode numbers), still holds processes: not ended, as they may be another daemon's", busy)
		}
	}
	if len(still) != len(s.foreign) {
		if err := writeStateIDs(s.dir, dirIdentity(s.dir), s.tag, still); err != nil {
			return lo, err
		}
		s.foreign = still
	}
	lo.Waited = time.Since(start)
	s.recordMode()
	if current != "" {
		// A guard ends the runs' cgroups as soon as this daemon dies,
		// not at the next start (a keeper ends its own run at once). A
		// guard that cannot start leaves that to the next start.
		if g, err := startKeeper(s); err == nil {
			if err := g.becomeGuard(current, prefix); err == nil {
				s.guard = g
			} else {
				g.close()
			}
		}
	}
	if len(keep) == 0 {
		if err := os.Remove(record); err != nil && !os.IsNotExist(err) {
			return lo, err
		}
		return lo, nil
	}
	tmp := record + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(keep, "\n")+"\n"), 0o600); err != nil {
		return lo, fmt.Errorf("record the runs' cgroup: %w", err)
	}
	if err := os.Rename(tmp, record); err != nil {
		return lo, fmt.Errorf("record the runs' cgroup: %w", err)
	}
	return lo, nil
}

// dirIdentity is the directory's device and inode ("" if it cannot be
// read): what a copy of it does not share (stateID).
func dirIdentity(dir string) string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// cgroupPopulated reports whether a process lives in the cgroup dir or
// below it.
func cgroupPopulated(dir string) bool {
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.events")); err == nil {
		return populated(b)
	}
	return len(cgroupProcs(dir)) > 0
}
