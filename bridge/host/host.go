package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"

	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/policy"
	"github.com/syncbridge/bridge/bridge/runner"
	"github.com/syncbridge/bridge/syncsafe"
)

// RunnerMain must be the first call in the bridge binary's main: when the
// binary was started as the runner's resource-limit shim it applies the
// limits and execs the op, and never returns.
func RunnerMain() { runner.Main() }

// LedgerEntry is one request in the host's ledger.
type LedgerEntry = ledger.Entry

// LedgerEntries reads the host's ledger without disturbing a running daemon.
func LedgerEntries(h *bridge.Home) ([]LedgerEntry, error) {
	entries, err := ledger.Snapshot(h.Path("ledger"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}

// PolicySummary is what `bridge policy check` reports.
type PolicySummary struct {
	File   string              `json:"file"`
	SHA256 string              `json:"sha256"`
	Agents map[string][]string `json:"agents"`
	Ops    []policy.OpInfo     `json:"ops"`
}

// CheckPolicy loads a policy file strictly and summarises it.
func CheckPolicy(file string) (*PolicySummary, error) {
	p, err := policy.Load(file)
	if err != nil {
		return nil, err
	}
	s := &PolicySummary{File: file, SHA256: p.SHA256, Agents: map[string][]string{}, Ops: p.Catalog()}
	for _, a := range p.Agents() {
		s.Agents[a] = p.AgentOps(a)
	}
	return s, nil
}

// Explanation is what `bridge policy explain` reports.
type Explanation struct {
	Op    string   `json:"op"`
	Agent string   `json:"agent"`
	Argv  []string `json:"argv"`
	Dir   string   `json:"dir"`
	Env   []string `json:"env_names"`
	Text  string   `json:"text"`
}

// ExplainPolicy renders an op for the given arguments without running it.
func ExplainPolicy(file, agent, op string, args map[string]string) (*Explanation, error) {
	p, err := policy.Load(file)
	if err != nil {
		return nil, err
	}
	if agent == "" {
		for _, a := range p.Agents() {
			if p.Allowed(a, op) == nil {
				agent = a
				break
			}
		}
		if agent == "" {
			return nil, fmt.Errorf("explain: %w: no agent may run %q", policy.ErrNotAllowed, op)
		}
	}
	inv, err := p.Render(agent, op, args, policy.RenderContext{Env: os.LookupEnv, Vars: map[string]string{"request_id": strings.Repeat("0", 32)}})
	if err != nil {
		return nil, err
	}
	desc, err := p.Explain(op)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, kv := range inv.Env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	text := desc + "\nas agent " + agent + " it would run:\n  " + inv.String() + "\n"
	return &Explanation{Op: op, Agent: agent, Argv: inv.Argv, Dir: inv.Dir, Env: names, Text: text}, nil
}

// controlOrder is a control file the CLI leaves for a running daemon: a
// reconcile (ID, As) or a garbage collection (GC).
type controlOrder struct {
	ID        string        `json:"id,omitempty"`
	As        string        `json:"as,omitempty"` // done|failed|rerun (reconcile), approve|deny
	Why       string        `json:"why,omitempty"`
	GC        bool          `json:"gc,omitempty"`
	Grace     time.Duration `json:"grace,omitempty"`
	Retention time.Duration `json:"retention,omitempty"`
}

// writeOrder leaves an order in the home's control directory.
func writeOrder(h *bridge.Home, o controlOrder) error {
	data, _ := json.Marshal(o)
	if err := os.MkdirAll(h.Path("control"), 0o700); err != nil {
		return err
	}
	name := o.ID
	if o.GC {
		name = "gc"
	}
	return syncsafe.WriteFileAtomic(h.Path("control", name+".json"), data)
}

// ErrQueued: the daemon is running; the order was handed to it.
var ErrQueued = errors.New("queued for the running daemon")

// Reconcile settles an uncertain request: as "done" (the op had its effect),
// "failed" (it did not) or "rerun" (run it again). With the daemon stopped it
// acts at once; with the daemon running it leaves an order the daemon picks
// up within a second, and returns the entry as it stands.
func Reconcile(h *bridge.Home, id, as string) (*LedgerEntry, error) {
	if as != "done" && as != "failed" && as != "rerun" {
		return nil, fmt.Errorf("reconcile: --as must be done, failed or rerun")
	}
	d, err := NewDaemon(h, DaemonOptions{})
	if err != nil {
		return nil, err
	}
	if err := d.openCore(); err != nil {
		if !errors.Is(err, syncsafe.ErrLocked) {
			return nil, err
		}
		e, err := snapshotEntry(h, id, ledger.StateUncertain)
		if err != nil {
			return nil, err
		}
		if err := writeOrder(h, controlOrder{ID: id, As: as}); err != nil {
			return nil, err
		}
		return e, nil
	}
	defer d.closeResources()
	return d.reconcile(id, as)
}

// snapshotEntry reads request id from a snapshot of the ledger (beside a
// running daemon) and checks it is in state want.
func snapshotEntry(h *bridge.Home, id string, want ledger.State) (*LedgerEntry, error) {
	entries, err := LedgerEntries(h)
	if err != nil {
		return nil, err
	}
	return entryIn(entries, id, want)
}

// entryIn finds request id among entries and checks it is in state want.
func entryIn(entries []LedgerEntry, id string, want ledger.State) (*LedgerEntry, error) {
	e, err := findEntry(entries, id)
	if err != nil {
		return nil, err
	}
	if e.State != want {
		return nil, fmt.Errorf("request %s is %s, not %s", id, e.State, want)
	}
	return e, nil
}

func findEntry(entries []LedgerEntry, id string) (*LedgerEntry, error) {
	var found []LedgerEntry
	for _, e := range entries {
		if e.ID == id {
			found = append(found, e)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no request %s in the ledger", id)
	case 1:
		return &found[0], nil
	}
	return nil, fmt.Errorf("request id %s is in the ledger for %d agents", id, len(found))
}

func (d *Daemon) reconcile(id, as string) (*LedgerEntry, error) {
	all, err := d.ledger.List(func(e ledger.Entry) bool { return e.ID == id })
	if err != nil {
		return nil, err
	}
	e, err := entryIn(all, id, ledger.StateUncertain)
	if err != nil {
		return nil, err
	}
	keys := d.agents()[e.Agent]
	if keys == nil {
		return nil, fmt.Errorf("reconcile %s: agent %s is no longer trusted", id, e.Agent)
	}
	j, err := d.reload(*e, keys, as != "rerun")
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", id, err)
	}
	// The uncertain result is replaced by a new one.
	for _, ext := range []string{bridge.ExtResult, bridge.ExtOutput} {
		os.Remove(d.home.Path("results", e.Agent, id+"."+ext))
	}
	d.audit.log(AuditEvent{Event: "reconcile", Agent: e.Agent, ID: id, Op: e.Op, Detail: "as " + as})
	switch as {
	case "rerun":
		ent, err := d.ledger.Transition(e.Key, []ledger.State{ledger.StateUncertain}, ledger.StateClaimed,
			func(x *ledger.Entry) { x.Reason = "rerun by operator" })
		if err != nil {
			return nil, err
		}
		if d.watcher != nil { // serving: run it now
			if _, err := d.ledger.Transition(e.Key, []ledger.State{ledger.StateClaimed}, ledger.StatePending, nil); err == nil {
				d.schedule(e.Agent, id)
			}
		}
		return &ent, nil
	default:
		status := bridge.StatusDone
		if as == "failed" {
			status = bridge.StatusFailed
		}
		d.finishWithOutput(j, bridge.Receipt{Status: status, Reason: "reconciled", Op: e.Op,
			Detail: "an operator settled the uncertain run as " + as}, nil, nil)
		ent, err := d.ledger.Get(e.Key)
		return &ent, err
	}
}

// controlLoop applies reconcile orders the CLI left while the daemon runs.
// It also notices, within a second, what other bridge commands changed in
// the home: trusted peers (keys trust, pair, revoke) and its own keys
// (keys rotate).
func (d *Daemon) controlLoop(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var peersStamp time.Time
	if fi, err := os.Stat(d.home.Path(bridge.PeersDir)); err == nil {
		peersStamp = fi.ModTime()
	}
	// The first collection waits until the start-up scan has been
	// evaluated: on a folder of 100,000 finished requests it scans every
	// ledger record, which must not delay the first answers.
	collected := false
	for tick := 1; ; tick++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if !collected && d.startScanDone() {
			collected = true
			d.runGC(GCOptions{})
		}
		if tick%600 == 0 { // every ten minutes
			d.runGC(GCOptions{})
			if err := d.saveFinished(); err != nil {
				d.log.Warn("save the finished-requests cache", "err", err)
			}
		}
		if tick%5 == 0 {
			d.expireApprovals()
		}
		if fi, err := os.Stat(d.home.Path(bridge.PeersDir)); err == nil && !fi.ModTime().Equal(peersStamp) {
			peersStamp = fi.ModTime()
			if err := d.loadAgents(); err != nil {
				d.log.Error("reload trusted agents", "err", err)
			} else {
				d.log.Info("trusted agents reloaded", "agents", len(d.agents()))
				d.publishCatalog()
			}
		}
		if err := d.loadOwnKeys(); err != nil {
			d.log.Error("reload own keys", "err", err)
		}
		files, _ := filepath.Glob(d.home.Path("control", "*.json"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			os.Remove(f)
			if err != nil {
				continue
			}
			var o controlOrder
			if json.Unmarshal(data, &o) != nil {
				continue
			}
			if o.GC {
				d.runGC(GCOptions{Grace: o.Grace, Retention: o.Retention})
				continue
			}
			if o.As == "approve" || o.As == "deny" {
				if err := d.decide(o.ID, o.As == "approve", o.Why); err != nil {
					d.log.Warn(o.As, "id", o.ID, "err", err)
				}
				continue
			}
			if _, err := d.reconcile(o.ID, o.As); err != nil {
				d.log.Warn("reconcile", "id", o.ID, "err", err)
			}
		}
	}
}

// LedgerRepairReport is what RepairLedger did.
type LedgerRepairReport = ledger.RepairReport

// RepairLedger makes a damaged ledger loadable again (the daemon must be
// stopped): it keeps a copy of the damaged file and truncates at the last
// complete record.
func RepairLedger(h *bridge.Home) (LedgerRepairReport, error) {
	if h.Config.Role != "host" {
		return LedgerRepairReport{}, errors.New("ledger repair: only a host has a ledger")
	}
	if _, err := os.Stat(h.Path("ledger", "ledger.db")); errors.Is(err, fs.ErrNotExist) {
		return LedgerRepairReport{}, bridge.WithHint(errors.New("ledger repair: there is no ledger yet"), "`bridge serve` creates it")
	}
	return ledger.Repair(h.Path("ledger"))
}
