package host

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// finishedSet is what the daemon knows of requests beside the ledger, in
// memory under a lock of its own: the requests known finished with their
// published result's stamp, which of them the agent acked, and the keys a
// ledger repair found lost.
type finishedSet struct {
	*base
	mu      sync.Mutex
	done    doneMap         // keys known terminal, with their published result's stamp
	acks    map[string]bool // done keys whose ack file the watcher saw (gc.go)
	lost    map[string]bool // keys a ledger repair found lost (evidence.go)
	rescans int             // full batches dispatched (0: the start-up scan is not dispatched yet)

	// The finished keys the last full batch held, in its order
	// (substrings of its paths), and done's gen when they were looked up:
	// while done has not changed since, a rescan of the same folder finds
	// its finished requests by comparing with them, not by a look-up each
	// (dispatchFull).
	lastKeys []string
	lastGen  uint64
	spare    []string // the array of the rescan's keys before that: the next rescan's, reused
	// The paths of the last full batch that were neither of a known
	// finished request nor refused (dispatched), and the refused marks'
	// generation then: a rescan of the same batch (Batch.Same), with done
	// and the marks unchanged, dispatches these again without going
	// through the batch.
	lastNow     []string
	lastRefused uint64

	// The keys marked finished since the last save, whose result pairs
	// were published without a flush: save flushes them first (flushRels),
	// or the file would vouch for results a power cut took.
	unflushed []string

	saved     bool    // the file holds the set as it was at savedGen
	savedGen  uint64  // done's gen when saved (or loaded)
	savedFile version // the file as it was then

	dirs map[string]*resultDir // by agent: what the result check knows of its result directory (resultcheck.go)
	runs []keyRun              // by agent: where its keys are in lastKeys (shareToCheck)
}

// doneMap is the finished set's keys and stamps. Every change goes
// through its methods, which count it in gen: what was looked up in it
// holds while gen stays the same.
type doneMap struct {
	m   map[string]stamp
	gen uint64
}

func (d *doneMap) get(key string) (stamp, bool) {
	st, ok := d.m[key]
	return st, ok
}

func (d *doneMap) set(key string, st stamp) {
	d.m[key] = st
	d.gen++
}

func (d *doneMap) del(key string) {
	if _, ok := d.m[key]; ok {
		delete(d.m, key)
		d.gen++
	}
}

func (d *doneMap) replace(m map[string]stamp) {
	d.m = m
	d.gen++
}

// The finished set lets a rescan skip requests whose
// result is published and unchanged. It is kept across restarts in the
// home's "finished" file, so a daemon starting beside 100,000 finished
// requests does not verify each of them again before it serves new ones.
//
// The file is a cache, never a source of truth: an entry was only ever
// recorded after the folder's result bytes were seen to equal the private
// copy (markFinished), and it is used only while the result files still have
// the recorded size and modification time. A missing, stale or damaged file
// costs time, not correctness: what it lacks is verified again. What it
// vouches for is flushed before it is written (flushRels): results are
// published without a flush, and a power cut could otherwise leave zeros
// at the recorded size and time.
//
// Format (text, one line per request, after a header line):
//
//	bridge-finished v2
//	<agent>/<id> <size> <mtime ns> <ctime ns> <output size> <output mtime ns> <output ctime ns>
//
// Sizes are -1 for a file that was absent when recorded. A v1 file (no
// change times: "<agent>/<id> <size> <mtime> <output size> <output mtime>")
// is read with the change times unknown (provisional stamps): an earlier
// version flushed every result it published, so what it vouched for is on
// disk; a rescan's check that finds the size and time takes the change
// times it sees (adopt), rather than every finished request being verified
// again at the first start after the upgrade.
const finishedName = "finished"

const finishedHeader = "bridge-finished v2"

const finishedHeaderV1 = "bridge-finished v1"

// noteUnflushed notes key, just marked finished, for the next save's flush
// (about 60 bytes a key until then). The caller holds f.mu.
func (f *finishedSet) noteUnflushed(key string) {
	f.unflushed = append(f.unflushed, key)
}

// flushRels makes the result pairs of keys durable in the folder
// (syncsafe.Folder.Flush: one syncfs on Linux), before the file may vouch
// for them by their stamps: a result is published without a flush (its
// private copies are durable), and a power cut that empties or zero-fills
// it under the same size and times would otherwise hide it from every
// rescan behind the cache. It returns the keys not flushed (a name that
// holds something else now, a failed fsync), which are noted again.
func (f *finishedSet) flushRels(keys []string) (failed map[string]bool) {
	rels := make([]string, 0, 2*len(keys))
	for _, key := range keys {
		agent, id, _ := strings.Cut(key, "/")
		rels = append(rels, bridge.ResultPath(f.me, agent, id, bridge.ExtResult), bridge.ResultPath(f.me, agent, id, bridge.ExtOutput))
	}
	bad := map[string]bool{}
	for _, rel := range f.folder.Flush(rels) {
		bad[rel] = true
	}
	synced := make([]string, 0, len(rels))
	for i, rel := range rels {
		if !bad[rel] {
			synced = append(synced, filepath.Join(f.folder.Path(), filepath.FromSlash(rel)))
		} else {
			if failed == nil {
				failed = map[string]bool{}
			}
			failed[keys[i/2]] = true
		}
	}
	f.probe.Synced(synced...)
	if len(failed) > 0 {
		f.log.Warn("could not flush some published results; the finished-requests cache leaves them out", "results", len(failed))
		f.mu.Lock()
		for key := range failed {
			f.unflushed = append(f.unflushed, key)
		}
		f.mu.Unlock()
	}
	return failed
}

// save writes the finished set (atomically; a crash keeps the old
// file). Called on Close and after each periodic collection. The results
// it vouches for that were marked since the last save are flushed first
// (flushRels), and those that could not be are left out: the set is
// taken, with the keys to flush, in one hold of the lock, so the file
// never holds a key marked after the flush.
func (f *finishedSet) save() error {
	file := f.home.Path(finishedName)
	f.mu.Lock()
	if f.saved && f.savedGen == f.done.gen && f.savedFile == fileVersion(file) && len(f.unflushed) == 0 {
		// What the file holds: beside 10,000 finished requests, writing
		// 1 MB again and its fsync every 10 minutes were most of an idle
		// daemon's collection. (A file removed or changed meanwhile is
		// written again.)
		f.mu.Unlock()
		return nil
	}
	gen := f.done.gen
	type entry struct {
		key string
		st  stamp
	}
	all := make([]entry, 0, len(f.done.m))
	for k, st := range f.done.m {
		all = append(all, entry{k, st})
	}
	keys := f.unflushed
	f.unflushed = nil
	f.mu.Unlock()
	failed := f.flushRels(keys)
	var b bytes.Buffer
	b.Grow(len(all)*120 + 32)
	b.WriteString(finishedHeader + "\n")
	for _, e := range all {
		if failed[e.key] {
			continue
		}
		fmt.Fprintf(&b, "%s %d %d %d %d %d %d\n", e.key, e.st.size, e.st.mtime, e.st.ctime, e.st.outSize, e.st.outMtime, e.st.outCtime)
	}
	if err := syncsafe.WriteFileAtomic(file, b.Bytes()); err != nil {
		return err
	}
	f.mu.Lock()
	f.saved, f.savedGen, f.savedFile = true, gen, fileVersion(file)
	f.mu.Unlock()
	if len(all) > len(failed) {
		f.crashPoint("cache-saved")
	}
	return nil
}

// fileVersion is the version of the file at path, the zero version if it
// cannot be looked at.
func fileVersion(path string) version {
	fi, err := os.Lstat(path)
	if err != nil {
		return version{}
	}
	return versionOf(fi)
}

// load reads the file save wrote. Anything malformed
// discards the whole file: it is only a cache.
func (f *finishedSet) load() {
	file, err := os.Open(f.home.Path(finishedName))
	if err != nil {
		return
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	fields := 6
	if !sc.Scan() || sc.Text() != finishedHeader {
		if sc.Text() != finishedHeaderV1 {
			f.log.Warn("ignoring the finished-requests cache: unknown format", "file", file.Name())
			return
		}
		fields = 4
	}
	// Sized for the file's lines (about 130 bytes each) and read without a
	// string per field: at 100,000 requests the map's growth and the
	// fields' strings were most of the load, a seventh of the start's CPU
	// (issue 25).
	hint := 0
	if fi, err := file.Stat(); err == nil {
		hint = int(min(fi.Size()/120, 1<<18)) // past it the map grows as it would
	}
	m := make(map[string]stamp, hint)
	for sc.Scan() {
		line := sc.Bytes()
		key, rest, _ := bytes.Cut(line, []byte{' '})
		var n [6]int64
		ok := true
		for i := 0; ok && i < fields; i++ {
			var field []byte
			field, rest, ok = bytes.Cut(rest, []byte{' '})
			ok = ok == (i < fields-1) && len(field) > 0
			if ok {
				n[i], err = strconv.ParseInt(string(field), 10, 64)
				ok = err == nil
			}
		}
		agent, id, cut := bytes.Cut(key, []byte{'/'})
		if !ok || !cut || !bridge.ValidID(string(id)) || !bcrypto.ValidKid(string(agent)) {
			f.log.Warn("ignoring the finished-requests cache: damaged", "file", file.Name())
			return
		}
		if fields == 4 { // v1: no change times
			n = [6]int64{n[0], n[1], 0, n[2], n[3], 0}
		}
		st := stamp{size: n[0], outSize: n[3]}
		if st.size >= 0 {
			st.mtime, st.ctime = n[1], n[2]
		}
		if st.outSize >= 0 {
			st.outMtime, st.outCtime = n[4], n[5]
		}
		m[string(key)] = st
	}
	if err := sc.Err(); err != nil {
		f.log.Warn("ignoring the finished-requests cache: unreadable", "file", file.Name(), "err", err)
		return
	}
	f.mu.Lock()
	if len(f.done.m) == 0 {
		f.done.replace(m)                      // at the start, as a rule: nothing to merge
		f.saved, f.savedGen = true, f.done.gen // the set is the file's
		if fi, err := file.Stat(); err == nil {
			f.savedFile = versionOf(fi)
		}
	} else {
		for k, st := range m {
			if _, ok := f.done.get(k); !ok {
				f.done.set(k, st)
			}
		}
	}
	f.mu.Unlock()
}

// pruneFinished evaluates the requests of the finished set that the ledger
// has no entry for: a ledger restored from a backup (or repaired) beside a
// finished file that still names them would otherwise have rescans skip
// them for ever, never recorded (record-lost, catch-up) nor collected.
// Once, after the start-up scan; recovery has dropped the entries the
// ledger holds unanswered already.
func (d *Daemon) pruneFinished() {
	d.fin.mu.Lock()
	keys := make([]string, 0, len(d.fin.done.m))
	for k := range d.fin.done.m {
		keys = append(keys, k)
	}
	d.fin.mu.Unlock()
	missing, err := d.ledger.Missing(keys)
	if err != nil {
		d.log.Warn("check the finished-requests cache against the ledger", "err", err)
		return
	}
	for _, k := range missing {
		// Evaluated with its key still in the set: the cache is evidence
		// that this host answered the request (DESIGN §6), so the
		// evaluation records it (record-lost, or the state of the result
		// the folder holds) and never runs it again.
		agent, id, _ := strings.Cut(k, "/")
		d.sched.schedule(agent, id)
	}
	if len(missing) > 0 {
		d.log.Warn("the finished-requests cache named requests the ledger does not hold (a ledger restored or repaired?): looking at them again", "requests", len(missing))
	}
}

// maxFinishedChecks bounds how many finished requests one rescan checks for
// a lost or changed result (two lstats each). Beyond it, each rescan checks
// a rotating share, so that every result is looked at within
// ceil(finished/maxFinishedChecks) rescans of its directory's last change
// (at 30 s rescans, 5 minutes at 10,000 finished requests, 50 at 100,000),
// and an idle rescan stays cheap however many requests the folder keeps
// (issue 15: 5,000 checks made a rescan of 10,000 finished requests 90 ms
// of CPU every 30 s). While the directory stays unchanged after that, the
// checks pause (shareToCheck). The result directories are not watched:
// beside a request delivered again, these checks are how a lost or
// replaced result is found.
const maxFinishedChecks = 1_000

// dispatchFull handles a Full batch: first every path that is not of a
// known finished request (new work must not wait behind the checks), then
// this rescan's share of the finished ones, once per request. same says
// that paths are the very paths of the full batch before (Batch.Same).
func (d *Daemon) dispatchFull(paths []string, same bool) {
	sent, refusedGen := d.refusals.skip(paths)
	d.fin.mu.Lock()
	shares := max(1, (len(d.fin.done.m)+maxFinishedChecks-1)/maxFinishedChecks)
	var now []string
	fresh := true
	if same && d.fin.lastRefused == refusedGen && d.fin.lastGen == d.fin.done.gen {
		fresh = false
		// The folder's names, the refused marks and the finished set are
		// as they were at the rescan before: so is what it found. Beside
		// 10,000 finished requests, going through their 20,000 names again
		// was most of an idle rescan's CPU once the results' checks
		// paused (issue 25).
		now = d.fin.lastNow
		d.probe.Add(probe.SameRescans)
	} else {
		now = d.fin.sortOut(sent)
	}
	d.fin.lastRefused = refusedGen
	keys := d.fin.lastKeys
	d.fin.mu.Unlock()
	for _, p := range now {
		d.dispatch(p)
	}
	d.fin.mu.Lock()
	d.fin.rescans++
	d.fin.mu.Unlock()
	d.probe.Add(probe.Rescans)
	// A rescan need not verify finished requests again; it checks that
	// their result is still what was recorded, the stamps taken together.
	// One that is not is evaluated again (a lost result is re-published).
	// keys stays this goroutine's to read: only the next full batch
	// reuses its array.
	agents := d.agents()
	check := d.fin.shareToCheck(keys, shares, fresh, func(agent string) bool { return agents[agent] != nil })
	stamps := d.out.resultStamps(check)
	for i, key := range check {
		agent, id, _ := strings.Cut(key, "/")
		d.fin.mu.Lock()
		st, known := d.fin.done.get(key)
		d.fin.mu.Unlock()
		if known && st == stamps[i] {
			continue
		}
		if known && st.adopts(stamps[i]) {
			d.fin.mu.Lock()
			if cur, ok := d.fin.done.get(key); ok && cur == st {
				d.fin.done.set(key, stamps[i])
			}
			d.fin.mu.Unlock()
			continue
		}
		// The stamps were taken a moment ago: a collection may have
		// removed the result and recorded that since. Look again before
		// treating the request as changed, or a collected result would be
		// published again.
		if known {
			now := d.out.resultStamp(agent, id)
			d.fin.mu.Lock()
			st, _ = d.fin.done.get(key)
			d.fin.mu.Unlock()
			if st == now {
				continue
			}
		}
		d.sched.schedule(agent, id)
	}
}

// sortOut goes through a full batch's paths (refused ones left out): it
// keeps the keys of the known finished requests in the set's lastKeys, at
// the set's generation, and their paths and the rest's for the next
// rescan to reuse, and returns the rest, to dispatch. The caller holds
// f.mu.
//
// The finished requests' paths are most of a full batch (100,000 requests
// are 200,000 paths): they are not copied aside, only their keys, so an
// idle rescan allocates little and the collector seldom runs (gctune.go).
func (f *finishedSet) sortOut(paths []string) (now []string) {
	lastKey, lastKnown := "", false // a request's two files are adjacent in the sorted batch
	// The last batch's finished keys, while the set is as it was then: a
	// key found at its place among them is known without a look-up. Beside
	// 10,000 finished requests the look-ups were a third of an idle
	// rescan's CPU (the keys' bytes are all over the heap, cold after 30 s;
	// these are the listing's, in order, and mostly the very same strings).
	// A key not found there is looked up, so the answer is the set's
	// either way; only its cost depends on the order.
	var prev []string
	if f.lastGen == f.done.gen {
		prev = f.lastKeys
	}
	keys := f.spare[:0]
	j := 0
	for _, p := range paths {
		// The shape first, the id's digits only for a key the finished set
		// lacks: its keys are valid ones, and most paths of a full batch
		// are theirs (requestKeyOf's answer either way).
		key, ok := requestKeyShape(p)
		if ok && key != lastKey {
			known := j < len(prev) && prev[j] == key
			if !known {
				for j < len(prev) && prev[j] < key {
					j++ // gone from the folder since
				}
				known = j < len(prev) && prev[j] == key
			}
			if known {
				j++
			} else {
				f.probe.Add(probe.FinishedLookups)
				_, known = f.done.get(key)
			}
			if ok = known || bridge.ValidID(key[len(key)-32:]); ok {
				lastKey, lastKnown = key, known
				if known {
					keys = append(keys, key)
				}
			}
		}
		if ok && lastKnown {
			continue
		}
		now = append(now, p)
	}
	// Two arrays in turn: a rescan of 100,000 finished requests would
	// otherwise leave 1.6 MB of them behind each time.
	clear(keys[len(keys):cap(keys)]) // the room past them keeps no older batch's paths alive
	f.spare, f.lastKeys, f.lastGen = f.lastKeys, keys, f.done.gen
	f.lastNow = now
	return now
}

// fnv32a is FNV-1a of s (hash/fnv's New32a), without the allocations of
// a hash.Hash and a []byte per key.
func fnv32a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// requestKeyOf is the ledger key of a manifest, payload or cancel path
// (relative to to-host/), if it is one: "agent/id", a prefix of the path
// (a rescan calls it for every file in the folder, so it allocates
// nothing).
func requestKeyOf(p string) (string, bool) {
	key, ok := requestKeyShape(p)
	if !ok || !bridge.ValidID(key[len(key)-32:]) {
		return "", false
	}
	return key, true
}

// walked reports whether a full walk of the folder has been dispatched
// since the daemon started: until then, the acks it knows are none.
func (f *finishedSet) walked() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rescans > 0
}

// requestKeyShape is requestKeyOf without the check of the id's digits:
// "agent/" and 32 bytes, then "." and a manifest's, payload's or cancel's
// extension. A cancel counts as the request's too: beside a finished
// request it can change nothing, and would otherwise cost an evaluation at
// every rescan. (Acks do not: the collection needs to see them.)
func requestKeyShape(p string) (string, bool) {
	slash := strings.IndexByte(p, '/')
	if slash <= 0 || len(p) < slash+1+34 || p[slash+1+32] != '.' {
		return "", false
	}
	switch p[slash+1+33:] {
	case bridge.ExtManifest, bridge.ExtPayload, bridge.ExtCancel:
		return p[:slash+1+32], true
	}
	return "", false
}
