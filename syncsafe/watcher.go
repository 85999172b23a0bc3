package syncsafe

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rjeczalik/notify"
)

// WatchOptions configures NewWatcher. Zero fields take the defaults.
type WatchOptions struct {
	// Rescan is the interval between full walks (default 30s). The walk is
	// the truth; events only make changes show up sooner.
	Rescan time.Duration
	// Debounce is the quiet time collected before an event batch is
	// emitted (default 50ms); a steady stream is cut at 10 × Debounce.
	// Negative: no wait, a batch is emitted as soon as an event is there.
	// A caller that works between calls of Next still gets batches: what
	// arrived meanwhile comes in one. The bridge uses that, because every
	// millisecond of quiet waited for is a millisecond of round trip.
	Debounce time.Duration
	// Buffer is the capacity of the event channel (default 16384). notify
	// drops events when it is full; more than half full when read makes the
	// watcher assume drops and walk everything.
	Buffer int
	// Skip, if set, leaves out a path (dirs are not descended) from walks and
	// event batches.
	Skip func(rel string, isDir bool) bool
	// EventsFirst skips the Full batch the first Next would return: the
	// first batch is of events (or the first Rescan's walk). For a caller
	// that has just looked for what it wants itself, and for whom a walk
	// of a large tree would only add latency.
	EventsFirst bool

	// drainGate, for tests: the drain goroutine waits for a receive on it
	// before it starts, so the channel fills and notify really drops.
	drainGate chan struct{}
}

// Batch is what Next returns: slash-separated paths, relative to the root,
// of regular files that may have changed. Removals are not reported; a Full
// batch lists every regular file found by a complete walk, so a file absent
// from it was absent at that moment.
type Batch struct {
	Paths []string
	Full  bool
	// Irregular, in a Full batch, lists what the walk met that is neither a
	// regular file nor a directory it walked: symlinks, FIFOs, sockets,
	// devices, and directories that Skip left out. A caller that must
	// refuse such entries by name need not list the tree again.
	Irregular []string
	// Replaced, in a Full batch, says that the root directory was found
	// replaced by another one since the batch before (a sync client
	// applying a remote rename, or a restore): the watcher now watches,
	// and this batch lists, the new one.
	Replaced bool
	// Same, in a Full batch, says that the walk listed the directories the
	// Full batch before listed, each with the same entries (names and
	// kinds), so that Paths and Irregular are that batch's very slices,
	// not built again: a caller may keep what it learnt from that batch.
	// It assumes Skip answers the same for a file while its directory is
	// unchanged (directories are asked at every walk). Neither slice may
	// be changed by the caller. A file written over in place leaves its
	// directory's entries as they were, as it leaves the batch's paths.
	Same bool
}

// ErrRootGone is returned by Next when the watched directory is missing, or
// is no longer a directory reached without a link. Nothing is lost: the
// watcher looks again every few seconds (at most every Rescan) and goes on
// with a Full batch of the directory it then finds.
var ErrRootGone = errors.New("watched directory is gone")

// Watcher turns notify events plus periodic full walks into batches.
// See NewWatcher.
type Watcher struct {
	rootMu sync.Mutex // guards root and rootD against Close; Next's goroutine alone replaces them
	nextMu sync.Mutex // held by Next: Close releases the root only once no walk uses it
	root   *os.Root
	rootD  *os.File    // the same directory, for openDirFast; nil if not the same
	rootFI fs.FileInfo // the directory root holds, to notice it being replaced
	dir    string      // canonical absolute root, as notify reports paths
	base   *Folder     // if set, the root is base's baseRel, reached without a link
	bRel   string
	opt    WatchOptions
	c      chan notify.EventInfo
	poke   chan struct{} // cap 1: "the set has something"
	done   chan struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
	once   sync.Once

	mu       sync.Mutex
	pending  map[string]bool // rel path → known to be a directory
	needFull bool            // events were lost: walk, reading every directory again
	needWalk bool            // watches were re-armed: walk (listings of unchanged directories hold)
	maxSet   int

	// Only Next touches these.
	started  bool
	rescan   *time.Timer
	listings map[string]*listing    // by directory, from the last full walk
	visited  map[string]bool        // directories the current full walk listed
	watched  map[string]fs.FileInfo // directories with a watch armed, as they were then
	parent   bool                   // the root's parent has a watch armed
	rearm    bool                   // a watched directory vanished or was replaced
	gone     bool                   // the last look found the root gone
	lastLen  int                    // files the last full walk reported: the next one's capacity
	last     *lastWalk              // the last full walk's batch and what it listed (nil: the next is not Same)
	dirent   []byte                 // the buffer directories are read into (scanDir)
	chunk    [4096]byte             // names gathered for the digest between writes

	stats watchStats
}

// watchStats are counters for tests and diagnostics.
type watchStats struct {
	events         atomic.Int64 // events received
	nearFull       atomic.Int64 // reads that found the channel more than half full
	setOverflow    atomic.Int64 // pending set outgrew its bound
	fullWalks      atomic.Int64 // full walks done
	sameWalks      atomic.Int64 // of which found every directory as the one before (Batch.Same)
	reusedLists    atomic.Int64 // directory listings a full walk took from the one before
	confirmedLists atomic.Int64 // listings a full walk read again and kept: the directory held the same entries
	timerWalks     atomic.Int64 // of which for the Rescan timer
	lossWalks      atomic.Int64 // of which for suspected loss
	subdirWalks    atomic.Int64 // walks of a directory seen in an event
	arms           atomic.Int64 // directory watches armed
	rearms         atomic.Int64 // times every watch was dropped and armed again
	eventBatches   atomic.Int64
	eventPathsOut  atomic.Int64
}

// NewWatcher watches the tree at root recursively. The first Next returns a
// Full batch. Only the directories a walk descends into (see
// WatchOptions.Skip) are watched, one kernel watch each (on Linux): a
// directory Skip leaves out costs nothing however many are made. Files in
// a brand-new directory are found by walking it, or at the latest by the
// next rescan.
func NewWatcher(root string, opt WatchOptions) (*Watcher, error) {
	abs, err := filepath.Abs(root)
	if err == nil {
		// notify reports canonical paths (e.g. /private/var on macOS).
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	return openWatcher(abs, nil, "", opt)
}

func openWatcher(abs string, base *Folder, bRel string, opt WatchOptions) (*Watcher, error) {
	if opt.Rescan <= 0 {
		opt.Rescan = 30 * time.Second
	}
	if opt.Debounce == 0 {
		opt.Debounce = 50 * time.Millisecond
	}
	if opt.Buffer <= 0 {
		opt.Buffer = 16384
	}
	w := &Watcher{
		dir:     abs,
		base:    base,
		bRel:    bRel,
		opt:     opt,
		c:       make(chan notify.EventInfo, opt.Buffer),
		poke:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		pending: make(map[string]bool),
		maxSet:  max(4*opt.Buffer, 4096),
		watched: make(map[string]fs.FileInfo),
	}
	r, rootD, fi, err := w.openRoot()
	if err == nil {
		w.root, w.rootD, w.rootFI = r, rootD, fi
		// The root at once: an EventsFirst caller may never walk. (Armed
		// by name: it fails if the directory is moved away meanwhile.)
		if err = w.arm(".", fi); err != nil {
			w.closeRoot()
			w.root, w.rootD, w.rootFI = nil, nil, nil
		}
	}
	if err != nil {
		if base == nil {
			return nil, fmt.Errorf("watch %s: %w", abs, err)
		}
		// A directory of the folder that is not there, or not a directory,
		// as the watcher starts: what a folder writer can do at any time
		// later too, where it costs the caller ErrRootGone from Next until
		// the directory is back. Starting is no different: a writer who
		// swaps a FIFO in as the daemon starts must not stop it.
		w.gone, w.needFull = true, true
	}
	w.armParent()
	w.wg.Add(1)
	go w.drain()
	return w, nil
}

// drain only moves paths from the channel into the set and pokes Next: no
// I/O, so the channel empties as fast as possible.
func (w *Watcher) drain() {
	defer w.wg.Done()
	if w.opt.drainGate != nil {
		select {
		case <-w.opt.drainGate:
		case <-w.done:
			return
		}
	}
	for {
		select {
		case <-w.done:
			return
		case ei := <-w.c:
			w.stats.events.Add(1)
			full := len(w.c) > cap(w.c)/2
			isDir, loss := eventKind(ei)
			rel, ok := w.rel(ei.Path())
			w.mu.Lock()
			switch {
			case full:
				w.stats.nearFull.Add(1)
				w.needFull = true
			case loss || rel == "." || !ok && ei.Path() == filepath.Dir(w.dir):
				// The OS says it lost track, or the root itself (seen
				// from its own watch or its parent's) changed.
				w.needFull = true
			case !ok:
				// Another entry of the root's parent: not ours.
			case len(w.pending) >= w.maxSet:
				// Bound memory for a slow consumer: a walk finds it all.
				w.stats.setOverflow.Add(1)
				w.needFull = true
				clear(w.pending)
			default:
				w.pending[rel] = w.pending[rel] || isDir
			}
			w.mu.Unlock()
			select {
			case w.poke <- struct{}{}:
			default:
			}
		}
	}
}

func (w *Watcher) rel(p string) (string, bool) {
	r, err := filepath.Rel(w.dir, p)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", false
	}
	return filepath.ToSlash(r), true
}

// errWatcherClosed is returned by Next after Close.
var errWatcherClosed = fmt.Errorf("watcher closed: %w", fs.ErrClosed)

// Next blocks until there is something to report and returns it: a Full
// batch first, then event batches, with a Full batch every Rescan and
// whenever events may have been lost. It is not safe for concurrent use. A
// slow caller gets bigger batches; nothing is lost. An event batch leaves out
// temp and litter names (Classify); a Full batch lists every regular file.
// Cancelling ctx keeps everything pending for the next call.
func (w *Watcher) Next(ctx context.Context) (Batch, error) {
	w.nextMu.Lock()
	defer w.nextMu.Unlock()
	if !w.started {
		w.started = true
		w.rescan = time.NewTimer(w.opt.Rescan)
		if !w.opt.EventsFirst {
			return w.fullWalk()
		}
	}
	for {
		if w.closed.Load() {
			return Batch{}, errWatcherClosed
		}
		// With work always pending (a steady stream of events), nothing
		// below would look at ctx: a stop must not wait for a quiet moment.
		if err := ctx.Err(); err != nil {
			return Batch{}, err
		}
		// A steady stream of events must not postpone the rescan forever.
		select {
		case <-w.rescan.C:
			w.stats.timerWalks.Add(1)
			return w.fullWalk()
		default:
		}
		if !w.hasWork() {
			select {
			case <-ctx.Done():
				return Batch{}, ctx.Err()
			case <-w.done:
				return Batch{}, errWatcherClosed
			case <-w.rescan.C:
				w.stats.timerWalks.Add(1)
				return w.fullWalk()
			case <-w.poke:
			}
		}
		if err := w.debounce(ctx); err != nil {
			return Batch{}, err
		}
		w.mu.Lock()
		full, walk := w.needFull, w.needWalk
		pend := w.pending
		w.needFull, w.needWalk = false, false
		w.pending = make(map[string]bool)
		w.mu.Unlock()
		if full {
			w.stats.lossWalks.Add(1)
			// Events were lost: read every directory, trusting no listing.
			clear(w.listings)
			return w.fullWalk()
		}
		if walk || w.root == nil { // nil: never opened yet
			return w.fullWalk()
		}
		b, err := w.eventBatch(pend)
		if err != nil {
			return Batch{}, err
		}
		if w.rearm {
			// A watched directory vanished or was replaced: its watch is
			// of no use, and whatever replaced it is not watched yet.
			w.unarmAll()
			return w.fullWalk()
		}
		if len(b.Paths) > 0 {
			w.stats.eventBatches.Add(1)
			w.stats.eventPathsOut.Add(int64(len(b.Paths)))
			return b, nil
		}
	}
}

// Walk asks for a full walk as the next batch, as the rescan timer would:
// for a caller whose notion of what the files mean changed (the host
// trusts a new agent, whose requests came in before and were ignored).
func (w *Watcher) Walk() {
	w.mu.Lock()
	w.needWalk = true
	w.mu.Unlock()
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

func (w *Watcher) hasWork() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.needFull || w.needWalk || len(w.pending) > 0
}

// debounce waits until no event arrived for Debounce, at most 10 × Debounce.
func (w *Watcher) debounce(ctx context.Context) error {
	if w.opt.Debounce < 0 {
		return nil
	}
	deadline := time.Now().Add(10 * w.opt.Debounce)
	t := time.NewTimer(w.opt.Debounce)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.done:
			return errWatcherClosed
		case <-t.C:
			return nil
		case <-w.poke:
			d := min(w.opt.Debounce, time.Until(deadline))
			if d <= 0 {
				return nil
			}
			t.Reset(d)
		}
	}
}

// fullWalk lists every regular file and restarts the rescan timer. Paths
// queued by events so far are covered by it; events arriving during the walk
// stay queued. It first makes sure the root is still the directory at its
// path: one that is gone is ErrRootGone, looked for again soon.
func (w *Watcher) fullWalk() (Batch, error) {
	w.mu.Lock()
	w.needFull, w.needWalk = false, false
	clear(w.pending)
	w.mu.Unlock()
	w.stats.fullWalks.Add(1)
	w.armParent()
	had := w.rootFI != nil // nil: never opened (Folder.Watch started without it)
	replaced, err := w.checkRoot()
	if err != nil {
		return Batch{}, w.lost(err)
	}
	replaced = had && (replaced || w.gone)
	// Sized as the last walk was: grown by appends, a batch of 20,000
	// paths allocated 1.5 MB per idle rescan beside 10,000 finished
	// requests, five times the batch itself, and brought on a collection
	// every rescan or two (issue 25).
	var ls []walked
	var irregular []string
	w.visited = map[string]bool{}
	err = w.walkDirs(".", &ls, &irregular)
	for dir := range w.listings {
		if !w.visited[dir] {
			delete(w.listings, dir) // gone, skipped, or unreadable
		}
	}
	for dir := range w.watched {
		if !w.visited[dir] {
			w.rearm = true // gone, or skipped now
		}
	}
	w.visited = nil
	if err != nil {
		if _, cerr := w.checkRoot(); cerr != nil {
			err = cerr
		}
		w.last = nil // listings were read that no batch reported
		return Batch{}, w.lost(err)
	}
	w.gone = false
	if w.rearm {
		// Arm afresh by the next walk; this one's listing stands, and
		// the next one reuses what did not change.
		w.unarmAll()
		w.mu.Lock()
		w.needWalk = true
		w.mu.Unlock()
		select {
		case w.poke <- struct{}{}:
		default:
		}
	}
	w.rescan.Reset(w.opt.Rescan)
	if w.last != nil && !replaced && slices.EqualFunc(ls, w.last.dirs, func(a walked, b walked) bool {
		return a.dir == b.dir && a.l.sum == b.sum
	}) {
		// Every directory as it was: the batch before stands, unbuilt.
		// Beside 10,000 finished requests, building and sorting 20,000
		// paths again and the collections their garbage brings were a
		// sixth of an idle rescan's CPU, and what the caller did with
		// them again most of the rest (issue 25).
		w.stats.sameWalks.Add(1)
		return Batch{Paths: w.last.paths, Full: true, Irregular: w.last.irregular, Same: true}, nil
	}
	paths := make([]string, 0, w.lastLen+w.lastLen/16)
	for _, d := range ls {
		w.collect(d.l, false, &paths, &irregular)
	}
	w.lastLen = len(paths)
	if cap(paths) > 2*len(paths)+64 {
		// Sized for a folder since shrunk: the batch is kept for the
		// walks after (Same), and must not keep that size.
		paths = slices.Clip(slices.Clone(paths))
	}
	sort.Strings(paths)
	sort.Strings(irregular)
	w.last = &lastWalk{paths: paths, irregular: irregular, dirs: ls}
	for i := range ls {
		ls[i].sum, ls[i].l = ls[i].l.sum, nil // the digests, not the listings: those may be dropped
	}
	return Batch{Paths: paths, Full: true, Irregular: irregular, Replaced: replaced}, nil
}

// walked is a directory a full walk listed, in the walk's order: its path
// and listing, or, kept for the next walk to compare with, the listing's
// digest.
type walked struct {
	dir string
	l   *listing
	sum [sha256.Size]byte
}

// lastWalk is what the last full walk reported, and the directories it
// listed: a walk that lists the same directories to the same digests
// reports the same (Batch.Same). A digest covers one directory's names and
// their kinds, and the walk's order its place in the tree.
type lastWalk struct {
	paths, irregular []string
	dirs             []walked
}

// lost records that a full walk failed and sets the timer to look again
// within a few seconds.
func (w *Watcher) lost(err error) error {
	w.gone = true
	w.rescan.Reset(min(w.opt.Rescan, rootRetry))
	return err
}

// rootRetry is how often a watcher whose root is gone looks for it again
// (its parent's watch usually says sooner). A variable for tests.
var rootRetry = 2 * time.Second

// walk appends the regular files under dir. A directory that vanishes or
// cannot be read below the root is skipped (the next rescan retries); the
// root itself failing is an error: an unmounted folder must not look empty.
func (w *Watcher) walk(dir string, dropForeign bool, out, irregular *[]string) error {
	var ls []walked
	if err := w.walkDirs(dir, &ls, irregular); err != nil {
		return err
	}
	for _, d := range ls {
		w.collect(d.l, dropForeign, out, irregular)
	}
	return nil
}

// walkDirs lists dir and the directories under it that Skip leaves in,
// appending them to ls and (if irregular is not nil) the directories it
// leaves out to irregular.
func (w *Watcher) walkDirs(dir string, ls *[]walked, irregular *[]string) error {
	l, err := w.listArmed(dir)
	if err != nil {
		if dir == "." {
			return fmt.Errorf("walk %s: %w", w.dir, err)
		}
		return nil
	}
	*ls = append(*ls, walked{dir: dir, l: l})
	for _, rel := range l.dirs {
		if w.opt.Skip != nil && w.opt.Skip(rel, true) {
			if irregular != nil {
				*irregular = append(*irregular, rel)
			}
			continue
		}
		if err := w.walkDirs(rel, ls, irregular); err != nil {
			return err
		}
	}
	return nil
}

// collect appends the regular files of the listing l to out, and (if
// irregular is not nil) its other entries to irregular.
func (w *Watcher) collect(l *listing, dropForeign bool, out, irregular *[]string) {
	for _, rel := range l.files {
		if dropForeign && foreignNoise(path.Base(rel)) {
			continue
		}
		if w.opt.Skip != nil && w.opt.Skip(rel, false) {
			continue
		}
		*out = append(*out, rel)
	}
	for _, rel := range l.other {
		if irregular != nil && (w.opt.Skip == nil || !w.opt.Skip(rel, false)) {
			*irregular = append(*irregular, rel)
		}
	}
}

// listing is what one directory held when listed: the paths (relative to
// the root) of its subdirectories, regular files (sorted) and other
// entries, and, for a full walk to reuse it, the directory's identity and
// modification time then, and a digest of its entries.
type listing struct {
	dirs, files, other []string
	dir                os.FileInfo
	at                 time.Time // when the listing began
	reused             int       // full walks that took it since
	sum                [sha256.Size]byte
}

// maxListingReuse bounds how many full walks in a row may reuse a listing:
// on a file system that does not keep directory modification times (some
// FUSE and network mounts) every directory is still read for real at every
// tenth walk.
const maxListingReuse = 9

// listingTrust is how long after a directory's last change a listing of it
// must have begun to be reused. A change made later gives the directory a
// new modification time; one within the same timestamp tick as the change
// before it might not, which two seconds rule out on every local file
// system (FAT's tick is 2 s). A network file system whose server clock is
// further off than that can hide a new file from reused listings, for at
// most maxListingReuse walks. (A variable for tests.)
var listingTrust = 2 * time.Second

// entryKind is what a listing files a directory entry under.
type entryKind uint8

const (
	entryFile  entryKind = iota // a regular file
	entryDir                    // a directory
	entryOther                  // anything else: a symlink, FIFO, socket, device
)

// typesUnknown, for tests, has scanDir take every entry's type as one the
// file system did not give (XFS without ftype, some FUSE and network file
// systems), so a stat decides (Linux; elsewhere os.ReadDir decides).
var typesUnknown bool

// nameChunk is the size of the buffers a listing gathers its names in.
const nameChunk = 64 << 10

// direntBuf is the size of the buffer a directory is read into: 20,000
// names in about 16 reads.
const direntBuf = 64 << 10

// list lists dir. During a full walk it reuses the previous full walk's
// listing if the directory has not changed since (same inode, same
// modification time, that time well before the listing began): adding,
// removing or renaming an entry changes a directory's modification time; a
// file written in place does not, but it stays a regular file of that name,
// which is all a walk reports. Beside 100,000 finished requests (400,000
// files), reading and sorting the names is most of an idle rescan.
//
// A listing it may not reuse unread (too fresh then, or reused
// maxListingReuse times) it reads again, and keeps it if the directory
// holds the same entries, of the same kinds, in the same order: one read of
// the names and a SHA-256 of them, where building a listing allocates its
// size again and sorts it. A digest that cannot be made to collide, for the
// names are the folder's writers' to choose.
func (w *Watcher) list(dir string) (*listing, error) {
	// Errors name the directory by the watched path: the root's own name
	// may be a descriptor's (/proc/self/fd/N, openRootDir), gone by now.
	shown := filepath.Join(w.dir, filepath.FromSlash(dir))
	// Names and types only: a root-opened directory would lstat every entry.
	d, ok, err := openDirFast(w.rootD, dir)
	if !ok {
		d, err = openDirIn(w.root, dir)
	}
	if err != nil {
		return nil, shownAs(err, shown)
	}
	defer d.Close()
	fi, err := d.Stat()
	if err != nil {
		return nil, shownAs(err, shown)
	}
	var prev *listing
	if w.visited != nil {
		w.visited[dir] = true
		if l := w.listings[dir]; l != nil && os.SameFile(l.dir, fi) {
			if !l.dir.ModTime().Equal(fi.ModTime()) {
				// Changed: read for its names at once, no digest first.
			} else if l.at.Sub(fi.ModTime()) > listingTrust && l.reused < maxListingReuse {
				l.reused++
				w.stats.reusedLists.Add(1)
				return l, nil
			} else {
				prev = l
			}
		}
	}
	if prev != nil {
		at := time.Now()
		sum, err := w.digestDir(d, shown)
		if err != nil {
			return nil, err
		}
		if sum == prev.sum {
			prev.dir, prev.at, prev.reused = fi, at, 0
			w.stats.confirmedLists.Add(1)
			return prev, nil
		}
		// Changed: read it again from the start, for its names.
		if _, err := d.Seek(0, io.SeekStart); err != nil {
			return nil, shownAs(err, shown)
		}
	}
	hint := 0
	if l := w.listings[dir]; l != nil && w.visited != nil {
		hint = len(l.files) + len(l.files)/16
	}
	l, err := w.readListing(d, dir, shown, hint)
	if err != nil {
		return nil, err
	}
	l.dir = fi
	if w.visited != nil {
		if w.listings == nil {
			w.listings = map[string]*listing{}
		}
		w.listings[dir] = l
	}
	return l, nil
}

// shownAs names the directory of a path error by shown.
func shownAs(err error, shown string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		pe.Path = shown
	}
	return err
}

// digestDir is the digest readListing gives the directory's entries,
// without keeping them.
func (w *Watcher) digestDir(d *os.File, shown string) ([sha256.Size]byte, error) {
	dg := w.newDigest()
	err := scanDir(d, shown, &w.dirent, dg.add)
	return dg.sum(), err
}

// entryDigest is a SHA-256 of a directory's entries, in the order read:
// each one's kind, name and a zero byte, gathered in the watcher's chunk
// between writes to the hash.
type entryDigest struct {
	h     hash.Hash
	chunk []byte
}

func (w *Watcher) newDigest() *entryDigest {
	return &entryDigest{h: sha256.New(), chunk: w.chunk[:0]}
}

func (e *entryDigest) add(name []byte, kind entryKind) {
	if len(e.chunk)+len(name)+2 > cap(e.chunk) {
		e.h.Write(e.chunk)
		e.chunk = e.chunk[:0]
	}
	e.chunk = append(append(append(e.chunk, byte(kind)), name...), 0)
}

func (e *entryDigest) sum() (s [sha256.Size]byte) {
	e.h.Write(e.chunk)
	e.h.Sum(s[:0])
	return s
}

// readListing reads the open directory d (dir, relative to the root) into
// a new listing stamped with the time the read began; sizeHint is how many
// files it is likely to hold, shown the name its errors give it.
func (w *Watcher) readListing(d *os.File, dir, shown string, sizeHint int) (*listing, error) {
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	l := &listing{at: time.Now()}
	// The regular files' names are gathered back to back in buffers of
	// nameChunk bytes, sorted as substrings of them, and their paths built
	// in order in one more: a directory of 200,000 files costs a few
	// allocations, not two per file, no copy as a buffer grows, and whoever
	// reads the sorted batch next reads memory laid out in order.
	dg := w.newDigest()
	names := make([]string, 0, sizeHint)
	var chunk strings.Builder
	err := scanDir(d, shown, &w.dirent, func(name []byte, kind entryKind) {
		dg.add(name, kind)
		switch kind {
		case entryFile:
			if chunk.Len()+len(name) > chunk.Cap() {
				chunk = strings.Builder{}
				chunk.Grow(max(nameChunk, len(name)))
			}
			start := chunk.Len()
			chunk.Write(name)
			names = append(names, chunk.String()[start:])
		case entryDir:
			l.dirs = append(l.dirs, prefix+string(name))
		default:
			l.other = append(l.other, prefix+string(name))
		}
	})
	if err != nil {
		return nil, err
	}
	l.sum = dg.sum()
	slices.Sort(names)
	if prefix != "" {
		size := 0
		for _, n := range names {
			size += len(prefix) + len(n)
		}
		var b strings.Builder
		b.Grow(size)
		for i, n := range names {
			start := b.Len()
			b.WriteString(prefix)
			b.WriteString(n)
			names[i] = b.String()[start:]
		}
	}
	if cap(names) > 2*len(names)+64 {
		// The hint was the directory before most of it went: the listing
		// may be kept for long, and must not keep that size.
		names = slices.Clip(slices.Clone(names))
	}
	l.files = names
	slices.Sort(l.dirs)
	return l, nil
}

// foreignNoise: names dropped from event batches.
func foreignNoise(name string) bool {
	k := Classify(name).Kind
	return k == KindTemp || k == KindLitter
}

// eventBatch resolves queued event paths: regular files are reported, new
// directories walked (files created in them before their watch was armed
// produce no event), anything gone or foreign dropped.
func (w *Watcher) eventBatch(pend map[string]bool) (Batch, error) {
	rels := make([]string, 0, len(pend))
	for rel := range pend {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	seen := make(map[string]bool)
	var paths []string
	for _, rel := range rels {
		if w.skippedAncestor(rel) {
			continue
		}
		fi, err := w.root.Lstat(rel)
		if err != nil {
			continue // gone again, or under a vanished directory
		}
		switch {
		case fi.IsDir():
			if w.opt.Skip != nil && w.opt.Skip(rel, true) {
				continue
			}
			w.stats.subdirWalks.Add(1)
			var sub []string
			if err := w.walk(rel, true, &sub, nil); err != nil {
				return Batch{}, err
			}
			for _, p := range sub {
				if !seen[p] {
					seen[p] = true
					paths = append(paths, p)
				}
			}
		case fi.Mode().IsRegular():
			if foreignNoise(path.Base(rel)) || (w.opt.Skip != nil && w.opt.Skip(rel, false)) || seen[rel] {
				continue
			}
			seen[rel] = true
			paths = append(paths, rel)
		}
	}
	sort.Strings(paths)
	return Batch{Paths: paths}, nil
}

func (w *Watcher) skippedAncestor(rel string) bool {
	if w.opt.Skip == nil {
		return false
	}
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' && w.opt.Skip(rel[:i], true) {
			return true
		}
	}
	return false
}

// Close stops watching (notify.Stop) and releases the root. Next then
// returns an error wrapping fs.ErrClosed.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		w.rootMu.Lock()
		notify.Stop(w.c)
		w.closed.Store(true) // under rootMu: arm adds no watch after this
		w.rootMu.Unlock()
		close(w.done)
		w.wg.Wait()
		// The rescan timer belongs to Next's goroutine and is not touched
		// here: since Go 1.23 an unreferenced timer needs no Stop. A Next
		// in a walk finishes it first (done makes any wait return).
		w.nextMu.Lock()
		err = w.closeRoot()
		w.nextMu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("close watcher: %w", err)
	}
	return nil
}
