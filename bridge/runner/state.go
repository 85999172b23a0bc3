package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// State is the runner's record, in a private directory of the daemon's
// (never the synced folder), of the runs it starts: what a daemon killed
// outright leaves behind is found there by the next daemon of the same
// directory, and ended before that daemon answers anything (doc.go,
// "Across a crash"). A State serves one daemon at a time, as its home
// does.
type State struct {
	dir  string
	tag  string   // names this directory's cgroups
	lock *os.File // held shared, and by every keeper, while runs may live
	statePlat
}

// Leftovers is what OpenState found of an earlier daemon's runs.
type Leftovers struct {
	// Ended counts the processes of earlier runs it ended (in their
	// cgroups; a keeper ends its own run when its daemon dies).
	Ended int
	// Waited is how long it waited for earlier runs' processes to end.
	Waited time.Duration
	// Unended, when not empty, says why a process of an earlier run may
	// still live: nothing may then treat such a run as over.
	Unended string
}

// OpenState opens (making it if needed) the runner's state directory dir
// and ends every process that runs of an earlier daemon of dir left behind,
// waiting at most wait for them to be gone. Runs of the returned State are
// found again by the next OpenState of dir after a crash.
func OpenState(dir string, wait time.Duration) (*State, Leftovers, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, Leftovers{}, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, Leftovers{}, err
	}
	tag, err := stateID(abs)
	if err != nil {
		return nil, Leftovers{}, err
	}
	s := &State{dir: abs, tag: tag}
	lo, err := s.recover(wait)
	if err != nil {
		s.Close()
		return nil, Leftovers{}, err
	}
	return s, lo, nil
}

// stateID is the id of the state directory dir, made at its first use and
// kept in its file "id": it names the cgroups of its runs. Not the path,
// which changes when the home is reached through a link or moved, and may
// name another home in another mount namespace. The file also holds the
// directory's identity (device and inode, where the system has them): a
// copy of the directory (a home copied with cp -a, then served beside the
// original) carries the file but not the identity, and gets an id of its
// own; with the original's it ended the original's running ops as an
// earlier daemon's leftovers (red team of 4c1d003). A file without the
// identity (an earlier release's) is kept and given it.
func stateID(dir string) (string, error) {
	file := filepath.Join(dir, "id")
	ident := dirIdentity(dir)
	if b, err := os.ReadFile(file); err == nil {
		id, was, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		if len(id) == 12 && strings.Trim(id, "0123456789abcdef") == "" {
			switch {
			case was == ident:
				return id, nil
			case was == "":
				return id, writeStateID(file, id, ident)
			}
		}
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b[:])
	return id, writeStateID(file, id, ident)
}

func writeStateID(file, id, ident string) error {
	line := id
	if ident != "" {
		line += " " + ident
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(line+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the runs' id: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("record the runs' id: %w", err)
	}
	return nil
}

// Run is [Run] for a run recorded in s.
func (s *State) Run(ctx context.Context, spec Spec) *Outcome { return run(ctx, spec, s) }

// Close lets go of the state; call it once no run of it is going (its
// guard, in the cgroup mode, then ends whatever is left of them).
func (s *State) Close() error {
	if s == nil {
		return nil
	}
	s.closePlat()
	if s.lock != nil {
		return s.lock.Close()
	}
	return nil
}
