package host

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// The ledger is the host's memory of every id, but not its only trace. When
// `bridge ledger repair` drops the records after a damaged one, or a home
// is restored from a backup, a request that ran may come back (its files
// are still in the folder) to a ledger that has no record of it. Before an
// id new to the ledger is recorded, evidence looks for what else remembers
// it; anything found makes the request uncertain (record-lost), held for a
// human, instead of running a second time (DESIGN §6, row record-lost).

// lostName is the home file `bridge ledger repair` writes: the ledger keys
// ("agent/id") the audit log or the home knew and the repaired ledger does
// not, one per line.
const lostName = "lost"

// evidence reports what shows that this host admitted request agent/id
// before, though the ledger has no record of it ("" if nothing does).
// Cheapest first: memory, the home, then the folder.
func (d *Daemon) evidence(agent, id string) string {
	key := agent + "/" + id
	d.fin.mu.Lock()
	_, finished := d.fin.done.get(key)
	lost := d.fin.lost[key]
	d.fin.mu.Unlock()
	switch {
	case lost:
		return "the audit log recorded it before the ledger was repaired"
	case finished:
		return "the finished-requests cache lists it"
	}
	if _, err := os.Stat(d.out.keptPath(agent, id, bridge.ExtManifest)); err == nil {
		return "its manifest was kept in the home"
	}
	if d.out.hasSealedResult(agent, id) {
		return "its result was sealed in the home"
	}
	if data, err := d.folder.ReadFile(bridge.ResultPath(d.me, agent, id, bridge.ExtResult), bcrypto.KindResult.MaxSize()); err == nil {
		if _, err := d.out.ownResult(data, agent, id); err == nil {
			return "its result, signed by this host, is in the folder"
		}
	}
	if data, err := d.folder.ReadFile(bridge.ProgressPath(d.me, agent, id, 1), bcrypto.KindProgress.MaxSize()); err == nil {
		c := bridge.ProgressCheck{ID: id, Host: d.me, Agent: agent, Seq: 1, HostKeys: d.own().signPubs()}
		if _, err := bridge.OpenProgress(data, c); err == nil {
			return "its output, signed by this host, is in the folder"
		}
	}
	if _, ok := d.gc.agentAck(agent, id); ok {
		return "the agent acked a result of it"
	}
	return ""
}

// agentAck reads the agent's ack of request agent/id, if one it signed is
// in the folder with a key valid now (its current one, or the one before
// within a rotation's overlap): never a revoked or rotated-out key, whose
// thief must not make evidence that holds a fresh request (DESIGN §3). The
// keys' standing is read fresh from the home, as for a start: a revocation
// counts from the moment `bridge keys revoke` returned.
func (c *collector) agentAck(agent, id string) (*bridge.Ack, bool) {
	data, err := c.folder.ReadFile(bridge.RequestPath(c.me, agent, id, bridge.ExtAck), bcrypto.KindAck.MaxSize())
	if err != nil {
		return nil, false
	}
	p, err := c.home.PeerByID(agent)
	if err != nil {
		return nil, false
	}
	keys := &agentKeys{name: p.Name, peer: *p}
	a, err := bridge.OpenAck(data, id, c.me, agent, keys.sign(c.opt.Now()))
	return a, err == nil
}

// folderResult reads the result in the folder for agent/id if this host
// signed it for the request whose manifest hashes to manifestSHA, and no
// earlier than notBefore (zero: any time): the sha and status of a result
// the agent can open, output and all. A result of another manifest of the
// id, one older than what the ledger recorded last (a folder writer putting
// back an earlier answer), and one whose output is gone (nobody can use it,
// and the home could not keep it) are not.
func (o *outbox) folderResult(agent, id, manifestSHA string, notBefore time.Time) (sha, status string, ok bool) {
	data, err := o.folder.ReadFile(bridge.ResultPath(o.me, agent, id, bridge.ExtResult), bcrypto.KindResult.MaxSize())
	if err != nil {
		return "", "", false
	}
	res, err := o.openOwnResult(data, agent, id)
	if err != nil || res.RequestSHA256 != manifestSHA || !notBefore.IsZero() && res.Created < notBefore.Unix() {
		return "", "", false
	}
	if !o.outputIntact(data, bridge.ResultPath(o.me, agent, id, bridge.ExtOutput)) {
		return "", "", false
	}
	return bridge.SHA256Hex(data), res.Status, true
}

// newerResult is folderResult for a ledger entry: a result of its request
// made since the entry last moved (its time, in the result's whole
// seconds), which the entry therefore does not account for if its hash is
// not the one recorded.
func (o *outbox) newerResult(ent ledger.Entry) (sha, status string, ok bool) {
	return o.folderResult(ent.Agent, ent.ID, ent.ManifestSHA256, ent.Updated)
}

// catchUp records a result this host signed that the folder holds and the
// ledger entry is behind (found by newerResult): the ledger takes that
// result's state (through uncertain where it cannot go there directly),
// and the home keeps a copy of it in place of an older one, so that
// nothing publishes the older again. The caller owns the key.
func (d *Daemon) catchUp(j *job, ent ledger.Entry, sha, status string) {
	if ent.State == ledger.StateUncertain && !ledger.CanTransition(ledger.StateUncertain, statusState[status]) {
		// Uncertain either way (a rerun ran again after the backup and
		// was interrupted too): the human decides, and must know that it
		// ran again. The home keeps the newer answer, so nothing publishes
		// the older.
		if d.firstTime("keep:" + ent.Key + ":" + sha) {
			d.out.keepFolderResult(ent.Agent, ent.ID)
			d.audit.log(AuditEvent{Event: "record-lost", Agent: ent.Agent, ID: ent.ID, Status: status,
				Detail: "ledger uncertain; the folder holds a newer uncertain result of this host: it was run again after the ledger's last record (a home restored from a backup?)"})
			d.log.Error("the ledger is behind a rerun of an uncertain request, which was interrupted too: it may have run more often than the ledger's count says",
				"key", ent.Key, "runs recorded", ent.Runs, "hint", "check its effect before `bridge reconcile "+ent.Key+" --as done|failed|rerun`")
		}
		return
	}
	if !d.out.keepFolderResult(ent.Agent, ent.ID) {
		return // read again by the next look (newerResult found it whole a moment ago)
	}
	d.fin.forgetLost(ent.Key)
	d.audit.log(AuditEvent{Event: "record-lost", Agent: ent.Agent, ID: ent.ID,
		Detail: fmt.Sprintf("ledger %s; the folder holds a newer %s result of this host", ent.State, status)})
	d.log.Warn("the ledger is behind a result this host signed: recording that result", "key", ent.Key, "state", ent.State, "result", status)
	rc := bridge.Receipt{Status: status, Reason: bridge.ReasonRecordLost, Op: ent.Op}
	ev := evAdopt
	if ent.State == ledger.StateUncertain {
		ev = evCatchUp
	}
	d.probe.Event(string(ev))
	d.record(j, ev, ent.State, sha, rc, true)
}

// keepFolderResult copies the result pair the folder holds for agent/id
// into the home's private copies, and reports whether it did (the folder's
// stays in place either way).
func (o *outbox) keepFolderResult(agent, id string) bool {
	dir := o.home.Path("results", agent)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false
	}
	manifest, err := o.folder.ReadFile(bridge.ResultPath(o.me, agent, id, bridge.ExtResult), bcrypto.KindResult.MaxSize())
	if err != nil {
		return false
	}
	res, err := o.openOwnResult(manifest, agent, id)
	if err != nil {
		return false
	}
	var out bytes.Buffer
	if syncsafe.Settle(o.folder, bridge.ResultPath(o.me, agent, id, bridge.ExtOutput), res.Payload.Len, res.Payload.Digest(), &out) != nil {
		return false
	}
	// Output first, the manifest last: the manifest copy says the pair is
	// complete (hasSealedResult).
	if syncsafe.WriteFileAtomic(filepath.Join(dir, id+"."+bridge.ExtOutput), out.Bytes()) != nil {
		return false
	}
	return syncsafe.WriteFileAtomic(filepath.Join(dir, id+"."+bridge.ExtResult), manifest) == nil
}

// behind reports what shows that the host took a request further than its
// ledger entry says (a ledger restored from a backup, or repaired after the
// records of a run were lost): an entry not yet answered, and not yet
// started by this ledger, whose request this host answered or ran before.
// "" if nothing does. Only what the ledger entry does not already account
// for counts: the result it recorded (a human's rerun keeps it until the
// new answer); for an entry the ledger knows ran or was answered before (a
// human's rerun), the output and acks of those earlier runs.
func (d *Daemon) behind(ent ledger.Entry) string {
	d.fin.mu.Lock()
	lost := d.fin.lost[ent.Key]
	d.fin.mu.Unlock()
	if lost {
		return "the audit log shows it went further than the ledger before the ledger was repaired"
	}
	if sha, _, ok := d.out.newerResult(ent); ok && sha != ent.ResultSHA256 {
		return "a result of it, signed by this host, is in the folder"
	}
	if ranBefore(ent) || ent.ResultSHA256 != "" {
		return "" // a rerun: the earlier runs' output and acks are accounted for
	}
	if data, err := d.folder.ReadFile(bridge.ProgressPath(d.me, ent.Agent, ent.ID, 1), bcrypto.KindProgress.MaxSize()); err == nil {
		c := bridge.ProgressCheck{ID: ent.ID, Host: d.me, Agent: ent.Agent, Seq: 1, HostKeys: d.own().signPubs()}
		if _, err := bridge.OpenProgress(data, c); err == nil {
			return "its output, signed by this host, is in the folder"
		}
	}
	if _, ok := d.gc.agentAck(ent.Agent, ent.ID); ok {
		return "the agent acked a result of it"
	}
	return ""
}

// holdBehind records an unanswered entry that behind found evidence for as
// uncertain (record-lost), telling the agent unless it holds an answer
// already, and reports whether it did (the caller owns the key).
//
// When the evidence is a result this host signed, the ledger records that
// result, which its agent holds or will: the host's own signed answer is
// what happened, and a human has nothing to settle.
func (d *Daemon) holdBehind(j *job, ent ledger.Entry) bool {
	if sha, status, ok := d.out.newerResult(ent); ok && sha != ent.ResultSHA256 {
		d.catchUp(j, ent, sha, status)
		return true
	}
	why := d.behind(ent)
	if why == "" {
		return false
	}
	resSHA, status := d.answerLost(j, why, ent.Updated)
	d.fin.forgetLost(ent.Key)
	d.audit.log(AuditEvent{Event: "record-lost", Agent: ent.Agent, ID: ent.ID, Detail: fmt.Sprintf("ledger %s: %s", ent.State, why)})
	if status != "" && status != bridge.StatusUncertain {
		d.log.Warn("the ledger is behind a result this host signed: recording that result", "key", ent.Key, "state", ent.State, "result", status)
		d.record(j, evAdopt, ent.State, resSHA, bridge.Receipt{Status: status, Reason: bridge.ReasonRecordLost, Op: ent.Op}, true)
		return true
	}
	d.probe.Event(string(evRecordLost))
	rc := bridge.Receipt{Status: bridge.StatusUncertain, Reason: bridge.ReasonRecordLost, Op: ent.Op}
	if err := d.record(j, evRecordLost, ent.State, resSHA, rc, false); err != nil {
		return true // violation: the daemon stops
	}
	d.log.Error("the ledger is behind what this host did with a request: held uncertain, never run again",
		"key", ent.Key, "state", ent.State, "evidence", why, "hint", "bridge reconcile "+j.keys.name+"/"+ent.ID+" --as done|failed|rerun")
	return true
}

// forgetLost drops a key from the repair's lost list once it is recorded
// (held uncertain): a human's rerun of it later must not be held again.
func (f *finishedSet) forgetLost(key string) {
	f.mu.Lock()
	if !f.lost[key] {
		f.mu.Unlock()
		return
	}
	delete(f.lost, key)
	keys := slices.Sorted(maps.Keys(f.lost))
	f.mu.Unlock()
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintln(&b, k)
	}
	if err := syncsafe.WriteFileAtomic(f.home.Path(lostName), b.Bytes()); err != nil {
		f.log.Warn("rewrite the lost list", "err", err)
	}
}

// sealedFor reports whether the home holds a result sealed for the job's
// very request (a home restored from a backup may hold one for another
// manifest of the id, which its agent could not open).
func (o *outbox) sealedFor(j *job) bool {
	data, err := os.ReadFile(o.home.Path("results", j.agent, j.req.ID+"."+bridge.ExtResult))
	if err != nil {
		return false
	}
	res, err := o.openOwnResult(data, j.agent, j.req.ID)
	return err == nil && res.RequestSHA256 == j.sha
}

// keptNewer reports whether the home keeps a result of j's request other
// than the folder's (whose manifest hashes to folderSHA) and made no
// earlier: the home's answer stands against the folder's.
func (o *outbox) keptNewer(j *job, folderSHA string) bool {
	data, err := os.ReadFile(o.home.Path("results", j.agent, j.req.ID+"."+bridge.ExtResult))
	if err != nil || bridge.SHA256Hex(data) == folderSHA {
		return false
	}
	kept, err := o.openOwnResult(data, j.agent, j.req.ID)
	if err != nil || kept.RequestSHA256 != j.sha {
		return false
	}
	folder, err := o.folder.ReadFile(bridge.ResultPath(o.me, j.agent, j.req.ID, bridge.ExtResult), bcrypto.KindResult.MaxSize())
	if err != nil {
		return true
	}
	res, err := o.openOwnResult(folder, j.agent, j.req.ID)
	return err != nil || kept.Created >= res.Created
}

// hasSealedResult reports whether a result for agent/id was sealed into the
// home (the manifest copy is written last: it implies a complete pair).
func (o *outbox) hasSealedResult(agent, id string) bool {
	_, err := os.Stat(o.home.Path("results", agent, id+"."+bridge.ExtResult))
	return err == nil
}

// loadLost reads the keys a ledger repair found lost.
func (f *finishedSet) loadLost() {
	data, err := os.ReadFile(f.home.Path(lostName))
	if err != nil {
		return
	}
	m := map[string]bool{}
	for _, k := range strings.Fields(string(data)) {
		m[k] = true
	}
	f.mu.Lock()
	f.lost = m
	// The finished-requests cache vouches for what a ledger once recorded;
	// for a key the repair found lost, the request must be looked at again.
	for k := range m {
		f.done.del(k)
	}
	f.mu.Unlock()
}

// RepairReport is what RepairLedger did: the ledger's own repair, and the
// requests whose records it lost.
type RepairReport struct {
	ledger.RepairReport
	// Lost are the requests (AGENT/ID, AGENT the agent's local name) that
	// the audit log or the home knew further than the repaired ledger does,
	// this repair's and an earlier one's that have not come back yet. If
	// one of them comes back, the daemon holds it uncertain instead of
	// running it.
	Lost []string `json:"lost"`
}

// Files are the reports of the ledger's files: ledger.db, then its
// archive if there is one.
func (r RepairReport) Files() []ledger.RepairReport {
	out := []ledger.RepairReport{r.RepairReport}
	out[0].Archive = nil
	if r.Archive != nil {
		out = append(out, *r.Archive)
	}
	return out
}

// RepairLedger makes a damaged ledger loadable again (the daemon must be
// stopped): it keeps a copy of the damaged file and truncates at the last
// complete record. Then it compares what the ledger kept with the audit
// log, the kept manifests and the sealed results, and records the requests
// whose records were lost, so that none of them runs again.
func RepairLedger(h *trust.Home) (RepairReport, error) {
	if h.Config.Role != "host" {
		return RepairReport{}, bridge.WithHint(errors.New("ledger repair: only a host has a ledger"), "run it with the host's --home")
	}
	if _, err := os.Stat(h.Path("ledger", "ledger.db")); errors.Is(err, fs.ErrNotExist) {
		return RepairReport{}, bridge.WithHint(errors.New("ledger repair: there is no ledger yet"), "`bridge serve` creates it")
	}
	rep, err := ledger.Repair(h.Path("ledger"))
	out := RepairReport{RepairReport: rep, Lost: []string{}}
	if err != nil {
		return out, err
	}
	keys, err := findLost(h)
	names := operator.AgentNames(h)
	for _, k := range keys {
		agent, id, _ := strings.Cut(k, "/")
		out.Lost = append(out.Lost, operator.RefName(names, LedgerEntry{Agent: agent, ID: id}))
	}
	return out, err
}

// findLost lists the keys the home's other records know further than the
// ledger does: missing from it, or (by the audit log) run or answered while
// the ledger entry is not yet running. It adds them to the lost file and
// returns every key the file holds: those of an earlier repair that have
// not come back yet too, so that running it twice says the same.
func findLost(h *trust.Home) ([]string, error) {
	entries, err := ledger.Snapshot(h.Path("ledger"))
	if err != nil {
		return nil, err
	}
	inLedger := map[string]ledger.State{}
	for _, e := range entries {
		inLedger[e.Key] = e.State
	}
	known, err := auditKeys(h)
	if err != nil {
		return nil, err
	}
	for _, pattern := range []string{"*." + bridge.ExtManifest, "*." + bridge.ExtResult} {
		dir := "manifests"
		if pattern == "*."+bridge.ExtResult {
			dir = "results"
		}
		files, _ := filepath.Glob(h.Path(dir, "*", pattern))
		for _, f := range files {
			id, _, _ := strings.Cut(filepath.Base(f), ".")
			if bridge.ValidID(id) {
				k := filepath.Base(filepath.Dir(f)) + "/" + id
				known[k] = max(known[k], auditSeen)
			}
		}
	}
	old, _ := os.ReadFile(h.Path(lostName))
	have := map[string]bool{}
	for _, k := range strings.Fields(string(old)) {
		have[k] = true
	}
	var lost []string
	for k, rank := range known {
		st, ok := inLedger[k]
		behind := !ok || rank >= auditRun && (st == ledger.StateSeen || st == ledger.StatePending ||
			st == ledger.StateAwaitingApproval || st == ledger.StateClaimed)
		if behind && !have[k] {
			lost = append(lost, k)
		}
	}
	all := append(slices.Sorted(maps.Keys(have)), lost...)
	sort.Strings(all)
	if len(lost) == 0 {
		return all, nil
	}
	var b bytes.Buffer
	b.Write(old)
	for _, k := range lost {
		fmt.Fprintln(&b, k)
	}
	return all, syncsafe.WriteFileAtomic(h.Path(lostName), b.Bytes())
}

// How far the audit log says a request went.
const (
	auditSeen     = 1 + iota // recorded
	auditClaimed             // claimed, awaiting approval, decided
	auditRun                 // its op started
	auditAnswered            // a result was recorded
)

// auditKeys returns, per ledger key the audit log names, how far its
// request went, except keys collected for good afterwards (forgotten, past
// their expiry: a copy of them is refused as expired anyway). A human's
// rerun starts a request's way again from claimed.
func auditKeys(h *trust.Home) (map[string]int, error) {
	f, err := os.Open(h.Path(auditName))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]int{}, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	keys := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e AuditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Agent == "" || !bridge.ValidID(e.ID) {
			continue
		}
		k := e.Agent + "/" + e.ID
		switch e.Event {
		case "forgotten":
			delete(keys, k)
		case "seen":
			keys[k] = max(keys[k], auditSeen)
		case "awaiting-approval", "claimed", "approved", "denied":
			keys[k] = max(keys[k], auditClaimed)
		case "run":
			keys[k] = max(keys[k], auditRun)
		case "result", "record-lost":
			keys[k] = max(keys[k], auditAnswered)
		case "reconcile":
			if e.Detail == "as rerun" {
				keys[k] = auditClaimed
			}
		}
	}
	return keys, sc.Err()
}
