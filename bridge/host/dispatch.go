package host

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// From watcher batches to evaluations: which file means what, the log-once
// set, and the stamps a rescan compares instead of reading results again.

// startScanDone reports whether the start-up scan was dispatched and the
// evaluations it queued were taken (long runs may go on).
func (d *Daemon) startScanDone() bool {
	return d.fin.walked() && d.sched.idle()
}

// refuseIrregular audits entries at request names that are not regular files
// (symlinks, FIFOs, directories, devices), from a full walk's list of them:
// the watcher reports regular files only, so without this they would be
// ignored without a reason.
func (r *refusals) refuseIrregular(paths []string) {
	for _, p := range paths {
		agent, name, ok := strings.Cut(p, "/")
		if !ok {
			r.untrustedDir(p)
			continue
		}
		if strings.Contains(name, "/") || r.agents()[agent] == nil {
			continue
		}
		if _, _, ok := bridge.ParseToHostName(name); !ok {
			continue
		}
		rel := bridge.ToHostDir(r.me, agent) + "/" + name
		if fi, err := r.folder.Lstat(rel); err == nil && !fi.Mode().IsRegular() {
			r.refuseFile(rel, fmt.Errorf("%w: %v", syncsafe.ErrNotRegular, fi.Mode().Type()))
		}
	}
}

// untrustedDir says, once per name, that a directory at the top of to-host
// belongs to no agent this host trusts: requests there are never read, and
// a user who forgot to pair (or revoked) an agent should learn why it gets
// no answer.
func (r *refusals) untrustedDir(name string) {
	if !bridge.ValidID(name) {
		return // not an agent's id: folder litter, not worth a line
	}
	if fi, err := r.folder.Lstat(bridge.ToHostDir(r.me, name)); err != nil || !fi.IsDir() {
		return
	}
	r.noteFolder(name, "agent:"+name, "ignoring the requests of an agent this host does not trust (not paired, or revoked)", "agent", name,
		"hint", "pair it with `bridge pair` if you expect it; `bridge doctor` lists such directories")
}

// dispatch routes one path (relative to to-host/) from the watcher.
// Rotation statements were taken out of the batch before
// (statementsIn, followStatements), and a full batch's finished requests are checked
// by dispatchFull.
func (d *Daemon) dispatch(p string) {
	agent, name, ok := strings.Cut(p, "/")
	if !ok || strings.Contains(name, "/") {
		return
	}
	keys := d.agents()[agent]
	if keys == nil {
		d.noteFolder(agent, "agent:"+agent, "ignoring a directory of an agent nobody trusted", "agent", agent)
		return
	}
	id, ext, ok := bridge.ParseToHostName(name)
	if !ok {
		if name != bridge.AgentBundleName {
			c := syncsafe.Classify(name)
			d.noteFolder(p, "file:"+p, "ignoring a file that is not ours", "file", p, "kind", c.Kind.String(), "client", c.Client)
		}
		return
	}
	switch ext {
	case bridge.ExtManifest, bridge.ExtPayload:
		d.sched.schedule(agent, id)
	case bridge.ExtCancel:
		d.handleCancel(agent, id)
	case bridge.ExtAck:
		// The periodic collection looks at a finished request only if it
		// has an ack (or is past its retention or expiry, gc.go). Only
		// finished keys are remembered, so the set is no larger than the
		// finished one; an ack seen before its request finished is seen
		// again by the next full walk.
		key := agent + "/" + id
		d.fin.mu.Lock()
		if _, ok := d.fin.done.get(key); ok {
			d.fin.acks[key] = true
		}
		d.fin.mu.Unlock()
	}
}

// stamp identifies a published result file cheaply: a rescan compares it
// instead of reading and verifying the file again. The times are Unix
// nanoseconds (0 for an absent file), not time.Time: the finished set
// keeps one stamp per finished request, 100,000 of them beside a full
// folder, and four time.Time would double its size. The change times are
// what a folder writer cannot put back (syncsafe.ChangeTime): other bytes
// at the same size with the old modification time set again are still
// another stamp.
type stamp struct {
	size, outSize   int64
	mtime, outMtime int64
	ctime, outCtime int64
}

// adopts reports whether st, a provisional stamp (read from a v1 cache,
// without change times), is now: the same sizes and modification times,
// now's change times taken as its own.
func (st stamp) adopts(now stamp) bool {
	provisional := st.size >= 0 && st.ctime == 0 || st.outSize >= 0 && st.outCtime == 0
	return provisional && st.size == now.size && st.mtime == now.mtime && st.outSize == now.outSize && st.outMtime == now.outMtime
}

// resultStamp covers both files of a published result: losing or changing
// either makes a rescan look at the request again.
func (o *outbox) resultStamp(agent, id string) stamp {
	return o.resultStamps([]string{agent + "/" + id})[0]
}

// resultStamps is resultStamp of many "agent/id" keys, each agent's result
// directory opened once for a run of its keys.
func (o *outbox) resultStamps(keys []string) []stamp {
	out := make([]stamp, len(keys))
	for i := 0; i < len(keys); {
		agent, _, _ := strings.Cut(keys[i], "/")
		j := i
		var names []string
		for ; j < len(keys) && strings.HasPrefix(keys[j], agent+"/"); j++ {
			id := keys[j][len(agent)+1:]
			names = append(names, id+"."+bridge.ExtResult, id+"."+bridge.ExtOutput)
		}
		fis, err := o.folder.LstatIn(bridge.ToAgentDir(o.me, agent), names)
		for k := i; k < j; k++ {
			st := stamp{size: -1, outSize: -1}
			if err == nil {
				if fi := fis[2*(k-i)]; fi != nil {
					st.size, st.mtime, st.ctime = fi.Size(), fi.ModTime().UnixNano(), syncsafe.ChangeTime(fi).UnixNano()
				}
				if fi := fis[2*(k-i)+1]; fi != nil {
					st.outSize, st.outMtime, st.outCtime = fi.Size(), fi.ModTime().UnixNano(), syncsafe.ChangeTime(fi).UnixNano()
				}
			}
			out[k] = st
		}
		i = j
	}
	return out
}

// drop takes key out of the finished set: it is not answered (any more),
// so a rescan must evaluate its files, not skip them.
func (f *finishedSet) drop(key string) {
	f.mu.Lock()
	f.done.del(key)
	f.mu.Unlock()
}

// markFinished records that key is terminal and its result is in place:
// the stamp is taken only after the folder's bytes were seen to equal the
// private copy, so a file swapped in meanwhile is never taken for ours.
func (d *Daemon) markFinished(agent, id string) {
	d.probe.Add(probe.FinishedMarks)
	st := d.out.resultStamp(agent, id)
	want, err := os.ReadFile(d.home.Path("results", agent, id+"."+bridge.ExtResult))
	if err == nil {
		have, err := d.folder.ReadFile(bridge.ResultPath(d.me, agent, id, bridge.ExtResult), bcrypto.KindResult.MaxSize())
		if err != nil || !bytes.Equal(have, want) || d.out.resultStamp(agent, id) != st {
			return
		}
		// The output too, as kept: one the sync lost (or renamed away as a
		// conflict) a moment after the publish would otherwise be taken for
		// in place, and never published again.
		if fi, err := os.Stat(d.home.Path("results", agent, id+"."+bridge.ExtOutput)); err != nil || fi.Size() != st.outSize {
			return
		}
	}
	d.fin.mu.Lock()
	d.fin.done.set(agent+"/"+id, st)
	d.fin.noteUnflushed(agent + "/" + id)
	d.fin.mu.Unlock()
}
