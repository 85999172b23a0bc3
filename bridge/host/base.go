package host

import (
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
)

// base is what every room of the daemon shares (the Daemon, its outbox):
// the home and the folder, the ledger and the audit log, the keys and the
// policy in force, the log and what may be written to it. NewDaemon makes
// it and Open fills it in; from then on the pointers stay, and what changes
// (keys, policy) is swapped whole through atomics.
type base struct {
	home    *trust.Home
	opt     DaemonOptions
	log     *slog.Logger
	me      string
	folder  *syncsafe.Folder
	ledger  *ledger.Ledger
	audit   *auditLog
	agentsP atomic.Pointer[map[string]*agentKeys] // by agent id; replaced whole when keys change
	ownP    atomic.Pointer[ownKeys]
	rulesP  atomic.Pointer[rules] // the policy in force and its redactor (reload.go)
	notes   noted                 // lines folder input may make us write
	limits  limits                // defaultLimits; set before Open, read-only after
	ownDirs ownWrites             // the daemon's own changes to result directories (resultcheck.go)
	// The daemon's stop. closing is set only by scheduler.close, under the
	// scheduler's lock (its workers wait on its condition for it), before
	// anything drains; Abort sets killed, and what it killed is left
	// running for the next start.
	closing, killed atomic.Bool
	probe           *probe.Probe // nil but in a test binary (probe.New)
}

func (b *base) agents() map[string]*agentKeys {
	if m := b.agentsP.Load(); m != nil {
		return *m
	}
	return nil
}

func (b *base) own() *ownKeys       { return b.ownP.Load() }
func (b *base) rules() *rules       { return b.rulesP.Load() }
func (b *base) pol() *policy.Policy { return b.rules().p }

// noted is the log-once set and the line budget of folder input, under a
// lock of their own: the rooms that write about the folder share them.
type noted struct {
	mu     sync.Mutex
	seen   map[uint64]bool // by maphash of the note (bounded; firstTime)
	seed   maphash.Seed
	budget lineBudget // lines folder input may make us write (refused.go)
}

// limits are the bounds that keep what folder input and an agent's queue
// may cost the daemon, how long a refused file must have settled before it
// is remembered, and the control loop's own schedule (its fallback look,
// its collection). A daemon starts with defaultLimits; a test shrinks them
// for its own daemon before Open (so tests of different bounds run side by
// side), and nothing changes them after.
type limits struct {
	// noted bounds the log-once set: names come from the folder, so a
	// writer could otherwise grow it forever.
	noted int
	// markSettle is how long ago a file must have last changed to be
	// marked refused (refusals.mark).
	markSettle time.Duration
	// refusedMarks bounds the refused marks' memory (about 100 bytes
	// each, with the map's own). Past it, more refused files are read
	// again at each rescan (costing time, not disk: the lines they make
	// are bounded by the budget).
	refusedMarks int
	// budgetLines per budgetEvery are the lines folder input may make the
	// daemon write per agent directory (lineBudget).
	budgetLines int
	budgetEvery time.Duration
	// waitingPerSlot is how many claimed requests may wait per slot of an
	// op with a concurrency (scheduler.reserveQueue).
	waitingPerSlot int
	// controlFallback is how often the control loop looks at the home by
	// itself, in case notify dropped a change, while no rescan of the
	// folder brings the look (controlLoop).
	controlFallback time.Duration
	// collectEvery is the interval of the periodic collection of finished
	// results (controlLoop).
	collectEvery time.Duration
	// resultDirTrust is how long after an agent's result directory last
	// changed (its modification or change time, the later) a check of its
	// results must have begun for the directory, unchanged since, to show
	// that no result was removed, renamed or put in place after that check
	// (shareToCheck): a change within the same timestamp tick as the one
	// before may leave the times as they were, which 2 s rule out on every
	// local file system (as the watcher's listings).
	resultDirTrust time.Duration
}

var defaultLimits = limits{
	noted:           100_000,
	markSettle:      2 * time.Second,
	refusedMarks:    1 << 18,
	budgetLines:     1000,
	budgetEvery:     time.Hour,
	waitingPerSlot:  8,
	controlFallback: 30 * time.Second,
	collectEvery:    10 * time.Minute,
	resultDirTrust:  2 * time.Second,
}

// firstTime reports whether key was not noted before. When the set is full
// it forgets a random half (map order), not all of it: a folder with more
// refused files than the bound has some of them logged again by a rescan,
// not every one by every rescan.
func (b *base) firstTime(key string) bool {
	n := &b.notes
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.seen, n.seed = map[uint64]bool{}, maphash.MakeSeed()
	}
	k := maphash.String(n.seed, key) // a fixed 8 bytes per note, whatever the names in key
	if n.seen[k] {
		return false
	}
	if len(n.seen) >= b.limits.noted {
		for k := range n.seen {
			if len(n.seen) <= b.limits.noted/2 {
				break
			}
			delete(n.seen, k)
		}
	}
	n.seen[k] = true
	return true
}

// noteFolder logs msg about the folder's p once per key and within the
// budget of its agent directory.
func (b *base) noteFolder(p, key, msg string, args ...any) {
	if b.firstTime(key) && b.folderLine(p) {
		b.log.Info(msg, args...)
	}
}

// folderLine asks the budget of the agent directory of p (relative to the
// folder, or to to-host) for one line, and says how many were left out
// since the last one.
func (b *base) folderLine(p string) bool {
	dir := p
	if rel, ok := strings.CutPrefix(p, bridge.ToHostRoot(b.me)+"/"); ok {
		dir = rel
	}
	dir, _, _ = strings.Cut(dir, "/")
	if b.agents()[dir] == nil {
		// Names a folder writer makes up share one budget: the top of
		// to-host counts as one directory, however many are in it.
		dir = ""
	}
	ok, left := b.notes.budget.take(dir, time.Now(), b.limits.budgetLines, b.limits.budgetEvery)
	if left > 0 {
		b.log.Warn(fmt.Sprintf("left out %d lines about refused or ignored files (at most %d an hour per agent directory)", left, b.limits.budgetLines),
			"dir", dir, "hint", "a folder writer may be flooding the folder; see `bridge doctor`")
		b.audit.log(AuditEvent{Event: "suppressed", File: dir, Detail: fmt.Sprintf("%d lines left out", left)})
	}
	return ok
}

// refuseFile records a file that will never be admitted as it is, once per
// version of the file and reason.
func (b *base) refuseFile(p string, err error) {
	// Once per version of the file: a changed file refused for the same
	// reason is news, whether or not the log-once set still holds the
	// line of its earlier version (it forgets at random when full).
	var v version
	if fi, err := b.folder.Lstat(p); err == nil {
		v = versionOf(fi)
	}
	if !b.firstTime(fmt.Sprintf("refused:%s:%v:%s", p, v, err)) || !b.folderLine(p) {
		return
	}
	b.log.Warn("refused", "file", p, "reason", bridge.Reason(err), "err", err)
	b.audit.log(AuditEvent{Event: "refused", File: p, Reason: string(bridge.Reason(err)), Detail: err.Error()})
}

// waiting records, once per file and state, that a file is not complete
// yet: not an error (it may still be arriving), but visible in the audit log
// with its reason. A request's is turned into a signed rejection after
// PendingTimeout; an ack's (a power cut's leftover, gc.go) stays a lost ack.
func (b *base) waiting(p string, size int, err error) {
	if !b.firstTime(fmt.Sprintf("waiting:%s:%d:%s", p, size, bridge.Reason(err))) || !b.folderLine(p) {
		return
	}
	b.log.Debug("waiting for a file to complete", "file", p, "reason", bridge.Reason(err), "err", err)
	b.audit.log(AuditEvent{Event: "waiting", File: p, Reason: string(bridge.Reason(err)), Detail: err.Error()})
}

// crashPoint exits at once if the tests asked for a crash at this step.
func (b *base) crashPoint(step string) {
	p := b.probe
	if !p.CrashNow(step) {
		return
	}
	if p.PowerCut {
		os.Truncate(b.ledger.Path(), b.ledger.SyncedSize())
		p.Cut()
	}
	os.Exit(probe.CrashExit)
}
