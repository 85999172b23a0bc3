package systest

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// TestLifecycleModel drives a real daemon process through random sequences
// of what happens to requests in real life, operators and keys included:
// submits of ops of every kind (quick, blocking, retry-safe, self-checking,
// approval, a missing program, a concurrency of one), cancels, approvals and
// denials, acks, collections, resurrected and conflict-copied deliveries,
// crashes (SIGKILL), drained stops, second signals, ledger repairs and
// restores from a backup, revocation of an agent's key, and a human's
// reconciles. Against a small model of what may happen to each request it
// asserts, once everything has settled:
//
//   - at most one run per id, beyond the re-runs the model allows (a
//     retry-safe op after an interruption, a human's rerun);
//   - nothing runs that must not: an op never approved, one denied, one
//     whose program was missing when it was answered, one whose key was
//     revoked before it started;
//   - the agent's answer matches what ran: never failed, rejected or
//     expired after a start, never done without one;
//   - every request is answered, and every answer published is recorded in
//     the ledger (terminal, or uncertain for a human).
//
// Each daemon counts the lifecycle events it takes; over the seeds of
// ./test.sh (-model.n) every row of the table in DESIGN.md §6 is hit.
//
// Its seeds run in parallel with each other, against daemon processes with
// bounded waits, and beside the package's other tests (3 seeds) in the race
// step; test.sh runs its 60 seeds in a step of their own.
func TestLifecycleModel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	n := *modelSeeds
	seeds := []uint64{}
	if *modelSeed != 0 {
		seeds = append(seeds, *modelSeed)
	} else {
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	events := filepath.Join(t.TempDir(), "events")
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel() // the daemons mostly wait: ./test.sh raises -parallel
			runModel(t, seed, events)
		})
	}
	// t.Run of parallel subtests returns before they end: check after them.
	t.Cleanup(func() { checkCoverage(t, len(seeds), events) })
}

// checkCoverage asserts that the seeds together took every event of the
// lifecycle table, as DESIGN.md §6 lists them (host's TestDesignLifecycleTable
// holds the code's table to the same rows).
func checkCoverage(t *testing.T, seeds int, events string) {
	if t.Failed() || seeds < modelCoverageSeeds {
		t.Logf("%d seeds: the coverage of the lifecycle table is checked from %d", seeds, modelCoverageSeeds)
		return
	}
	doc, err := os.ReadFile("../../../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := testkit.LifecycleRows(doc)
	if len(rows) < 20 {
		t.Fatalf("DESIGN.md §6 has %d lifecycle rows that its pattern finds: the table or the pattern changed", len(rows))
	}
	data, _ := os.ReadFile(events)
	hit := map[string]int{}
	for _, l := range strings.Fields(string(data)) {
		hit[l]++
	}
	for _, row := range rows {
		if hit[row[0]] == 0 {
			t.Errorf("no seed took lifecycle event %s", row[0])
		}
	}
	t.Logf("events taken over %d seeds: %v", seeds, hit)
}

var (
	modelSeeds = flag.Int("model.n", 3, "run the lifecycle model over seeds 1..N")
	modelSeed  = flag.Uint64("model.seed", 0, "run the lifecycle model for this seed only")
)

// modelCoverageSeeds is the number of seeds from which every lifecycle
// event must have been taken (./test.sh runs more).
const modelCoverageSeeds = 20

const modelPolicy = `
[ops.quick]
argv = ["sh", "-c", "echo start-$0-$(date +%s%N) >> \"$RUNS\"; echo end-$0 >> \"$RUNS\"", "{request_id}"]
env = ["PATH", "RUNS"]

[ops.hold]
argv = ["sh", "-c", "echo start-$0-$(date +%s%N) >> \"$RUNS\"; while [ -f \"$GATE\" ]; do sleep 0.05; done; echo end-$0 >> \"$RUNS\"", "{request_id}"]
env = ["PATH", "RUNS", "GATE"]

[ops.idem]
argv = ["sh", "-c", "echo start-$0-$(date +%s%N) >> \"$RUNS\"; while [ -f \"$GATE\" ]; do echo tick; sleep 0.1; done; echo end-$0 >> \"$RUNS\"", "{request_id}"]
env = ["PATH", "RUNS", "GATE"]
idempotent = true

[ops.checked]
argv = ["sh", "-c", "echo start-$0-$(date +%s%N) >> \"$RUNS\"; while [ -f \"$GATE\" ]; do sleep 0.05; done; echo end-$0 >> \"$RUNS\"", "{request_id}"]
reconcile = ["sh", "-c", "grep -q \"^start-$0-\" \"$RUNS\" && [ -f \"$GATE.happened\" ] && exit 0; exit 3", "{request_id}"]
env = ["PATH", "RUNS", "GATE"]

[ops.slot]
argv = ["sh", "-c", "echo start-$0-$(date +%s%N) >> \"$RUNS\"; while [ -f \"$GATE\" ]; do sleep 0.05; done; echo end-$0 >> \"$RUNS\"", "{request_id}"]
env = ["PATH", "RUNS", "GATE"]
concurrency = 1

[ops.gated]
argv = ["sh", "-c", "echo start-$0-$(date +%s%N) >> \"$RUNS\"; echo end-$0 >> \"$RUNS\"", "{request_id}"]
env = ["PATH", "RUNS"]
approve = true

[ops.missing]
argv = ["bridge-model-missing", "{request_id}"]
env = ["PATH", "RUNS"]

[ops.broken]
argv = ["bridge-model-broken", "{request_id}"]
env = ["PATH", "RUNS"]

[agents.a]
ops = ["quick", "hold", "idem", "checked", "slot", "gated", "missing", "broken"]

[agents.b]
ops = ["quick", "hold", "idem", "checked", "gated", "missing", "broken"]
`

// The ops a model agent asks for; b may not run slot (not-allowed).
var modelOps = []string{"quick", "hold", "idem", "checked", "slot", "gated", "missing", "broken", bridge.PingOp}

// modelReq is what the model knows of one request.
type modelReq struct {
	id, op  string
	agent   *modelAgent
	sent    int // model step of the submit
	expires time.Time
	// allowed counts the starts the model allows beyond the first: a
	// retry-safe op's after each interruption of the daemon, a human's
	// rerun.
	allowed   int
	approved  bool // an approval was accepted by the CLI
	decided   bool // approved or denied (or tried to)
	cancelled bool // the agent sent a cancel
	lostSafe  bool // submitted before a repair or restore: its record may be gone
	acked     bool
	withheld  bool   // its payload was taken out of the folder
	abandoned bool   // its files were taken out of the folder (maybe before the host saw them)
	manifest  []byte // as sent, for a resurrection
	payload   []byte
}

type modelAgent struct {
	name    string
	home    *trust.Home
	client  *agent.Client
	revoked time.Time // when its key was revoked (zero: never)
}

type model struct {
	t        *testing.T
	rnd      *rand.Rand
	p        *pair
	agents   []*modelAgent
	reqs     []*modelReq
	runs     string
	gate     string
	bin      string
	env      []string
	d        *testkit.Process
	step     int
	backup   map[string][]byte // an earlier ledger (testkit.BackupLedger), for a restore
	fixedAt  time.Time
	trace    []string
	scripted bool // in a scenario
}

func runModel(t *testing.T, seed uint64, events string) {
	m := &model{t: t, rnd: rand.New(rand.NewPCG(seed, 0x6c696665))}
	m.p = newPair(t, modelPolicy)
	dir := t.TempDir()
	m.runs, m.gate, m.bin = filepath.Join(dir, "runs"), filepath.Join(dir, "gate"), filepath.Join(dir, "bin")
	os.Mkdir(m.bin, 0o755)
	m.p.client.Close() // the pair's own agent is not in the policy
	// Two agents, a and b, as the policy names them.
	for _, name := range []string{"a", "b"} {
		h, err := trust.InitHome(filepath.Join(dir, "agent-"+name), "agent", name, m.p.folder)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.p.host.Trust(h.BundleText(), name); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Trust(m.p.host.BundleText(), "laptop"); err != nil {
			t.Fatal(err)
		}
		cl, err := agent.OpenClient(h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		m.agents = append(m.agents, &modelAgent{name: name, home: h, client: cl})
	}
	// broken is found on the PATH but cannot be executed (its interpreter
	// does not exist): its process never starts.
	os.WriteFile(filepath.Join(m.bin, "bridge-model-broken"), []byte("#!/nonexistent/interpreter\n"), 0o755)
	m.env = []string{"RUNS=" + m.runs, "GATE=" + m.gate, "PATH=" + m.bin + ":" + os.Getenv("PATH"),
		"BRIDGE_TEST_DRAIN=300ms", "BRIDGE_TEST_APPROVAL_TTL=4s", "BRIDGE_TEST_PENDING_TIMEOUT=3s", "BRIDGE_TEST_EVENTS=" + events}
	m.start()
	defer func() {
		if t.Failed() {
			t.Logf("seed %d trace:\n%s", seed, strings.Join(m.trace, "\n"))
			if m.d != nil {
				log, _ := os.ReadFile(m.d.Log.Name())
				t.Logf("last daemon log (tail):\n%s", tail(log, 60))
			}
		}
	}()
	if seed <= uint64(len(modelScenarios)) {
		sc := modelScenarios[seed-1]
		m.logf("scenario %s", sc.name)
		m.scripted = true // no daemon that crashes by itself in a script
		sc.run(m)
		m.scripted = false
	}
	steps := 18 + m.rnd.IntN(10)
	for m.step = 1; m.step <= steps; m.step++ {
		m.act()
	}
	m.settle()
	m.check()
}

func (m *model) logf(format string, args ...any) {
	m.trace = append(m.trace, fmt.Sprintf("%3d ", m.step)+fmt.Sprintf(format, args...))
}

// start starts the daemon; now and then it is told to crash by itself at
// a durable step of publishing a result (a power cut between sealing a
// result and recording it, say), which the next step notices.
func (m *model) start() {
	// A daemon that crashed may not have let go of its lock yet (the
	// kernel releases it when the last descriptor closes, which a loaded
	// machine can lag: CI saw two seeds fail so).
	testkit.WaitLockFree(m.t, m.p.host)
	env := m.env
	if !m.scripted && m.rnd.IntN(5) == 0 {
		at := fmt.Sprintf("%s#%d", []string{"kept", "published-output", "published"}[m.rnd.IntN(3)], 1+m.rnd.IntN(3))
		env = append(slices.Clone(env), "BRIDGE_TEST_CRASH_AT="+at)
		m.logf("start, to crash at %s", at)
	}
	d, err := testkit.Launch(m.t, m.p.hostHome, false, env...)
	if err != nil && len(env) > len(m.env) {
		// It crashed at that step while recovering, before it was ready.
		m.logf("it crashed while starting up; starting again")
		m.interrupted()
		d, err = testkit.Launch(m.t, m.p.hostHome, false, m.env...)
	}
	if err != nil {
		m.t.Fatal(err)
	}
	m.d = d
}

// interrupted: the daemon stopped with ops possibly running; a retry-safe
// op (or one that checks itself) may run once more.
func (m *model) interrupted() {
	for _, r := range m.reqs {
		if r.op == "idem" || r.op == "checked" {
			r.allowed++
		}
	}
}

// act takes one random step.
func (m *model) act() {
	if m.d.Exited() { // crashed by itself (BRIDGE_TEST_CRASH_AT)
		m.logf("the daemon crashed by itself")
		m.interrupted()
		m.start()
	}
	switch k := m.rnd.IntN(100); {
	case k < 34:
		m.submit()
	case k < 40:
		m.toggleGate()
	case k < 46:
		m.cancel()
	case k < 53:
		m.decide()
	case k < 58:
		m.ack()
	case k < 62:
		m.redeliver()
	case k < 66:
		m.reconcile()
	case k < 70:
		m.logf("crash")
		m.d.Kill()
		m.interrupted()
		m.start()
	case k < 74:
		m.logf("drain stop")
		m.d.Stop(m.t, 1)
		m.interrupted()
		m.start()
	case k < 77:
		m.logf("second signal")
		m.d.Stop(m.t, 2)
		m.interrupted()
		m.start()
	case k < 80:
		m.repair()
	case k < 83:
		m.restore()
	case k < 86:
		m.revoke()
	case k < 89:
		m.collect()
	case k < 91:
		m.fixMissing()
	case k < 94:
		m.abandon()
	default:
		m.logf("pause")
		time.Sleep(time.Duration(100+m.rnd.IntN(500)) * time.Millisecond)
	}
}

func (m *model) submit() {
	a := m.agents[m.rnd.IntN(len(m.agents))]
	op := modelOps[m.rnd.IntN(len(modelOps))]
	ttl := time.Hour
	if m.rnd.IntN(4) == 0 {
		ttl = 2 * time.Second // may expire before it runs
	}
	r := m.send(a, op, ttl)
	dir := filepath.Join(m.p.folder, bridge.ToHostDir(m.p.host.Config.ID, a.home.Config.ID))
	switch m.rnd.IntN(8) {
	case 0: // a conflict copy of the manifest: never run
		os.WriteFile(filepath.Join(dir, r.id+".sync-conflict-20260101-000000-ABCDEFG.manifest"), r.manifest, 0o644)
	case 1:
		m.withhold(r)
	}
}

// send submits one request of agent a.
func (m *model) send(a *modelAgent, op string, ttl time.Duration) *modelReq {
	s, err := a.client.Submit(agent.SubmitOptions{Op: op, TTL: ttl})
	if err != nil {
		m.t.Fatalf("submit: %v", err)
	}
	r := &modelReq{id: s.ID, op: op, agent: a, sent: m.step, expires: time.Unix(s.Expires, 0)}
	dir := filepath.Join(m.p.folder, bridge.ToHostDir(m.p.host.Config.ID, a.home.Config.ID))
	r.manifest, _ = os.ReadFile(filepath.Join(dir, s.ID+".manifest"))
	r.payload, _ = os.ReadFile(filepath.Join(dir, s.ID+".payload"))
	m.reqs = append(m.reqs, r)
	m.logf("submit %s/%s %s ttl %s", a.name, short(s.ID), op, ttl)
	return r
}

// withhold takes a request's payload out of the folder: the sync client
// has not delivered it yet.
func (m *model) withhold(r *modelReq) {
	dir := filepath.Join(m.p.folder, bridge.ToHostDir(m.p.host.Config.ID, r.agent.home.Config.ID))
	os.Remove(filepath.Join(dir, r.id+".payload"))
	r.withheld = true
	m.logf("  its payload is withheld")
}

func (m *model) pick(keep func(*modelReq) bool) *modelReq {
	var c []*modelReq
	for _, r := range m.reqs {
		if keep(r) {
			c = append(c, r)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[m.rnd.IntN(len(c))]
}

func (m *model) toggleGate() {
	if m.rnd.IntN(3) == 0 { // what the checked op's reconcile command finds
		if _, err := os.Stat(m.gate + ".happened"); err == nil {
			os.Remove(m.gate + ".happened")
		} else {
			os.WriteFile(m.gate+".happened", nil, 0o644)
		}
	}
	if _, err := os.Stat(m.gate); err == nil {
		os.Remove(m.gate)
		m.logf("gate open")
	} else {
		os.WriteFile(m.gate, nil, 0o644)
		m.logf("gate closed")
	}
}

func (m *model) cancel() {
	if r := m.pick(func(r *modelReq) bool { return !r.acked }); r != nil {
		if err := r.agent.client.Cancel(r.id); err == nil {
			r.cancelled = true
			m.logf("cancel %s", short(r.id))
		}
	}
}

func (m *model) decide() {
	if r := m.pick(func(r *modelReq) bool { return r.op == "gated" && !r.decided }); r != nil {
		m.decideOn(r)
	}
}

// decideOn approves or denies a request for approval, as a human would.
func (m *model) decideOn(r *modelReq) {
	ref := r.agent.name + "/" + r.id
	r.decided = true
	if m.rnd.IntN(3) == 0 {
		_, err := operator.Deny(m.p.host, ref, "model")
		m.logf("deny %s: %v", short(r.id), err)
		return
	}
	_, err := operator.Approve(m.p.host, ref)
	if err == nil {
		r.approved = true
	}
	m.logf("approve %s: %v", short(r.id), err)
}

func (m *model) ack() {
	r := m.pick(func(r *modelReq) bool { return !r.acked })
	if r == nil {
		return
	}
	out, err := r.agent.client.Result(r.id)
	if err != nil {
		return
	}
	if err := r.agent.client.Ack(out); err == nil {
		r.acked = true
		m.logf("ack %s (%s)", short(r.id), out.Receipt.Status)
	}
}

// redeliver brings an acked request's files back (a sync client's
// resurrection): it must never run again.
func (m *model) redeliver() {
	r := m.pick(func(r *modelReq) bool { return (r.acked || r.withheld) && r.manifest != nil })
	if r == nil {
		return
	}
	dir := filepath.Join(m.p.folder, bridge.ToHostDir(m.p.host.Config.ID, r.agent.home.Config.ID))
	os.WriteFile(filepath.Join(dir, r.id+".payload"), r.payload, 0o644)
	os.WriteFile(filepath.Join(dir, r.id+".manifest"), r.manifest, 0o644)
	m.logf("deliver %s again (acked %v, withheld %v)", short(r.id), r.acked, r.withheld)
	r.withheld, r.abandoned = false, false
}

func (m *model) reconcile() {
	entries, _ := operator.LedgerEntries(m.p.host)
	var unsure []ledger.Entry
	for _, e := range entries {
		if e.State == ledger.StateUncertain {
			unsure = append(unsure, e)
		}
	}
	if len(unsure) > 0 {
		m.reconcileEntry(unsure[m.rnd.IntN(len(unsure))])
	}
}

// reconcileEntry settles an uncertain request as a human would, or asks to
// run it again (after which its agent may give up on it).
func (m *model) reconcileEntry(e ledger.Entry) {
	as := []string{"done", "failed", "rerun", "rerun"}[m.rnd.IntN(4)]
	_, err := host.Reconcile(m.p.host, e.Agent+"/"+e.ID, as)
	m.logf("reconcile %s as %s: %v", short(e.ID), as, err)
	if err != nil || as != "rerun" {
		return
	}
	for _, r := range m.reqs {
		if r.id != e.ID {
			continue
		}
		r.allowed++
		if m.rnd.IntN(2) == 0 { // its agent gives up on it now
			dir := filepath.Join(m.p.folder, bridge.ToHostDir(m.p.host.Config.ID, r.agent.home.Config.ID))
			os.Remove(filepath.Join(dir, r.id+".manifest"))
			os.Remove(filepath.Join(dir, r.id+".payload"))
			r.withheld = true
			m.logf("  and its files leave the folder")
		}
	}
}

// repair damages the ledger after a random number of its records and
// repairs it (the daemon stopped), as after a disk error.
func (m *model) repair() {
	m.d.Stop(m.t, 1)
	m.interrupted()
	// Either file of the ledger: the live entries' or the archive of the
	// terminal ones.
	db := m.p.host.Path("ledger", testkit.LedgerFiles[m.rnd.IntN(len(testkit.LedgerFiles))])
	data, err := os.ReadFile(db)
	if err == nil && len(data) > 64 {
		cut := 32 + m.rnd.IntN(len(data)-32)
		copy(data[cut:], "\x00garbage")
		os.WriteFile(db, data, 0o600)
		os.Remove(m.p.host.Path("ledger", "ledger.db.checked"))
		os.Remove(m.p.host.Path(testkit.FinishedCache)) // as after a SIGKILL
		rep, err := host.RepairLedger(m.p.host)
		m.logf("repair of %s at byte %d: lost %d, %v", filepath.Base(db), cut, len(rep.Lost), err)
		m.lostAll()
	}
	m.start()
}

// restore puts back a ledger saved earlier (a restored backup of the home's
// ledger), or saves one now.
func (m *model) restore() {
	m.d.Stop(m.t, 1)
	m.interrupted()
	if m.backup == nil || m.rnd.IntN(2) == 0 {
		m.backup = testkit.BackupLedger(m.t, m.p.host)
		m.logf("backup the ledger")
	} else {
		testkit.RestoreLedger(m.t, m.p.host, m.backup)
		os.Remove(m.p.host.Path(testkit.FinishedCache))
		m.logf("restore the ledger from the backup")
		m.lostAll()
	}
	m.start()
}

func (m *model) lostAll() {
	for _, r := range m.reqs {
		r.lostSafe = true
	}
}

// requestDir is the folder directory of r's files.
func (m *model) requestDir(r *modelReq) string {
	return filepath.Join(m.p.folder, bridge.ToHostDir(m.p.host.Config.ID, r.agent.home.Config.ID))
}

// abandon removes a request's files from the folder (its agent gave up on
// it, or its sync client lost them): it is answered once the pending
// timeout passed, never run from then on.
func (m *model) abandon() {
	if r := m.pick(func(r *modelReq) bool { return !r.acked }); r != nil {
		m.abandonOn(r)
	}
}

// revoke revokes agent b's key, once: nothing it signed may start after.
func (m *model) revoke() {
	b := m.agents[1]
	if !b.revoked.IsZero() {
		return
	}
	if _, err := m.p.host.Revoke(b.home.Identity().SignKid()); err != nil {
		m.t.Fatal(err)
	}
	b.revoked = time.Now()
	m.logf("revoke b")
}

func (m *model) collect() {
	_, err := host.GC(m.p.host, host.GCOptions{Grace: time.Nanosecond})
	m.logf("gc: %v", err)
}

// fixMissing creates the program the "missing" op lacked: the requests
// answered failed for it must never run.
func (m *model) fixMissing() {
	if !m.fixedAt.IsZero() {
		return
	}
	prog := filepath.Join(m.bin, "bridge-model-missing")
	// The time first: a running daemon may start the program the moment
	// it exists, before this goroutine reads the clock again (CI, seed 11:
	// its start line was dated before a time taken after the write).
	m.fixedAt = time.Now()
	os.WriteFile(prog, []byte("#!/bin/sh\necho start-$1-$(date +%s%N) >> \"$RUNS\"\necho end-$1 >> \"$RUNS\"\n"), 0o755)
	m.logf("the missing program exists now")
}

// settle opens the gate, makes sure the daemon serves, and waits until
// every request has an answer (approvals time out after 4 s).
func (m *model) settle() {
	os.Remove(m.gate)
	m.logf("settle")
	if m.d.Exited() || m.rnd.IntN(2) == 0 {
		// A daemon that crashes by itself (BRIDGE_TEST_CRASH_AT) would
		// leave its last answer unrecorded: settle with one that does not.
		m.d.Stop(m.t, 1)
		m.interrupted()
		m.d = startDaemonProcess(m.t, m.p, m.env...)
	}
	m.operatorRound()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m.d.Exited() {
			m.logf("the daemon crashed by itself; started again for the settle")
			m.interrupted()
			m.d = startDaemonProcess(m.t, m.p, m.env...)
		}
		var missing []string
		for _, r := range m.reqs {
			if _, err := r.agent.client.Result(r.id); err != nil && !r.abandoned {
				// (An abandoned request may never have reached the host.)
				missing = append(missing, short(r.id)+" "+r.op)
			}
		}
		// And the ledger has settled too: a human's rerun answers anew.
		entries, _ := operator.LedgerEntries(m.p.host)
		for _, e := range entries {
			if !e.State.Answered() {
				missing = append(missing, short(e.ID)+" "+e.Op+" ("+string(e.State)+" in the ledger)")
			}
		}
		if len(missing) == 0 && !m.d.Exited() {
			return
		}
		if time.Now().After(deadline) {
			m.t.Errorf("no answer after the settle for %d requests: %v", len(missing), missing)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// operatorRound is the human catching up once the daemon recovered: every
// request held uncertain is settled or rerun, every request awaiting
// approval approved or denied.
func (m *model) operatorRound() {
	time.Sleep(time.Second) // recovery answers what the stop interrupted
	entries, _ := operator.LedgerEntries(m.p.host)
	for _, e := range entries {
		if e.State == ledger.StateUncertain {
			m.reconcileEntry(e)
		}
	}
	for _, r := range m.reqs {
		if r.op == "gated" && !r.decided {
			m.decideOn(r)
		}
	}
}

// starts returns, per request id, the times its op started.
func (m *model) starts() map[string][]time.Time {
	out := map[string][]time.Time{}
	data, _ := os.ReadFile(m.runs)
	for _, l := range strings.Fields(string(data)) {
		rest, ok := strings.CutPrefix(l, "start-")
		if !ok {
			continue
		}
		id, ns, _ := strings.Cut(rest, "-")
		n, _ := strconv.ParseInt(ns, 10, 64)
		out[id] = append(out[id], time.Unix(0, n))
	}
	return out
}

// revocationSlack is how long after `keys revoke` returned a start may
// still be seen: a process whose start passed the check just before takes
// this long at most to write its line.
const revocationSlack = 3 * time.Second

// check asserts the model's rules. An answer is published a moment before
// the ledger records it, so the comparison with the ledger is tried again
// for a few seconds before its findings count.
func (m *model) check() {
	var problems []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		problems = m.problems()
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, p := range problems {
		m.t.Error(p)
	}
}

type problemList []string

func (l *problemList) Errorf(format string, args ...any) {
	*l = append(*l, fmt.Sprintf(format, args...))
}

func (m *model) problems() []string {
	var t problemList
	starts := m.starts()
	entries, err := operator.LedgerEntries(m.p.host)
	if err != nil {
		return []string{err.Error()}
	}
	byKey := map[string]ledger.Entry{}
	for _, e := range entries {
		byKey[e.Key] = e
	}
	for _, r := range m.reqs {
		ss := starts[r.id]
		name := fmt.Sprintf("%s/%s (%s)", r.agent.name, short(r.id), r.op)
		if len(ss) > 1+r.allowed {
			t.Errorf("%s started %d times; the model allows %d", name, len(ss), 1+r.allowed)
		}
		out, err := r.agent.client.Result(r.id)
		if err != nil {
			continue // reported by settle
		}
		rc := out.Receipt
		switch {
		case r.op == "gated" && !r.approved && len(ss) > 0:
			t.Errorf("%s ran without an approval", name)
		case r.op == "missing" && len(ss) > 0 && rc.Reason == "host-error":
			t.Errorf("%s was answered failed (host-error) and ran", name)
		case r.op == "missing" && len(ss) > 0 && ss[0].Before(m.fixedAt):
			t.Errorf("%s ran before its program existed", name)
		}
		if !r.agent.revoked.IsZero() {
			for _, at := range ss {
				if at.After(r.agent.revoked.Add(revocationSlack)) {
					t.Errorf("%s started %s after its key was revoked", name, at.Sub(r.agent.revoked).Round(time.Millisecond))
				}
			}
		}
		started := len(ss) > 0
		settled := rc.Reason == "reconciled" // a human (or a reconcile command) said so
		switch rc.Status {
		case bridge.StatusFailed, bridge.StatusRejected, bridge.StatusExpired:
			if started && !settled {
				t.Errorf("%s started, and its answer is %s (%s): %s", name, rc.Status, rc.Reason, rc.Detail)
			}
		case bridge.StatusDone:
			if !started && !settled && r.op != bridge.PingOp {
				t.Errorf("%s never started, and its answer is done: %s", name, rc.Detail)
			}
		}
		// The answer in the folder is the one the ledger recorded.
		e, ok := byKey[r.agent.home.Config.ID+"/"+r.id]
		folder, ferr := os.ReadFile(filepath.Join(m.p.folder, bridge.ResultPath(m.p.host.Config.ID, r.agent.home.Config.ID, r.id, bridge.ExtResult)))
		switch {
		case !ok && (r.lostSafe || r.acked):
			// Its record was lost to a repair or a restore and its files
			// never came back, or it was collected: nothing to compare.
		case !ok:
			t.Errorf("%s has an answer (%s) and no ledger entry", name, rc.Status)
		case !e.State.Answered():
			t.Errorf("%s: answered %s, and the ledger says %s", name, rc.Status, e.State)
		case e.State == ledger.StateUncertain && e.Reason == "record-lost":
			// Held for a human whatever the agent holds.
		case ferr == nil && bridge.SHA256Hex(folder) != e.ResultSHA256:
			t.Errorf("%s: the folder's result is not the one the ledger recorded (%s, %s)", name, e.State, e.Reason)
		case ferr == nil && ledger.State(rc.Status) != e.State && !r.acked:
			t.Errorf("%s: the agent reads %s, the ledger says %s", name, rc.Status, e.State)
		}
	}
	// Every result in the folder is recorded answered.
	for _, a := range m.agents {
		dir := filepath.Join(m.p.folder, bridge.ToAgentDir(m.p.host.Config.ID, a.home.Config.ID))
		names, _ := os.ReadDir(dir)
		for _, n := range names {
			id, ext, ok := bridge.ParseToAgentName(n.Name())
			if !ok || ext != bridge.ExtResult {
				continue
			}
			data, _ := os.ReadFile(filepath.Join(dir, n.Name()))
			var res bridge.Result
			if bridge.OpenBody(bcrypto.KindResult, data, [][]byte{m.p.host.Identity().SignPublic()}, &res) != nil {
				continue
			}
			if e, ok := byKey[a.home.Config.ID+"/"+id]; ok && !e.State.Answered() {
				t.Errorf("%s/%s: a result is published, and the ledger says %s", a.name, short(id), e.State)
			}
		}
	}
	return t
}

func short(id string) string { return id[:8] }

func tail(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
