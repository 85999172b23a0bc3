package host

import (
	"hash/maphash"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/syncsafe"
)

// What folder input may cost the host (issue 13, OPERATIONS.md "Disk use"):
// a file the daemon refused is not read again until it changes, and the
// lines folder input makes the daemon write (log and audit) are bounded per
// agent directory and hour, whatever the folder holds.

// version identifies one version of a file: a new write, a rename into
// place or a touch changes it (the change time too, which nobody can set
// back).
type version struct {
	size, mtime, ctime int64
	ino                uint64
}

func versionOf(fi fs.FileInfo) version {
	return version{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ctime: syncsafe.ChangeTime(fi).UnixNano(), ino: fileIno(fi)}
}

// refusals remembers the manifests refused for good as they were, so that a
// rescan does not read and verify them again until they change, under a
// lock of its own.
type refusals struct {
	*base // the folder, and the keys a mark was checked against
	mu    sync.Mutex
	marks map[uint64]refusedMark // by markKey of the path below to-host
	seed  maphash.Seed           // markKey's
	gen   uint64                 // counts every mark made or forgotten: skip's answer holds while it stays
}

// refusedMark is a refused manifest's version and the keys it was checked
// against: new keys (a pairing, a rotation) may make it acceptable.
type refusedMark struct {
	v      version
	agents *map[string]*agentKeys
	own    *ownKeys
}

// lstatChunk is how many refused marks skip checks with one batched
// lstat.
const lstatChunk = 2048

// mark remembers that the manifest at p (relative to the folder), as
// it is now, will never be admitted against the keys of now. Only for
// refusals that new time cannot lift (a bad signature, a damaged file, an
// unknown key, a file cut short: one still arriving changes its version as
// the rest comes).
func (r *refusals) mark(p string) {
	fi, err := r.folder.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	if age := time.Since(syncsafe.ChangeTime(fi)); age >= 0 && age < r.limits.markSettle {
		// A file changed within a timestamp tick of now might change
		// again without a new time (FAT's tick is 2 s, some network
		// file systems' 1 s): mark it at a later look. The change time
		// is the host's clock at the last write or touch, whatever
		// modification time a sync client or a folder writer set; one
		// ahead of now means the clock stepped back since.
		return
	}
	rel, ok := strings.CutPrefix(p, bridge.ToHostRoot(r.me)+"/")
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.marks) >= r.limits.refusedMarks {
		return
	}
	r.marks[r.markKey(rel)] = refusedMark{v: versionOf(fi), agents: r.agentsP.Load(), own: r.ownP.Load()}
	r.gen++
}

// markKey is a refused mark's key: a seeded 64-bit hash of the path below
// to-host, not the path, so that a mark costs a fixed few dozen bytes
// whatever names the folder holds. Two paths sharing a key would share a
// mark only while both files had the very same version (size, times,
// inode): a file can only be skipped as refused when it is the file that
// was refused.
func (r *refusals) markKey(rel string) uint64 { return maphash.String(r.seed, rel) }

// skip takes out of a full batch's paths (relative to to-host) the
// manifests refused before that have not changed since, looking at them all
// with one batched lstat per agent directory; and forgets marks of files
// that are gone. Event batches are not filtered: an event means a change.
// gen is the marks' generation after: while it stays, the same paths give
// the same answer.
func (r *refusals) skip(paths []string) (out []string, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.marks) == 0 {
		return paths, r.gen
	}
	// Positions, flags and hashes rather than maps of names: a rescan of a
	// directory full of refused junk costs a few bytes per name, and
	// nothing of it stays.
	agents, own := r.agentsP.Load(), r.ownP.Load()
	marked := make([]int, 0, len(r.marks)) // positions in paths of marked manifests
	for i, p := range paths {
		if _, ok := r.marks[r.markKey(p)]; ok {
			marked = append(marked, i)
		}
	}
	if len(marked) < len(r.marks) {
		// Some marked files are gone: forget their marks.
		present := make(map[uint64]bool, len(marked))
		for _, i := range marked {
			present[r.markKey(paths[i])] = true
		}
		for k := range r.marks {
			if !present[k] {
				delete(r.marks, k)
				r.gen++
			}
		}
	}
	skip := make([]bool, len(paths))
	skipped := 0
	names := make([]string, 0, min(lstatChunk, len(marked)))
	for i := 0; i < len(marked); {
		agent, _, _ := strings.Cut(paths[marked[i]], "/")
		prefix := paths[marked[i]][:len(agent)+1]
		j := i
		names = names[:0]
		// In chunks: each stat costs a FileInfo until the chunk is
		// judged, so a directory full of refused junk costs a rescan a
		// bounded few hundred KiB at a time, not all of it at once.
		for ; j < len(marked) && j-i < lstatChunk && strings.HasPrefix(paths[marked[j]], prefix); j++ {
			names = append(names, paths[marked[j]][len(prefix):])
		}
		fis, err := r.folder.LstatIn(bridge.ToHostDir(r.me, agent), names)
		for k := i; k < j; k++ {
			key := r.markKey(paths[marked[k]])
			m := r.marks[key]
			if err == nil && fis[k-i] != nil && versionOf(fis[k-i]) == m.v && m.agents == agents && m.own == own {
				skip[marked[k]] = true
				skipped++
			} else {
				delete(r.marks, key)
				r.gen++
			}
		}
		i = j
	}
	if skipped == 0 {
		return paths, r.gen
	}
	// The request's other files too: a payload beside a refused manifest
	// would have it read again. (Only a manifest's: a refused cancel says
	// nothing of the request, whose manifest may well be good.) A full
	// batch is sorted, so a request's files are next to each other; were
	// one apart, it would only be evaluated, and found refused there.
	out = make([]string, 0, len(paths)-skipped)
	for i := 0; i < len(paths); {
		k, ok := requestKeyOf(paths[i])
		j, manifestSkipped := i+1, skip[i] && strings.HasSuffix(paths[i], "."+bridge.ExtManifest)
		for ; ok && j < len(paths) && strings.HasPrefix(paths[j], k) && len(paths[j]) > len(k) && paths[j][len(k)] == '.'; j++ {
			manifestSkipped = manifestSkipped || skip[j] && strings.HasSuffix(paths[j], "."+bridge.ExtManifest)
		}
		for ; i < j; i++ {
			if _, req := requestKeyOf(paths[i]); !skip[i] && !(manifestSkipped && req) {
				out = append(out, paths[i]) // an ack is not the request's: the collection needs it
			}
		}
	}
	return out, r.gen
}

// still reports whether the manifest at p (relative to the folder)
// is the version refused before, against the same keys: an event about its
// payload, or about nothing new, must not have it read again.
func (r *refusals) still(p string) bool {
	rel, ok := strings.CutPrefix(p, bridge.ToHostRoot(r.me)+"/")
	if !ok {
		return false
	}
	r.mu.Lock()
	m, marked := r.marks[r.markKey(rel)]
	r.mu.Unlock()
	if !marked {
		return false
	}
	fi, err := r.folder.Lstat(p)
	return err == nil && versionOf(fi) == m.v && m.agents == r.agentsP.Load() && m.own == r.ownP.Load()
}

// lineBudget bounds the log and audit lines that folder input makes the
// daemon write: per agent directory (or "" for the top of to-host), at most
// limits.budgetLines an hour, refilled steadily. What goes over is counted
// and said in one line when the budget allows again.
type lineBudget struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens     float64
	at         time.Time
	suppressed int
}

// maxBuckets bounds the budget's own memory: top-level names come from the
// folder too. Past it, every new directory shares the "" bucket.
const maxBuckets = 4096

// take reports whether one more line may be written for dir, within lines
// per every, and how many lines were left out before it (to be said with
// it).
func (b *lineBudget) take(dir string, now time.Time, lines int, every time.Duration) (ok bool, suppressed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buckets == nil {
		b.buckets = map[string]*bucket{}
	}
	k, found := b.buckets[dir]
	if !found {
		if len(b.buckets) >= maxBuckets {
			dir = ""
			k = b.buckets[dir]
		}
		if k == nil {
			k = &bucket{tokens: float64(lines), at: now}
			b.buckets[dir] = k
		}
	}
	k.tokens = min(float64(lines), k.tokens+float64(now.Sub(k.at))/float64(every)*float64(lines))
	k.at = now
	if k.tokens < 1 {
		k.suppressed++
		return false, 0
	}
	k.tokens--
	suppressed, k.suppressed = k.suppressed, 0
	return true, suppressed
}
