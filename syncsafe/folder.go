package syncsafe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

var (
	// ErrNotRegular: the path is a symlink, directory, FIFO, socket or
	// device. Such an entry in the synced folder is never read.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file is larger than the caller's cap; nothing was read.
	ErrTooLarge = errors.New("file too large")
	// ErrNoMarker: the folder has no marker file. It may be unmounted, empty
	// or not yet synced; nothing in it may be read as "deleted".
	ErrNoMarker = errors.New("folder marker missing")
)

// MarkerName is the marker file at the folder root; MarkerContent its exact
// content.
const (
	MarkerName    = "bridge.folder"
	MarkerContent = "syncbridge folder v1\n"
)

// Folder is a synced folder opened through an os.Root: every access stays
// inside it whatever the folder contains ("..", absolute names and symlinks
// pointing out are refused by the OS-level root). Methods take relative,
// slash-separated paths. A Folder is safe for concurrent use.
type Folder struct {
	root    *os.Root
	rootDir *os.File // the same directory, for openat2 (resolve_linux.go); nil elsewhere
	path    string
	staging *stagingDir // nil: stage in the target directory

	// crossDev is set once a rename from the staging directory failed with
	// EXDEV; later publishes stage in the folder directly.
	crossDev atomic.Bool

	dirSyncs sync.Map // directory id → *dirSync (dirsync.go)

	onChange func(rels ...string) // nil: nobody listens (WithOnChange)
	heldMu   sync.Mutex
	held     []string // published WithoutDirSync, told with the next change

	// The in-folder temporaries this Folder's publishes are writing (by
	// directory identity and name, tempKey), which SweepTemps never
	// removes: whatever the clocks say of their times. A name is taken
	// before its file is made and given back once it is moved or removed;
	// SweepTemps looks and removes under the same lock.
	tempsMu sync.Mutex
	temps   map[tempKey]bool
}

// changed tells the WithOnChange listener about rel, and about the files
// held back for it.
func (f *Folder) changed(rel string) {
	if f.onChange == nil {
		return
	}
	f.heldMu.Lock()
	rels := append(f.held, rel)
	f.held = nil
	f.heldMu.Unlock()
	f.onChange(rels...)
}

// hold keeps rel, published WithoutDirSync, for the next change: the file
// published right after it (a request's manifest after its payload, a
// result's after its output) makes both durable, and one scan request for
// both lets a sync client that sends at most one index update per interval
// (Syncthing: 250 ms) send them together.
func (f *Folder) hold(rel string) {
	if f.onChange == nil {
		return
	}
	f.heldMu.Lock()
	f.held = append(f.held, rel)
	f.heldMu.Unlock()
}

// Entry is one directory entry as List reports it. Type is 0 for a
// regular file, fs.ModeDir for a directory and fs.ModeIrregular for
// anything else (a link, which is never followed, a FIFO, a device).
type Entry struct {
	Name string
	Type fs.FileMode
}

// FolderOption configures OpenFolder.
type FolderOption func(*folderConfig)

type folderConfig struct {
	staging  string
	onChange func(rels ...string)
}

// WithOnChange calls fn with the path of each file this Folder published or
// removed, once the change is in place: a sync client that scans on request
// (Syncthing's REST API) can be told at once. fn must return quickly.
func WithOnChange(fn func(rels ...string)) FolderOption {
	return func(c *folderConfig) { c.onChange = fn }
}

// WithStaging stages published files in dir, which must be outside the synced
// folder (no sync client sees a temp file there) and private to this user.
// It should be on the folder's filesystem; if it is not, Publish notices the
// EXDEV and stages in the folder instead. Ignored where the platform cannot
// rename relative to two directory handles (Windows).
func WithStaging(dir string) FolderOption {
	return func(c *folderConfig) { c.staging = dir }
}

// OpenFolder opens the synced folder at dir.
func OpenFolder(dir string, opts ...FolderOption) (*Folder, error) {
	var cfg folderConfig
	for _, o := range opts {
		o(&cfg)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open folder: %w", err)
	}
	f := &Folder{root: root, path: dir, rootDir: sameDir(root), onChange: cfg.onChange}
	if cfg.staging != "" {
		st, err := openStaging(cfg.staging)
		if err != nil {
			root.Close()
			return nil, fmt.Errorf("open staging dir: %w", err)
		}
		f.staging = st
	}
	return f, nil
}

// sameDir opens the directory root holds as a plain handle for openat2
// (resolve_linux.go): through the root, so it is that very directory (by
// its path again, a FIFO swapped in would block the open); nil if that
// fails.
func sameDir(root *os.Root) *os.File {
	d, err := root.Open(".")
	if err != nil {
		return nil
	}
	return d
}

// Path returns the directory the folder was opened at.
func (f *Folder) Path() string { return f.path }

// Close releases the folder's handles.
func (f *Folder) Close() error {
	err := f.root.Close()
	if f.rootDir != nil {
		f.rootDir.Close()
	}
	if f.staging != nil {
		if err2 := f.staging.close(); err == nil {
			err = err2
		}
	}
	return err
}

// cleanRel checks that rel is a local, slash-separated path ("." for the
// root). os.Root would refuse an escape anyway; this also refuses the odd
// spellings ("a//b", "a/./b", "\") that no path of ours uses.
func cleanRel(rel string) error {
	if !fs.ValidPath(rel) || strings.ContainsAny(rel, "\\\x00") {
		return fmt.Errorf("invalid path %q", rel)
	}
	return nil
}

// checkParents refuses a path whose parent components are not plain
// directories. os.Root resolves symlinks that stay inside the root; we do not
// follow them at all, so the peer cannot alias one of our paths to another.
func (f *Folder) checkParents(rel string) error {
	for i := 0; i < len(rel); i++ {
		if rel[i] != '/' {
			continue
		}
		fi, err := f.root.Lstat(rel[:i])
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s: parent %s: %w", rel, rel[:i], ErrNotRegular)
		}
	}
	return nil
}

// checkOurPath requires every component of rel to pass ValidName: the rule
// for every path we create or remove.
func checkOurPath(rel string) error {
	if err := cleanRel(rel); err != nil {
		return err
	}
	for _, c := range strings.Split(rel, "/") {
		if !ValidName(c) {
			return fmt.Errorf("invalid name %q in %q", c, rel)
		}
	}
	return nil
}

// Lstat describes rel without following a final symlink; parent components
// must be directories.
func (f *Folder) Lstat(rel string) (fs.FileInfo, error) {
	if err := cleanRel(rel); err != nil {
		return nil, fmt.Errorf("lstat: %w", err)
	}
	if fi, ok, err := f.fastLstat(rel); ok {
		if err != nil {
			return nil, fmt.Errorf("lstat %s: %w", rel, err)
		}
		return fi, nil
	}
	if err := f.checkParents(rel); err != nil {
		return nil, fmt.Errorf("lstat %s: %w", rel, err)
	}
	fi, err := f.root.Lstat(rel)
	if err != nil {
		return nil, fmt.Errorf("lstat %s: %w", rel, err)
	}
	return fi, nil
}

// openRegular is the one path by which folder files are opened for reading:
// Lstat (regular, size <= max, both before any open), open non-blocking (a
// FIFO swapped in after the Lstat cannot hang us), then fstat the open file
// and re-check type, size and identity.
func (f *Folder) openRegular(rel string, max int64) (*os.File, int64, error) {
	return f.openRegularFlag(rel, max, os.O_RDONLY)
}

// openRegularFlag is openRegular with the access flag given (os.O_RDONLY or
// os.O_RDWR; never O_CREATE: the file must be there).
func (f *Folder) openRegularFlag(rel string, max int64, flag int) (*os.File, int64, error) {
	fi, err := f.Lstat(rel)
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("open %s: %v: %w", rel, fi.Mode().Type(), ErrNotRegular)
	}
	if fi.Size() > max {
		return nil, 0, fmt.Errorf("open %s: %d bytes, cap %d: %w", rel, fi.Size(), max, ErrTooLarge)
	}
	file, err := f.openFile(rel, flag|openReadFlags)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", rel, err)
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, 0, fmt.Errorf("open %s: %w", rel, err)
	}
	switch {
	case !st.Mode().IsRegular():
		err = fmt.Errorf("open %s: %v: %w", rel, st.Mode().Type(), ErrNotRegular)
	case !os.SameFile(fi, st):
		// Replaced between Lstat and open (a sync client's rename, or a
		// symlink swapped in): transient, the next scan tries again.
		err = fmt.Errorf("open %s: %w", rel, ErrReplaced)
	case st.Size() > max:
		err = fmt.Errorf("open %s: %d bytes, cap %d: %w", rel, st.Size(), max, ErrTooLarge)
	}
	if err != nil {
		file.Close()
		return nil, 0, err
	}
	return file, st.Size(), nil
}

// openFile opens rel after its parents were checked (by Lstat): by openat2
// where it can, else through the root. Callers compare the result with what
// Lstat saw.
func (f *Folder) openFile(rel string, flags int) (*os.File, error) {
	if file, ok, err := f.fastOpen(rel, flags); ok {
		return file, err
	}
	return f.root.OpenFile(rel, flags, 0)
}

// ReadFile reads the regular file rel if it holds at most max bytes. The size
// is checked before anything is read, and at most max+1 bytes are ever read,
// so a file growing meanwhile still ends in ErrTooLarge.
func (f *Folder) ReadFile(rel string, max int64) ([]byte, error) {
	file, size, err := f.openRegular(rel, max)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var buf bytes.Buffer
	buf.Grow(int(size))
	if _, err := io.Copy(&buf, io.LimitReader(file, max+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, err)
	}
	if int64(buf.Len()) > max {
		return nil, fmt.Errorf("read %s: grew past cap %d: %w", rel, max, ErrTooLarge)
	}
	return buf.Bytes(), nil
}

// Open opens the regular file rel for reading, with the checks of ReadFile,
// and returns it with its size at open time. The caller must not read more
// than that size as meaningful content (the file may still grow).
func (f *Folder) Open(rel string, max int64) (*os.File, int64, error) {
	return f.openRegular(rel, max)
}

// List returns the names and types of the entries of dir, sorted by name;
// a link is never followed (its type is fs.ModeIrregular). The types come
// from the directory listing itself (getdents), so a directory of n entries
// costs no n lstats; where the file system does not say, the entry is
// looked up relative to the open directory.
func (f *Folder) List(dir string) ([]Entry, error) { return f.ListFunc(dir, nil) }

// ListFunc is List of the entries whose name keep accepts (all if keep is
// nil). A caller after a few names in a directory of 200,000 (the rotation
// statements beside every request an agent sent) pays for the listing, not
// for sorting and keeping all of it.
func (f *Folder) ListFunc(dir string, keep func(name string) bool) ([]Entry, error) {
	if err := cleanRel(dir); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	if dir != "." {
		fi, err := f.Lstat(dir)
		if err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("list %s: not a directory", dir)
		}
	}
	// openat2's directory gives types from getdents alone; one opened
	// through the root would lstat every entry.
	d, ok, err := openDirFast(f.rootDir, dir)
	if !ok {
		d, err = openDirIn(f.root, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	defer d.Close()
	// By getdents (scanDir), no DirEntry per name: the daemon's start
	// lists an agent's request directory, 200,000 names beside 100,000
	// finished requests, for the few rotation statements among them, and
	// os.ReadDir's DirEntry and name per entry (two allocations; now one,
	// the string keep is given) were most of such a listing's cost.
	var out []Entry
	buf := make([]byte, direntBuf)
	err = scanDir(d, dir, &buf, func(name []byte, kind entryKind) {
		if keep != nil && !keep(string(name)) {
			return
		}
		t := fs.ModeIrregular
		switch kind {
		case entryFile:
			t = 0
		case entryDir:
			t = fs.ModeDir
		}
		out = append(out, Entry{Name: string(name), Type: t})
	})
	if err != nil {
		return nil, fmt.Errorf("list: %w", err) // scanDir's errors name dir
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// MkdirAll creates dir and its parents (mode 0700); every component must pass
// ValidName. Existing components must be directories, not links.
func (f *Folder) MkdirAll(dir string) error {
	if err := checkOurPath(dir); err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	if err := f.checkParents(dir + "/"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	if err := f.root.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	if err := f.checkParents(dir + "/"); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	// Make the new entries durable: fsync each directory that gained one.
	for p := dir; ; p = path.Dir(p) {
		syncDirRel(f.root, path.Dir(p))
		if path.Dir(p) == "." {
			break
		}
	}
	return nil
}

// Remove removes the file rel. It is only ever used on our own files, so
// every component must pass ValidName.
func (f *Folder) Remove(rel string) error {
	if err := checkOurPath(rel); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if err := f.checkParents(rel); err != nil {
		return fmt.Errorf("remove %s: %w", rel, err)
	}
	if err := f.root.Remove(rel); err != nil {
		return fmt.Errorf("remove %s: %w", rel, err)
	}
	f.changed(rel)
	return nil
}

// RemoveAll removes rel and, if it is a directory, everything in it,
// without following a link (the root refuses to leave the folder). It is
// for the names one side owns, when someone else planted a directory
// there: every component must pass ValidName.
func (f *Folder) RemoveAll(rel string) error {
	if err := checkOurPath(rel); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	if err := f.checkParents(rel); err != nil {
		return fmt.Errorf("remove %s: %w", rel, err)
	}
	err := f.root.RemoveAll(rel)
	if errors.Is(err, fs.ErrPermission) {
		// A directory without write permission for us (a sync client
		// copies mode bits from the device that made it): give the owner
		// its rights back, then try again. Only real directories are
		// changed, never what a link points to.
		if dir := path.Dir(rel); dir != "." {
			f.root.Chmod(dir, 0o700) // our own: checkParents found a directory
		}
		if fi, lerr := f.root.Lstat(rel); lerr == nil && fi.IsDir() {
			fs.WalkDir(f.root.FS(), rel, func(p string, d fs.DirEntry, err error) error {
				if d != nil && d.IsDir() {
					f.root.Chmod(p, 0o700)
				}
				return nil
			})
		}
		err = f.root.RemoveAll(rel)
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", rel, err)
	}
	f.changed(rel)
	return nil
}

// openDirIn opens the directory dir of root, refusing at once whatever
// else stands at its name (openDirFlags), a link too: the root would follow
// one that stays inside it, whatever the flags say.
func openDirIn(root *os.Root, dir string) (*os.File, error) {
	fi, err := root.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: syscall.ENOTDIR}
	}
	d, err := root.OpenFile(dir, os.O_RDONLY|openDirFlags, 0)
	if err != nil {
		return nil, err
	}
	if st, err := d.Stat(); err != nil || !os.SameFile(fi, st) {
		d.Close()
		return nil, fmt.Errorf("open %s: replaced while opening", dir)
	}
	return d, nil
}

// syncDirRel fsyncs a directory of the root, best effort: some platforms
// (Windows) cannot fsync a directory, and the entry is in place either way.
func syncDirRel(root *os.Root, dir string) {
	d, err := openDirIn(root, dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	d.Close()
}

// CheckMarker verifies the marker file at the folder root: ErrNoMarker when
// it is missing or holds only a beginning of its content (still being
// copied), an error naming the content when it is not ours.
func CheckMarker(f *Folder) error {
	b, err := f.ReadFile(MarkerName, 256)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("check folder %s: %w (not initialised, not mounted or not yet synced)", f.path, ErrNoMarker)
	}
	if err != nil {
		return fmt.Errorf("check folder %s: %w", f.path, err)
	}
	if partialMarker(b) {
		// A sync client that writes in place (rclone before 1.63) or
		// sizes the file first has not finished copying it. Not yet
		// synced, not another program's folder.
		return fmt.Errorf("check folder %s: %w: %s holds %d of its %d bytes (a sync client may still be copying it)",
			f.path, ErrNoMarker, MarkerName, len(bytes.TrimRight(b, "\x00")), len(MarkerContent))
	}
	if string(b) != MarkerContent {
		return fmt.Errorf("check folder %s: marker %s holds %q, want %q (another program's folder or another bridge version)",
			f.path, MarkerName, truncate(b, 64), MarkerContent)
	}
	return nil
}

// partialMarker reports whether b is the marker's content being copied in
// place: no longer than it, and a proper prefix of it followed only by
// zero bytes (SPEC §5, "Marker").
func partialMarker(b []byte) bool {
	if len(b) > len(MarkerContent) {
		return false
	}
	head := bytes.TrimRight(b, "\x00")
	return len(head) < len(MarkerContent) && strings.HasPrefix(MarkerContent, string(head))
}

// WriteMarker publishes the marker file. An existing correct marker is left
// alone; an existing wrong one is an error and is not replaced.
func WriteMarker(f *Folder) error {
	err := f.Publish(MarkerName, func(w io.Writer) error {
		_, err := io.WriteString(w, MarkerContent)
		return err
	}, WithMode(0o644))
	if errors.Is(err, ErrExists) {
		return CheckMarker(f)
	}
	return err
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
