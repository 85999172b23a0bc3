package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	dir string
	tag string // names this directory's cgroups
	// foreign are ids the directory had before its identity changed:
	// their cgroups may be another daemon's, never ended, only reported.
	foreign []string
	lock    *os.File // held shared, and by every keeper, while runs may live
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
	tag, foreign, err := stateID(abs)
	if err != nil {
		return nil, Leftovers{}, err
	}
	s := &State{dir: abs, tag: tag, foreign: foreign}
	lo, err := s.recover(wait)
	if err != nil {
		s.Close()
		return nil, Leftovers{}, err
	}
	return s, lo, nil
}

// stateID is the id of the state directory dir, made at its first use and
// kept in its file "id" (twelve hex digits, as every release wrote it): it
// names the cgroups of its runs. Not the path, which changes when the home is
// reached through a link or moved, and may name another home in another mount
// namespace.
//
// The file "id.dev" binds the id to the directory's identity (device and
// inode, where the system has them): "<identity> <id> [<foreign id>...]". A
// directory whose identity changed is a copy (a home copied with cp -a and
// served beside the original), or one whose file system does not keep inode
// numbers (an overlay, a FUSE or an NFS remount). Either way the runs named
// for the old id may not be ours: the directory takes a new id, and the old
// one becomes foreign, whose cgroups recover never ends but reports while
// they hold a process (Leftovers.Unended), so that no request of theirs is
// run again meanwhile. With the old id kept, a copy's start ended the
// original's running ops as its leftovers (red team of 4c1d003); with a new
// id and nothing else, a changed inode hid a crashed daemon's leftovers (red
// team of bb398bd). An identity that cannot be read keeps the id.
func stateID(dir string) (id string, foreign []string, err error) {
	file, devFile := filepath.Join(dir, "id"), filepath.Join(dir, "id.dev")
	// bbIdent is the identity in a run/id of bb398bd's own format,
	// "<id> <identity>", which one commit of this project's history wrote.
	var bbIdent string
	if b, err := os.ReadFile(file); err == nil {
		if v := strings.TrimSpace(string(b)); validStateID(v) {
			id = v
		} else if f := strings.Fields(v); len(f) == 2 && validStateID(f[0]) {
			// bb398bd's "<id> <identity>": read as id and id.dev.
			id, bbIdent = f[0], f[1]
		}
	}
	var recIdent, recID string
	if bbIdent != "" {
		recIdent, recID = bbIdent, id
	}
	if b, err := os.ReadFile(devFile); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 2 && validStateID(f[1]) {
			recIdent, recID = f[0], f[1]
			for _, x := range f[2:] {
				if validStateID(x) && x != recID {
					foreign = append(foreign, x)
				}
			}
		}
	}
	ident := dirIdentity(dir)
	switch {
	case id != "" && recID == id && (recIdent == ident || ident == ""):
		if bbIdent != "" && ident != "" {
			// Into the format of earlier and later releases alike.
			return id, foreign, writeStateIDs(dir, ident, id, foreign)
		}
		return id, foreign, nil
	case id == "" && recID != "" && recIdent == ident:
		// The first start stopped between its two writes (or id was
		// lost): id.dev names this very directory's id.
		return recID, foreign, writeStateIDs(dir, ident, recID, foreign)
	case id != "" && ident == "":
		// Not readable now: keep the id, and what is known of others.
		if recID != "" {
			foreign = append(foreign, recID)
		}
		return id, foreign, nil
	case id != "" && recID == "":
		// An earlier release's directory: bind its id to it.
		return id, nil, writeStateIDs(dir, ident, id, nil)
	case id != "" && recIdent == ident && slices.Contains(foreign, id):
		// A start that took a new id stopped between its two writes (id
		// is among the foreign ones already).
		return recID, foreign, writeStateIDs(dir, ident, recID, foreign)
	}
	// A copy, a changed identity, or an id lost: a new id, and every id
	// known before it foreign.
	for _, x := range []string{id, recID} {
		if x != "" && !slices.Contains(foreign, x) {
			foreign = append(foreign, x)
		}
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, err
	}
	id = hex.EncodeToString(b[:])
	return id, foreign, writeStateIDs(dir, ident, id, foreign)
}

func validStateID(v string) bool {
	return len(v) == 12 && strings.Trim(v, "0123456789abcdef") == ""
}

// writeStateIDs records id and the foreign ids: id.dev first, then id, so
// that a start stopped between the two finds the new id in id.dev and the
// id it replaces among the foreign ones.
func writeStateIDs(dir, ident, id string, foreign []string) error {
	if ident != "" {
		line := strings.Join(append([]string{ident, id}, foreign...), " ")
		if err := replaceFile(filepath.Join(dir, "id.dev"), line); err != nil {
			return err
		}
	}
	return replaceFile(filepath.Join(dir, "id"), id)
}

func replaceFile(file, line string) error {
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
