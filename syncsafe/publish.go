package syncsafe

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// ErrExists: Publish found a file at the final name and left it untouched.
var ErrExists = errors.New("file already exists")

// PublishOption configures Publish and PublishReplace.
type PublishOption func(*publishConfig)

type publishConfig struct {
	mode      fs.FileMode
	noDirSync bool
	noSync    bool
}

// WithoutDirSync leaves out the final fsync of the directory, for a file
// that is only needed together with one published right after it into the
// same directory: that publish's directory fsync makes both entries
// durable. The file's content is fsynced as always. A request's payload
// before its manifest, a result's output before its manifest.
func WithoutDirSync() PublishOption {
	return func(c *publishConfig) { c.noDirSync = true }
}

// WithoutSync leaves out both fsyncs, the temp's and the directory's, for a
// file whose bytes a durable private copy already holds, from which it is
// published again should a power cut lose or tear it (the host's result
// pair: DESIGN §4, SPEC §5). The sync client sees it at once all the same;
// a reader must take a torn file for one still arriving. With
// WithoutDirSync too, the change is held for the next publish, as there.
func WithoutSync() PublishOption {
	return func(c *publishConfig) { c.noSync = true }
}

// WithMode sets the permission bits of the published file (default 0600).
// The temp is always created 0600 and changed only just before the rename.
func WithMode(mode fs.FileMode) PublishOption {
	return func(c *publishConfig) { c.mode = mode.Perm() }
}

// Publish writes a new file at rel atomically: the content goes to a temp
// file (mode 0600, O_EXCL) in the staging directory or, without one, as
// "~$<name>.tmp" next to the target; it is fsynced and closed, moved to rel
// without ever replacing an existing entry (ErrExists), and the directory is
// fsynced. Every component of rel must pass ValidName; the parent directory
// must exist. The temp is removed on every error path. write gets a plain
// io.Writer and must not retain it.
//
// An error returned after the move (the directory fsync) means the file may
// be in place; a retry then reports ErrExists.
func (f *Folder) Publish(rel string, write func(w io.Writer) error, opts ...PublishOption) error {
	return f.publish("publish", rel, write, false, opts)
}

// PublishReplace is Publish for a file that this side alone owns and
// replaces wholesale (its bundle, its status file): the move may replace an
// existing file, so readers see either the old or the new content, never a
// mix.
func (f *Folder) PublishReplace(rel string, write func(w io.Writer) error, opts ...PublishOption) error {
	return f.publish("publish (replace)", rel, write, true, opts)
}

func (f *Folder) publish(op, rel string, write func(io.Writer) error, replace bool, opts []PublishOption) (err error) {
	cfg := publishConfig{mode: 0o600}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkOurPath(rel); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	dir, name := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	// openDirH refuses a parent that is not a plain directory.
	dst, err := f.openDirH(dir)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, rel, err)
	}
	defer dst.close()
	if !replace {
		// Cheap early refusal; the no-replace move below is the real check.
		if err := dst.lstat(name); err == nil {
			return fmt.Errorf("%s %s: %w", op, rel, ErrExists)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s %s: %w", op, rel, err)
		}
	}

	var file *os.File
	src, tmp, staged := dst, "", false
	if f.staging != nil && !f.crossDev.Load() {
		src, tmp, staged = f.staging.h, stagingTempName(name), true
		file, err = src.create(tmp)
	} else {
		tmp, file, err = f.createFolderTemp(dst, dir, name)
	}
	if err != nil {
		return fmt.Errorf("%s %s: create temp: %w%s", op, rel, err, tempHint(err))
	}
	moved := false
	defer func() {
		if !moved {
			_ = src.remove(tmp)
		}
		if !staged {
			f.tempDone(tempKeyOf(dst, dir, tmp))
		}
	}()
	if err := writeTemp(file, write, cfg.mode, !cfg.noSync); err != nil {
		return fmt.Errorf("%s %s: %w", op, rel, err)
	}
	err = retryTransient(func() error { return place(src, tmp, dst, name, replace) })
	if err == nil {
		moved = true
	} else if staged && isCrossDevice(err) {
		// The staging dir is on another filesystem: remember, and move the
		// staged bytes into an in-folder temp instead.
		f.crossDev.Store(true)
		err = f.publishCopy(src, tmp, dst, dir, name, replace, cfg)
	}
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s %s: %w", op, rel, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, rel, err)
	}
	if cfg.noDirSync {
		f.hold(rel)
		return nil
	}
	// In place: the sync client may send it now, even while the directory
	// entry is made durable below.
	f.changed(rel)
	if cfg.noSync {
		return nil
	}
	if err := f.syncDir(dst); err != nil {
		return fmt.Errorf("%s %s: sync directory: %w", op, rel, err)
	}
	return nil
}

// publishCopy copies the staged temp into an in-folder temp and moves that
// into place.
func (f *Folder) publishCopy(src dirH, staged string, dst dirH, dir, name string, replace bool, cfg publishConfig) error {
	in, err := src.open(staged)
	if err != nil {
		return fmt.Errorf("reopen staged temp: %w", err)
	}
	defer in.Close()
	tmp, out, err := f.createFolderTemp(dst, dir, name)
	if err != nil {
		return fmt.Errorf("create temp: %w%s", err, tempHint(err))
	}
	moved := false
	defer func() {
		if !moved {
			_ = dst.remove(tmp)
		}
		f.tempDone(tempKeyOf(dst, dir, tmp))
	}()
	if err := writeTemp(out, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}, cfg.mode, !cfg.noSync); err != nil {
		return err
	}
	if err := retryTransient(func() error { return place(dst, tmp, dst, name, replace) }); err != nil {
		return err
	}
	moved = true
	return nil
}

// writerOnly hides the *os.File (and bufio.Writer) from write: it cannot
// seek, close or sync behind our back.
type writerOnly struct{ w io.Writer }

func (w writerOnly) Write(p []byte) (int, error) { return w.w.Write(p) }

// tempWriters are writeTemp's buffers: most files published are a few
// hundred bytes, and a fresh 64 KiB buffer each was a collection every few
// requests for a daemon.
var tempWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// writeTemp runs write into file, then flushes, sets mode, fsyncs (if sync)
// and closes.
func writeTemp(file *os.File, write func(io.Writer) error, mode fs.FileMode, sync bool) error {
	defer file.Close() // no-op after the explicit Close below
	bw := tempWriters.Get().(*bufio.Writer)
	bw.Reset(file)
	defer func() {
		bw.Reset(nil)
		tempWriters.Put(bw)
	}()
	if err := write(writerOnly{bw}); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if mode != 0o600 {
		if err := file.Chmod(mode); err != nil {
			return fmt.Errorf("chmod temp: %w", err)
		}
	}
	if sync {
		if err := file.Sync(); err != nil {
			return fmt.Errorf("sync temp: %w", err)
		}
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("close temp: %w", err)
	}
	return nil
}

// folderTempName is the in-folder staging name. "~$" and ".tmp" are skipped
// by OneDrive, iCloud, Nextcloud and Dropbox (sync-clients.md §5); one that
// does sync fails the peer's allowlist. The fixed name (no random part) lets
// Classify name the original; O_EXCL makes a concurrent publisher of the
// same name fail instead of sharing the temp.
func folderTempName(name string) string { return "~$" + name + ".tmp" }

// createFolderTemp creates the in-folder temp for name in dst (the
// directory dir), at its fixed name or, if something stands there, at a
// unique one: another publisher of the same name (O_EXCL is there to make
// it fail, not us wait), a crash's leftover, or a directory or file a
// folder writer planted to block the publish. Either way the unique name
// goes around it, and SweepTemps knows it as ours. The temp's path is
// taken before the file is made, so SweepTemps never removes it while it
// is written: the caller gives it back with tempDone once the temp is
// moved or removed.
func (f *Folder) createFolderTemp(dst dirH, dir, name string) (string, *os.File, error) {
	tmp := folderTempName(name)
	if f.tempTake(tempKeyOf(dst, dir, tmp)) {
		file, err := dst.create(tmp)
		if err == nil {
			return tmp, file, nil
		}
		f.tempDone(tempKeyOf(dst, dir, tmp)) // taken for nothing: not made
		if !errors.Is(err, fs.ErrExist) {
			return "", nil, err
		}
	}
	// Something stands at the fixed name, or a publish of ours is writing
	// it (its name stays its own).
	tmp = stagingTempName(name)
	f.tempTake(tempKeyOf(dst, dir, tmp))
	file, err := dst.create(tmp)
	if err != nil {
		f.tempDone(tempKeyOf(dst, dir, tmp))
		return "", nil, err
	}
	return tmp, file, nil
}

// tempKey names an in-folder temp by its directory's identity where the
// system gives one (device and inode), not by path: a folder writer who
// renames one agent's directory to another's path cannot make a temp
// being written look like a leftover of the directory now at that path.
type tempKey struct {
	dir  any
	name string
}

func tempKeyOf(h dirH, dir, name string) tempKey {
	if id, ok := h.syncID(); ok {
		return tempKey{id, name}
	}
	return tempKey{dir, name}
}

// tempTake takes rel for a publish about to make its temp there, and
// reports whether it was free: only a publish that took it gives it back.
func (f *Folder) tempTake(k tempKey) bool {
	f.tempsMu.Lock()
	defer f.tempsMu.Unlock()
	if f.temps[k] {
		return false
	}
	if f.temps == nil {
		f.temps = map[tempKey]bool{}
	}
	f.temps[k] = true
	return true
}

func (f *Folder) tempDone(k tempKey) {
	f.tempsMu.Lock()
	defer f.tempsMu.Unlock()
	delete(f.temps, k)
}

// stagingTempName is unique: one staging directory serves every target
// directory and may be shared by several processes.
func stagingTempName(name string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("bridge: internal error: " + err.Error())
	}
	return "~$" + name + "." + hex.EncodeToString(b[:]) + ".tmp"
}

// tempHint explains an existing temp: it is not ErrExists (the final name
// may well be free).
func tempHint(err error) string {
	if errors.Is(err, fs.ErrExist) {
		return " (another publisher of this name, or a crash leftover that SweepTemps removes)"
	}
	return ""
}

func isOurTemp(name string) bool {
	return strings.HasPrefix(name, "~$") && strings.HasSuffix(name, ".tmp") && len(name) > len("~$.tmp")
}

// retryTransient retries op while it fails with an error the OS reports for
// a busy file (a sync client, indexer or virus scanner holding it open; on
// Windows a sharing violation). A fresh backoff per call: instances are not
// goroutine-safe. Other errors stop at once.
func retryTransient(op func() error) error {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(10*time.Millisecond),
		backoff.WithMaxInterval(250*time.Millisecond),
		backoff.WithMaxElapsedTime(2*time.Second),
	)
	return backoff.Retry(func() error {
		err := op()
		if err != nil && !isTransient(err) {
			return backoff.Permanent(err)
		}
		return err
	}, b)
}

// SweepTemps removes our own leftover "~$*.tmp" temps in dir that were last
// modified more than olderThan ago, and returns how many it removed. A temp
// a publish of this Folder is writing is never removed, whatever its time;
// the age guard is for another process publishing right now (0 removes all
// the others). Only regular files are touched, through a handle on dir
// that refuses a link (as publishes reach it); one that cannot be removed
// is passed over, the first such error returned at the end.
func (f *Folder) SweepTemps(dir string, olderThan time.Duration) (int, error) {
	ents, err := f.ListFunc(dir, isOurTemp)
	if err != nil {
		return 0, fmt.Errorf("sweep temps: %w", err)
	}
	if len(ents) == 0 {
		return 0, nil
	}
	h, err := f.openDirH(dir)
	if err != nil {
		return 0, fmt.Errorf("sweep temps: %w", err)
	}
	defer h.close()
	n := 0
	var first error
	for _, e := range ents {
		if e.Type != 0 || !isOurTemp(e.Name) {
			continue
		}
		removed, err := f.sweepTemp(h, dir, e.Name, olderThan)
		if err != nil && first == nil {
			first = fmt.Errorf("sweep temps: %w", err)
		}
		if removed {
			n++
		}
	}
	return n, first
}

// sweepTemp removes the temp name in h (the directory dir) unless a publish
// of f is writing it (under the lock publishes take its name with: none can
// take it in between).
func (f *Folder) sweepTemp(h dirH, dir, name string, olderThan time.Duration) (bool, error) {
	f.tempsMu.Lock()
	defer f.tempsMu.Unlock()
	if f.temps[tempKeyOf(h, dir, name)] {
		return false, nil
	}
	regular, mtime, err := h.regularSince(name)
	if err != nil || !regular || time.Since(mtime) < olderThan {
		return false, nil
	}
	if err := h.remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// SweepStaging is SweepTemps for the staging directory (a no-op without one).
func (f *Folder) SweepStaging(olderThan time.Duration) (int, error) {
	if f.staging == nil {
		return 0, nil
	}
	ents, err := os.ReadDir(f.staging.path)
	if err != nil {
		return 0, fmt.Errorf("sweep staging: %w", err)
	}
	n := 0
	var first error // passed over, as SweepTemps does, and returned at the end
	for _, e := range ents {
		if !e.Type().IsRegular() || !isOurTemp(e.Name()) {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < olderThan {
			continue
		}
		if err := os.Remove(filepath.Join(f.staging.path, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			if first == nil {
				first = fmt.Errorf("sweep staging: %w", err)
			}
			continue
		}
		n++
	}
	return n, first
}
