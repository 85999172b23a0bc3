package syncsafe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/rjeczalik/notify"
)

// The watcher's hold on its directories: the root, reached again at every
// full walk (it may be moved, deleted or replaced under us), and one watch
// per directory a walk descends into.

// Watch watches the directory rel of the folder as NewWatcher does, except
// that rel is reached without following a link, then and at every full
// walk: a folder writer who replaces one of its components with a link gets
// ErrRootGone from Next, not a watcher of the tree the link points to. A
// directory that is not there (or not a directory) as Watch starts is no
// error either: Next says ErrRootGone until it is.
func (f *Folder) Watch(rel string, opt WatchOptions) (*Watcher, error) {
	if err := cleanRel(rel); err != nil {
		return nil, fmt.Errorf("watch %s: %w", rel, err)
	}
	base, err := filepath.EvalSymlinks(f.path) // the folder itself is the user's choice
	if err == nil {
		base, err = filepath.Abs(base)
	}
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", rel, err)
	}
	return openWatcher(filepath.Join(base, filepath.FromSlash(rel)), f, rel, opt)
}

// statRoot describes the root's path as it is now, without following a
// link at its end (or, for Folder.Watch, anywhere below the folder).
func (w *Watcher) statRoot() (fs.FileInfo, error) {
	var fi fs.FileInfo
	var err error
	if w.base != nil {
		fi, err = w.base.Lstat(w.bRel)
	} else {
		fi, err = os.Lstat(w.dir)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		what := "a file"
		switch t := fi.Mode().Type(); {
		case t&fs.ModeSymlink != 0:
			what = "a link"
		case t != 0:
			what = "a special file"
		}
		return nil, fmt.Errorf("%s where a directory should be", what)
	}
	return fi, nil
}

// openRoot opens the directory at the root's path, checking that what it
// opened is what statRoot saw (nothing swapped it in between).
func (w *Watcher) openRoot() (*os.Root, *os.File, fs.FileInfo, error) {
	fi, err := w.statRoot()
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := w.openRootDir()
	if err != nil {
		return nil, nil, nil, err
	}
	rfi, err := r.Stat(".")
	if err == nil && !os.SameFile(fi, rfi) {
		err = errors.New("replaced while being opened")
	}
	if err != nil {
		r.Close()
		return nil, nil, nil, err
	}
	return r, sameDir(r), rfi, nil
}

// openRootDir opens the root's directory as an os.Root without waiting on
// whatever a folder writer swaps in at its name: os.Root's own opens of a
// directory (OpenRoot, in a root or by path) take a FIFO as readily as a
// directory and wait for its writer for ever. The directory is opened
// first with O_DIRECTORY|O_NONBLOCK (openDirFast, openDirIn), and the Root
// made from that descriptor (rootFromDir). Only where the system has no
// way to do that (not Linux, or Linux without /proc) is the root opened by
// name again, and a FIFO swapped in at that instant can still hold the
// watcher; a failure of the descriptor's way is an error, looked at again
// later, never a reason to open by name.
func (w *Watcher) openRootDir() (*os.Root, error) {
	var d *os.File
	var err error
	if w.base != nil {
		var ok bool
		if d, ok, err = openDirFast(w.base.rootDir, w.bRel); !ok {
			d, err = openDirIn(w.base.root, w.bRel)
		}
	} else {
		d, err = os.OpenFile(w.dir, os.O_RDONLY|openDirFlags, 0)
	}
	if err != nil {
		return nil, err
	}
	defer d.Close()
	r, ok, err := rootFromDir(d)
	switch {
	case ok:
		return r, err
	case w.base != nil:
		return w.base.root.OpenRoot(w.bRel)
	default:
		return os.OpenRoot(w.dir)
	}
}

func (w *Watcher) closeRoot() error {
	w.rootMu.Lock()
	defer w.rootMu.Unlock()
	if w.root == nil {
		return nil // never opened (Folder.Watch of a directory not there)
	}
	err := w.root.Close()
	if w.rootD != nil {
		w.rootD.Close()
	}
	return err
}

// checkRoot makes sure the root handle is the directory now at the root's
// path, and opens the new one if it was replaced: a watcher that held on to
// a directory moved away would report nothing ever again. It reports
// whether the root was replaced.
func (w *Watcher) checkRoot() (bool, error) {
	fi, err := w.statRoot()
	if err != nil {
		return false, fmt.Errorf("watch %s: %w: %v", w.dir, ErrRootGone, err)
	}
	if os.SameFile(fi, w.rootFI) {
		return false, nil
	}
	r, rootD, rfi, err := w.openRoot()
	if err != nil {
		return false, fmt.Errorf("watch %s: %w: %v", w.dir, ErrRootGone, err)
	}
	w.rootMu.Lock()
	oldR, oldD := w.root, w.rootD
	w.root, w.rootD, w.rootFI = r, rootD, rfi
	w.rootMu.Unlock()
	if oldR != nil {
		oldR.Close()
	}
	if oldD != nil {
		oldD.Close()
	}
	clear(w.listings)
	w.unarmAll()
	return true, nil
}

// arm watches one directory (not its subdirectories); fi is the directory
// as it was when armed, for noticing a replacement later.
func (w *Watcher) arm(rel string, fi fs.FileInfo) error {
	w.rootMu.Lock()
	defer w.rootMu.Unlock()
	if w.closed.Load() {
		return errWatcherClosed
	}
	if err := watch(filepath.Join(w.dir, filepath.FromSlash(rel)), w.c, watchEvents...); err != nil {
		return err
	}
	w.stats.arms.Add(1)
	w.watched[rel] = fi
	return nil
}

// armParent watches the root's parent too (not its subdirectories), for
// the events that name the root: its removal, a rename away and its coming
// back are then seen at once, not at the next rescan. Best effort: the
// rescan finds them anyway.
func (w *Watcher) armParent() {
	if w.parent {
		return
	}
	w.rootMu.Lock()
	defer w.rootMu.Unlock()
	if w.closed.Load() {
		return
	}
	if watch(filepath.Dir(w.dir), w.c, watchEvents...) == nil {
		w.stats.arms.Add(1)
		w.parent = true
	}
}

// unarmAll drops every watch. notify removes watches by channel only, and a
// watch of a directory that was replaced would not follow the path to its
// successor, so one vanished or replaced directory costs arming them all
// again; walks arm each directory before they list it.
func (w *Watcher) unarmAll() {
	w.rootMu.Lock()
	notify.Stop(w.c)
	w.rootMu.Unlock()
	clear(w.watched)
	w.parent = false
	w.armParent() // at once: the root's going and coming back are what it is for
	w.stats.rearms.Add(1)
	w.rearm = false
}

// listArmed lists dir with a watch armed on it first: whatever is made in
// it after its listing began raises an event. It notes a watched directory
// that was replaced (its watch went with the old one).
func (w *Watcher) listArmed(dir string) (*listing, error) {
	old, armed := w.watched[dir]
	armedNow := false
	if !armed {
		// Out of watches, or gone: a walk still finds its files, and
		// the next full walk tries again.
		armedNow = w.arm(dir, nil) == nil
		delete(w.watched, dir)
		delete(w.listings, dir) // a listing from before the watch is stale
	}
	l, err := w.list(dir)
	switch {
	case err != nil:
		if armed || armedNow {
			w.rearm = true // a watch of something no longer there
			delete(w.watched, dir)
		}
	case armedNow:
		w.watched[dir] = l.dir
	case armed && !os.SameFile(old, l.dir):
		w.rearm = true
	}
	return l, err
}
