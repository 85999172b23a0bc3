package host

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Garbage collection (SPEC §10): each side removes only its own files. The
// host removes a result once its agent acked it, a grace period passed and
// the request expired, or once a retention period passed without an ack; it forgets ledger
// entries (and their private copies) past the request's expiry plus skew,
// after which a replay is refused as expired.

// GCOptions tunes a collection. Zero fields take the defaults.
type GCOptions struct {
	Grace     time.Duration // after the request finished, for acked results (default 1h)
	Retention time.Duration // after the request finished, for results never acked (default 30 days)
	DryRun    bool
	// Explain fills GCReport.Kept: what stays and until when (for `bridge
	// gc`; the daemon's own collections skip the reading of acks it costs).
	Explain bool
	// Before bounds a collection ordered by `bridge gc` to what finished
	// before the order: the daemon carries it out a moment later (or at
	// its next start), and what finished since was in no list the
	// operator saw. Zero: no bound.
	Before time.Time
}

// GCItem is one thing a collection removes (or would remove).
type GCItem struct {
	Agent     string `json:"agent"`
	AgentName string `json:"agent_name"` // its local name; its id if it is no longer trusted
	ID        string `json:"id"`
	What      string `json:"what"` // "result", "ledger entry" or "message"
	Why       string `json:"why"`
}

// GCReport is what a collection did.
type GCReport struct {
	DryRun bool `json:"dry_run"`
	// Queued: handed to the running daemon, which collects within a
	// second; Items and Kept are then a dry run's of what it will do
	// (DryRun false: the collection is real).
	Queued bool     `json:"queued"`
	Items  []GCItem `json:"items"`
	Kept   []GCKept `json:"kept,omitempty"` // with GCOptions.Explain
}

// GCKept is what a collection leaves, by kind: how many, why, and the
// earliest time one of them may go (nil: not while it is as it is).
type GCKept struct {
	What  string     `json:"what"`
	Count int        `json:"count"`
	Until *time.Time `json:"until,omitempty"`
	Why   string     `json:"why"`
}

// The kinds of GCKept, in the order they are told.
const (
	keptAcked      = "acked result"
	keptUnacked    = "result nobody acked"
	keptUnfinished = "unfinished request"
	keptEntry      = "ledger entry"
	keptMessage    = "inbox message"
)

// keep counts e as kept in kind until (zero: no time).
func (r *GCReport) keep(kind string, until time.Time) {
	until = until.Truncate(time.Second) // as the ledger's times read
	why := map[string]string{
		keptAcked:      "an acked result stays until its request expires (and --grace after it finished), should a copy of the request come back",
		keptUnacked:    "nobody acked it: it stays until --retention after it finished, or until it is acked and its request expired",
		keptUnfinished: "still queued, running, waiting for approval or uncertain: nothing of it is collected",
		keptEntry:      "its result is gone; its id is remembered until its request expires, so that it can never run again",
		keptMessage:    "a notice to its agent stays until --grace after it was published once the agent acked it, else until --retention",
	}[kind]
	for i := range r.Kept {
		if r.Kept[i].What == kind {
			r.Kept[i].Count++
			if !until.IsZero() && (r.Kept[i].Until == nil || until.Before(*r.Kept[i].Until)) {
				r.Kept[i].Until = &until
			}
			return
		}
	}
	k := GCKept{What: kind, Count: 1, Why: why}
	if !until.IsZero() {
		k.Until = &until
	}
	r.Kept = append(r.Kept, k)
}

// ordered reports whether `bridge gc` ordered the collection (Before set).
func (o *GCOptions) ordered() bool { return !o.Before.IsZero() }

// at is the time a collection goes by: now, or the order's time when it
// was ordered earlier (a daemon carries out an order left while it was
// down at its next start). What passed its grace, retention or expiry
// since was in no list the operator saw.
func (o *GCOptions) at(now time.Time) time.Time {
	if o.ordered() && o.Before.Before(now) {
		return o.Before
	}
	return now
}

func (o *GCOptions) defaults() {
	if o.Grace <= 0 {
		o.Grace = time.Hour
	}
	if o.Retention <= 0 {
		o.Retention = 30 * 24 * time.Hour
	}
}

// collector removes what the agents no longer need: results acked (or past
// their retention), messages, progress chunks, and ledger entries past their
// request's expiry, and the inputs kept for approvals no longer waiting.
type collector struct {
	*base
	fin *finishedSet // what it collects is recorded there
	out *outbox      // the kept copies' names and the results' stamps
}

// collect runs one garbage collection over the ledger entries given (all
// of them; a dry run may pass a read-only snapshot).
func (c *collector) collect(o GCOptions, all []ledger.Entry) (*GCReport, error) {
	o.defaults()
	now := o.at(c.opt.Now())
	rep := &GCReport{DryRun: o.DryRun, Items: []GCItem{}}
	progress := &progressFiles{base: c.base}
	listed := map[string]bool{} // a dry run's results listed for removal
	var old []ledger.Entry
	late := func(e ledger.Entry) bool { return o.ordered() && e.Updated.After(o.Before) }
	for _, e := range all {
		if e.State.Terminal() && e.Expires.Add(c.opt.Skew).Before(now) && !late(e) {
			old = append(old, e)
		}
	}
	for _, e := range all {
		if late(e) {
			continue // finished after the order: the next collection's
		}
		if !e.State.Terminal() {
			if o.Explain {
				rep.keep(keptUnfinished, time.Time{})
			}
			continue
		}
		if _, err := c.folder.Lstat(bridge.ResultPath(c.me, e.Agent, e.ID, bridge.ExtResult)); err != nil {
			// Nothing published, or collected already; a lone output is
			// what a crash between the two removals leaves: finish it.
			if _, oerr := c.folder.Lstat(bridge.ResultPath(c.me, e.Agent, e.ID, bridge.ExtOutput)); oerr == nil && !o.DryRun && c.acked(e) {
				c.folder.Remove(bridge.ResultPath(c.me, e.Agent, e.ID, bridge.ExtOutput))
			}
			continue
		}
		why := ""
		age := now.Sub(e.Updated)
		switch {
		// An acked result stays until its request expires too: until then
		// a copy of the request may come back, and should the ledger have
		// been restored from a backup meanwhile, this result is what shows
		// that the host answered it (DESIGN §6, record-lost).
		case age > o.Grace && e.Expires.Add(c.opt.Skew).Before(now) && c.acked(e):
			why = "acked"
		// The retention is for results nobody acked: an acked one waits
		// for its request's expiry above, however short the retention.
		case age > o.Retention && (e.Expires.Add(c.opt.Skew).Before(now) || !c.acked(e)):
			why = "retention"
		default:
			if o.Explain {
				if expires := e.Expires.Add(c.opt.Skew); c.acked(e) {
					rep.keep(keptAcked, later(e.Updated.Add(o.Grace), expires))
				} else {
					rep.keep(keptUnacked, e.Updated.Add(o.Retention))
				}
			}
			continue
		}
		rep.Items = append(rep.Items, GCItem{Agent: e.Agent, ID: e.ID, What: "result", Why: why})
		if o.DryRun {
			listed[e.Key] = true // as if removed, for the entries below
			continue
		}
		// Output first, the manifest last: a crash in between leaves the
		// manifest, which the next collection finds and finishes.
		progress.remove(e.Agent, e.ID)
		for _, ext := range []string{bridge.ExtOutput, bridge.ExtResult} {
			if err := c.folder.Remove(bridge.ResultPath(c.me, e.Agent, e.ID, ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return rep, err
			}
			c.crashPoint("gc")
		}
		// Recorded as finished with no result: a rescan then leaves it be
		// (the agent holds the result it acked), and the next periodic
		// collection passes over it until it expires.
		st := c.out.resultStamp(e.Agent, e.ID)
		c.fin.mu.Lock()
		c.fin.done.set(e.Key, st)
		c.fin.mu.Unlock()
		c.audit.log(AuditEvent{Event: "collected", Agent: e.Agent, ID: e.ID, Reason: why})
	}
	if o.Explain {
		for _, e := range all {
			if !e.State.Terminal() || e.Expires.Add(c.opt.Skew).Before(now) {
				continue // unfinished: told above; expired: forgotten below
			}
			if _, err := c.folder.Lstat(bridge.ResultPath(c.me, e.Agent, e.ID, bridge.ExtResult)); err != nil || listed[e.Key] {
				rep.keep(keptEntry, e.Expires.Add(c.opt.Skew))
			}
		}
	}
	c.collectMessages(o, rep, now)
	for _, e := range old {
		// An entry is forgotten only once its result is gone from the
		// folder, or the retention passed: an agent that never acked may
		// still come back for it.
		_, resErr := c.folder.Lstat(bridge.ResultPath(c.me, e.Agent, e.ID, bridge.ExtResult))
		_, outErr := c.folder.Lstat(bridge.ResultPath(c.me, e.Agent, e.ID, bridge.ExtOutput))
		published := (resErr == nil || outErr == nil) && !listed[e.Key]
		if published && now.Sub(e.Updated) <= o.Retention {
			continue // told above, as its result
		}
		rep.Items = append(rep.Items, GCItem{Agent: e.Agent, ID: e.ID, What: "ledger entry", Why: "expired"})
		if o.DryRun {
			continue
		}
		progress.remove(e.Agent, e.ID)
		for _, ext := range []string{bridge.ExtOutput, bridge.ExtResult} {
			if err := c.folder.Remove(bridge.ResultPath(c.me, e.Agent, e.ID, ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return rep, err
			}
		}
		for _, p := range []string{c.home.Path("results", e.Agent, e.ID+"."+bridge.ExtResult), c.home.Path("results", e.Agent, e.ID+"."+bridge.ExtOutput),
			c.home.Path("results", e.Agent, e.ID+"."+bridge.ExtResult+supersededSuffix), c.home.Path("results", e.Agent, e.ID+"."+bridge.ExtOutput+supersededSuffix),
			c.out.keptPath(e.Agent, e.ID, bridge.ExtManifest), c.out.keptPath(e.Agent, e.ID, operator.ExtUnrecorded)} {
			os.Remove(p)
		}
		// The ledger entry goes last: while it exists the id cannot run
		// again, and once it is gone the request is past its expiry plus
		// skew and is refused as expired.
		if _, err := c.ledger.Forget(e.Key, now, c.opt.Skew); err != nil {
			return rep, err
		}
		// The finished set (kept across restarts) forgets it too, so it
		// holds no more than the ledger.
		c.fin.mu.Lock()
		c.fin.done.del(e.Key)
		delete(c.fin.acks, e.Key)
		c.fin.mu.Unlock()
		// A repair reading the audit log later must not take the id for
		// one whose record was lost (evidence.go).
		c.audit.log(AuditEvent{Event: "forgotten", Agent: e.Agent, ID: e.ID})
	}
	names := c.agents()
	for i := range rep.Items {
		rep.Items[i].AgentName = rep.Items[i].Agent
		if k := names[rep.Items[i].Agent]; k != nil {
			rep.Items[i].AgentName = k.name
		}
	}
	return rep, nil
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// gcWants is the daemon's filter on the settled entries a collection reads
// (the ledger skips the others without decoding them). A finished request
// whose result stamp says what is published needs nothing until one of
// these: its agent acks (the watcher sees every ack file, each full walk
// again), its retention passes, or it expires with nothing published.
// Anything the daemon has no stamp for is read (an order, `bridge gc`,
// goes by times alone instead: due). Skipping only delays a collection: a request is
// never run again for it, and every skipped entry is read once one of
// those conditions holds. At 100,000 unacked finished requests this is the
// difference between decoding them all and 400,000 file lookups every ten
// minutes, and a scan of raw records.
func (f *finishedSet) gcWants(o GCOptions, now time.Time) func(key string, updated, expires time.Time) bool {
	retained := now.Add(-o.Retention)
	expired := now.Add(-f.opt.Skew)
	return func(key string, updated, expires time.Time) bool {
		if updated.Before(retained) {
			return true
		}
		f.mu.Lock()
		st, known := f.done.get(key)
		acked := f.acks[key]
		f.mu.Unlock()
		published := st.size >= 0 || st.outSize >= 0
		switch {
		case !known:
			return true
		case published:
			return acked && expires.Before(expired) // an acked result stays until its request expires
		default:
			return expires.Before(expired)
		}
	}
}

// acked reports whether the agent published a valid ack naming the result
// the host published for e.
func (c *collector) acked(e ledger.Entry) bool {
	keys := c.agents()[e.Agent]
	if keys == nil {
		return false
	}
	p := bridge.RequestPath(c.me, e.Agent, e.ID, bridge.ExtAck)
	data, err := c.folder.ReadFile(p, bcrypto.KindAck.MaxSize())
	if err != nil {
		return false
	}
	a, err := bridge.OpenAck(data, e.ID, c.me, e.Agent, keys.sign(c.opt.Now()))
	switch {
	case err == nil:
		return a.ResultSHA256 == e.ResultSHA256
	case ackCutShort(data, err, func(b []byte) error {
		_, err := bridge.OpenAck(b, e.ID, c.me, e.Agent, keys.sign(c.opt.Now()))
		return err
	}):
		// The agent publishes its ack without an fsync (SPEC §10): a power
		// cut on its machine can leave one empty, zeros or cut short. That
		// is a lost ack, not a forgery: the result stays until its
		// retention, or until the agent acks again (`result --ack`).
		c.waiting(p, len(data), fmt.Errorf("%w: an ack that is empty, zeros or cut short, as a power cut on the agent's machine leaves one (a lost ack): %v", bcrypto.ErrTruncated, err))
	default:
		c.refuseFile(p, err)
	}
	return false
}

// ackCutShort reports whether data, an ack that did not open with err, is
// what a power cut leaves of one written without an fsync: nothing,
// nothing but zeros, or a beginning, alone or followed by zeros (a size
// made durable before the bytes; open opens the beginning). Anything else
// is refused (a forgery, or another agent's). Only the log line depends
// on it: an ack that does not open never lets a result be collected.
func ackCutShort(data []byte, err error, open func([]byte) error) bool {
	if errors.Is(err, bcrypto.ErrTruncated) {
		return true
	}
	head := bytes.TrimRight(data, "\x00")
	return len(head) == 0 || len(head) < len(data) && errors.Is(open(head), bcrypto.ErrTruncated)
}

// due reads the settled entries a collection may act on at now. The
// daemon's periodic one goes by gcWants. An order (`bridge gc`) reads the
// acks from the folder instead (collect), not the watcher's cache of them,
// which holds none before the daemon's first walk: skipping by it would
// keep every result acked while the daemon was down, and say nothing. It
// reads by times alone what it could act on: past the retention, or
// expired (an acked result is due only once its request expired), not
// every entry older than the grace (at 100,000 finished requests, 3.5 s
// and 60 MB of heap more).
func (c *collector) due(o GCOptions, now time.Time) ([]ledger.Entry, error) {
	if o.ordered() {
		return c.ledger.Settled(now.Add(-o.Retention), now.Add(-c.opt.Skew), nil)
	}
	return c.ledger.Settled(now.Add(-min(o.Grace, o.Retention)), now.Add(-c.opt.Skew), c.fin.gcWants(o, now))
}

// run is the daemon's periodic (and ordered) collection.
func (c *collector) run(o GCOptions) {
	// Only entries old enough for collect to act on: it collects nothing
	// younger than both the grace and the retention unless it expired (a
	// lone output that a crash left behind is removed once its entry is
	// that old).
	o.defaults()
	c.sweepApprovalInputs()
	now := o.at(c.opt.Now())
	all, err := c.due(o, now)
	if err == nil {
		var rep *GCReport
		if rep, err = c.collect(o, all); err == nil && o.ordered() {
			// The operator was told to look here: said even of nothing.
			c.log.Info("collected, as `bridge gc` ordered", "items", len(rep.Items))
		} else if err == nil && len(rep.Items) > 0 {
			c.log.Info("collected", "items", len(rep.Items))
		}
	}
	if err != nil {
		c.log.Warn("gc", "err", err)
	}
}

// GC runs one collection on a host home. With the daemon running, a real
// collection is left as an order the daemon carries out within a second,
// bounded to what finished before the order (operator.ErrQueued). A dry
// run only reads, whether the daemon runs or not: the folder, the trusted
// agents and a snapshot of the ledger; it takes no lock and writes
// nothing, in the home or the folder.
func GC(h *trust.Home, o GCOptions) (*GCReport, error) { return gcAt(h, o, nil) }

// gcAt is GC with the daemon's clock (nil: the real one).
func gcAt(h *trust.Home, o GCOptions, now func() time.Time) (*GCReport, error) {
	d, err := NewDaemon(h, DaemonOptions{Now: now})
	if err != nil {
		return nil, err
	}
	if o.DryRun {
		if d.folder, err = h.ReadFolder(); err != nil {
			return nil, err
		}
		defer d.folder.Close()
		if err := d.keys.loadAgents(); err != nil {
			return nil, err
		}
		all, err := operator.LedgerEntries(h)
		if err != nil {
			return nil, err
		}
		return d.gc.collect(o, all)
	}
	err = d.openCore()
	if errors.Is(err, syncsafe.ErrLocked) {
		at := time.Now()
		if now != nil {
			at = now()
		}
		// What the daemon will do, from a snapshot: a dry run of the same,
		// bounded as the order is, and read before the order is handed
		// over (after it, a quick daemon has collected already, and the
		// list would be empty).
		dry := o
		dry.DryRun, dry.Before = true, at
		rep, derr := gcAt(h, dry, now)
		if derr != nil {
			rep = nil
		} else {
			// A real collection, carried out by the daemon: the items
			// are the dry run's preview of it.
			rep.DryRun, rep.Queued = false, true
		}
		if err := operator.WriteOrder(h, operator.Order{GC: true, Grace: o.Grace, Retention: o.Retention, At: at}); err != nil {
			return nil, err
		}
		return rep, fmt.Errorf("%w: `bridge serve` runs on this home and collects what finished until now within a second (see its log)", operator.ErrQueued)
	} else if err != nil {
		return nil, err
	}
	defer d.closeResources()
	// The finished-requests cache forgets what the ledger forgets, or the
	// next start would take a forgotten id for one it knows.
	d.fin.load()
	all, err := d.ledger.List(nil)
	if err != nil {
		return nil, err
	}
	rep, err := d.gc.collect(o, all)
	if serr := d.fin.save(); serr != nil && err == nil {
		err = serr
	}
	return rep, err
}

// progressFiles finds the progress chunks of finished requests for one
// collection: each agent's directory is listed once, when the first of its
// requests is collected, not once per request (it holds two files for
// every result kept).
type progressFiles struct {
	*base
	names map[string]map[string][]string // agent → request id → chunk names
}

// remove removes the progress chunks of a finished request.
func (p *progressFiles) remove(agent, id string) {
	if p.names == nil {
		p.names = map[string]map[string][]string{}
	}
	byID, ok := p.names[agent]
	if !ok {
		byID = map[string][]string{}
		p.names[agent] = byID
		entries, _ := p.folder.ListFunc(bridge.ToAgentDir(p.me, agent), func(name string) bool {
			_, _, ok := bridge.ParseProgressName(name)
			return ok
		})
		for _, e := range entries {
			cid, _, _ := bridge.ParseProgressName(e.Name)
			byID[cid] = append(byID[cid], e.Name)
		}
	}
	for _, name := range byID[id] {
		p.folder.Remove(bridge.ToAgentDir(p.me, agent) + "/" + name)
	}
	delete(byID, id)
}

// sweepTemps removes the publish temporaries a crash left among the
// trusted agents' results, once, after the start-up scan. Publishes run by
// then: the folder never sweeps a temporary its own publishes are writing
// (whatever the clocks say), and of the others only one older than the
// start (opened), by a minute's margin, is a crash's (another process may be
// publishing; an in-folder temporary has a fixed name, and one left at it
// only sends the next publish of that name to a unique one meanwhile).
func (c *collector) sweepTemps(opened time.Time) {
	older := max(time.Since(opened), 0) + time.Minute
	for id := range c.agents() {
		if _, err := c.folder.SweepTemps(bridge.ToAgentDir(c.me, id), older); err != nil {
			c.log.Debug("sweep the temporaries among an agent's results", "agent", id, "err", err)
		}
	}
	c.probe.Add(probe.TempSweeps)
}
