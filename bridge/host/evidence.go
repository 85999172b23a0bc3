package host

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/ledger"
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
	d.mu.Lock()
	_, finished := d.finished[key]
	lost := d.lost[key]
	d.mu.Unlock()
	switch {
	case lost:
		return "the audit log recorded it before the ledger was repaired"
	case finished:
		return "the finished-requests cache lists it"
	}
	if _, err := os.Stat(d.home.Path("manifests", agent, id+"."+bridge.ExtManifest)); err == nil {
		return "its manifest was kept in the home"
	}
	if d.hasSealedResult(agent, id) {
		return "its result was sealed in the home"
	}
	if data, err := d.folder.ReadFile(bridge.ResultPath(d.me, agent, id, bridge.ExtResult), bcrypto.KindResult.MaxSize()); err == nil {
		if _, err := d.ownResult(data, agent, id); err == nil {
			return "its result, signed by this host, is in the folder"
		}
	}
	if data, err := d.folder.ReadFile(bridge.ProgressPath(d.me, agent, id, 1), bcrypto.KindProgress.MaxSize()); err == nil {
		c := bridge.ProgressCheck{ID: id, Host: d.me, Agent: agent, Seq: 1, HostKeys: d.own().signPubs()}
		if _, err := bridge.OpenProgress(data, c); err == nil {
			return "its output, signed by this host, is in the folder"
		}
	}
	if keys := d.agents()[agent]; keys != nil {
		if data, err := d.folder.ReadFile(bridge.RequestPath(d.me, agent, id, bridge.ExtAck), bcrypto.KindAck.MaxSize()); err == nil {
			if _, err := bridge.OpenAck(data, id, d.me, agent, keys.allSign()); err == nil {
				return "the agent acked a result of it"
			}
		}
	}
	return ""
}

// hasSealedResult reports whether a result for agent/id was sealed into the
// home (the manifest copy is written last: it implies a complete pair).
func (d *Daemon) hasSealedResult(agent, id string) bool {
	_, err := os.Stat(d.home.Path("results", agent, id+"."+bridge.ExtResult))
	return err == nil
}

// loadLost reads the keys a ledger repair found lost.
func (d *Daemon) loadLost() {
	data, err := os.ReadFile(d.home.Path(lostName))
	if err != nil {
		return
	}
	m := map[string]bool{}
	for _, k := range strings.Fields(string(data)) {
		m[k] = true
	}
	d.mu.Lock()
	d.lost = m
	d.mu.Unlock()
}

// RepairReport is what RepairLedger did: the ledger's own repair, and the
// requests whose records it lost.
type RepairReport struct {
	ledger.RepairReport
	// Lost are the ledger keys ("agent/id") that the audit log or the home
	// knew and the repaired ledger does not. If one of them comes back, the
	// daemon holds it uncertain instead of running it.
	Lost []string `json:"lost"`
}

// RepairLedger makes a damaged ledger loadable again (the daemon must be
// stopped): it keeps a copy of the damaged file and truncates at the last
// complete record. Then it compares what the ledger kept with the audit
// log, the kept manifests and the sealed results, and records the requests
// whose records were lost, so that none of them runs again.
func RepairLedger(h *bridge.Home) (RepairReport, error) {
	if h.Config.Role != "host" {
		return RepairReport{}, bridge.WithHint(errors.New("ledger repair: only a host has a ledger"), "run it with the host's --home")
	}
	if _, err := os.Stat(h.Path("ledger", "ledger.db")); errors.Is(err, fs.ErrNotExist) {
		return RepairReport{}, bridge.WithHint(errors.New("ledger repair: there is no ledger yet"), "`bridge serve` creates it")
	}
	rep, err := ledger.Repair(h.Path("ledger"))
	out := RepairReport{RepairReport: rep}
	if err != nil {
		return out, err
	}
	out.Lost, err = findLost(h)
	return out, err
}

// findLost lists the keys known to the home's other records and missing
// from the ledger, adds them to the lost file, and returns the new ones.
func findLost(h *bridge.Home) ([]string, error) {
	entries, err := ledger.Snapshot(h.Path("ledger"))
	if err != nil {
		return nil, err
	}
	inLedger := map[string]bool{}
	for _, e := range entries {
		inLedger[e.Key] = true
	}
	known, err := auditKeys(h)
	if err != nil {
		return nil, err
	}
	for _, dir := range []string{"manifests", "results"} {
		files, _ := filepath.Glob(h.Path(dir, "*", "*"))
		for _, f := range files {
			id, _, _ := strings.Cut(filepath.Base(f), ".")
			if bridge.ValidID(id) {
				known[filepath.Base(filepath.Dir(f))+"/"+id] = true
			}
		}
	}
	old, _ := os.ReadFile(h.Path(lostName))
	have := map[string]bool{}
	for _, k := range strings.Fields(string(old)) {
		have[k] = true
	}
	var lost []string
	for k := range known {
		if !inLedger[k] && !have[k] {
			lost = append(lost, k)
		}
	}
	sort.Strings(lost)
	if len(lost) == 0 {
		return nil, nil
	}
	var b bytes.Buffer
	b.Write(old)
	for _, k := range lost {
		fmt.Fprintln(&b, k)
	}
	return lost, syncsafe.WriteFileAtomic(h.Path(lostName), b.Bytes())
}

// auditKeys returns the ledger keys the audit log names in an event of a
// request's life, except those collected for good afterwards (forgotten,
// past their expiry: a copy of them is refused as expired anyway).
func auditKeys(h *bridge.Home) (map[string]bool, error) {
	f, err := os.Open(h.Path(auditName))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	keys := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e AuditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Agent == "" || !bridge.ValidID(e.ID) {
			continue
		}
		switch {
		case e.Event == "forgotten":
			delete(keys, e.Agent+"/"+e.ID)
		case slices.Contains(requestEvents, e.Event):
			keys[e.Agent+"/"+e.ID] = true
		}
	}
	return keys, sc.Err()
}

// requestEvents are the audit events that show a request was recorded.
var requestEvents = []string{"seen", "awaiting-approval", "claimed", "run", "result", "record-lost", "reconcile", "approved", "denied"}
