package systest

import (
	"os"
	"time"

	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
)

// modelScenarios are the scripted beginnings of the lifecycle model's first
// seeds. Each takes, as a user, an operator or a failing machine would, the
// rows of the lifecycle table that random steps reach only now and then, so
// that the coverage over the seeds of ./test.sh does not rest on luck.
// Random steps follow each, as in every other seed.
var modelScenarios = []struct {
	name string
	run  func(m *model)
}{
	{"approve", func(m *model) { m.approveOn(m.awaiting(m.agents[0])) }},
	{"deny", func(m *model) {
		r := m.awaiting(m.agents[0])
		r.decided = true
		operator.Deny(m.p.host, r.agent.name+"/"+r.id, "scenario")
	}},
	{"approval-ttl", func(m *model) { r := m.awaiting(m.agents[0]); r.decided = true; m.answered(r, 15*time.Second) }},
	{"cancel-early", func(m *model) { m.cancelOn(m.awaiting(m.agents[0])) }},
	{"cancel-run", func(m *model) {
		m.closeGate()
		r := m.running("hold")
		m.cancelOn(r)
		m.answered(r, 15*time.Second)
		m.openGate()
	}},
	{"drain-abort", func(m *model) {
		m.closeGate()
		m.running("hold")
		m.logf("drain stop")
		m.d.Stop(m.t, 1)
		m.interrupted()
		m.openGate()
		m.start()
	}},
	{"crash-unsure, settle", func(m *model) { r := m.crashed("hold"); m.reconcileAs(r, "done") }},
	{"crash-done", func(m *model) {
		os.WriteFile(m.gate+".happened", nil, 0o644)
		r := m.crashed("checked")
		m.answered(r, 15*time.Second)
		os.Remove(m.gate + ".happened")
	}},
	{"crash-rerun", func(m *model) { r := m.crashed("idem"); m.answered(r, 15*time.Second) }},
	{"rerun", func(m *model) { r := m.crashed("hold"); m.reconcileAs(r, "rerun"); m.answered(r, 15*time.Second) }},
	{"rerun-refused", func(m *model) {
		r := m.crashedTTL("hold", 3*time.Second)
		m.until("the request to be uncertain", func() bool { return m.state(r) == ledger.StateUncertain })
		time.Sleep(time.Until(r.expires) + time.Second) // a rerun now finds it expired
		m.reconcileAs(r, "rerun")
		m.until("the refused rerun to be answered", func() bool { return m.state(r) == ledger.StateUncertain && m.reason(r) == "rerun-refused" })
	}},
	{"expire", func(m *model) {
		m.closeGate()
		m.running("slot")
		late := m.send(m.agents[0], "slot", 2*time.Second) // waits for the slot, and expires meanwhile
		time.Sleep(3 * time.Second)
		m.openGate()
		m.answered(late, 15*time.Second)
	}},
	{"unclaim", func(m *model) {
		m.closeGate()
		m.running("slot")
		queued := m.send(m.agents[0], "slot", time.Hour)
		m.until("the second to wait for its slot", func() bool { return m.state(queued) == ledger.StateClaimed })
		m.logf("crash")
		m.d.Kill()
		m.interrupted()
		m.openGate()
		m.start()
		m.answered(queued, 15*time.Second)
	}},
	{"incomplete", func(m *model) {
		r := m.send(m.agents[0], "quick", time.Hour)
		m.withhold(r)
		m.answered(r, 20*time.Second)
	}},
	{"record-lost, catch-up", func(m *model) {
		m.d.Stop(m.t, 1)
		m.backup = testkit.BackupLedger(m.t, m.p.host)
		m.start()
		r := m.send(m.agents[0], "quick", time.Hour)
		m.answered(r, 15*time.Second)
		m.restoreBackup()
		// Its result, signed by the host, is what happened.
		m.until("the ledger to record the result", func() bool {
			return m.state(r) == ledger.StateDone && m.reason(r) == "record-lost"
		})
	}},
	{"adopt", func(m *model) {
		m.d.Stop(m.t, 1)
		m.d = startDaemonProcess(m.t, m.p, append(m.env[:len(m.env):len(m.env)], "BRIDGE_TEST_CRASH_AT=published")...)
		r := m.send(m.agents[0], "quick", time.Hour)
		m.until("the daemon to crash after publishing", m.d.Exited)
		m.interrupted()
		m.start()
		m.until("the answer to be recorded", func() bool { return m.state(r).Answered() })
	}},
	{"start-failed, host-error, refuse", func(m *model) {
		m.answered(m.send(m.agents[0], "broken", time.Hour), 15*time.Second)
		m.answered(m.send(m.agents[0], "missing", time.Hour), 15*time.Second)
		m.answered(m.send(m.agents[1], "slot", time.Hour), 15*time.Second) // b may not run slot
	}},
	{"revoke", func(m *model) {
		r := m.awaiting(m.agents[1])
		m.revoke()
		m.answered(r, 15*time.Second)
	}},
}

func (m *model) closeGate() { os.WriteFile(m.gate, nil, 0o644); m.logf("gate closed") }
func (m *model) openGate()  { os.Remove(m.gate); m.logf("gate open") }

// until waits for cond, or fails the seed.
func (m *model) until(what string, cond func() bool) {
	testkit.WaitFor(m.t, 20*time.Second, what, cond)
}

// state is the ledger state of r ("" if it has no entry).
func (m *model) state(r *modelReq) ledger.State { return m.entryOf(r).State }

// reason is the reason the ledger records for r.
func (m *model) reason(r *modelReq) string { return m.entryOf(r).Reason }

func (m *model) entryOf(r *modelReq) ledger.Entry {
	entries, _ := operator.LedgerEntries(m.p.host)
	for _, e := range entries {
		if e.Agent == r.agent.home.Config.ID && e.ID == r.id {
			return e
		}
	}
	return ledger.Entry{}
}

// answered waits until the agent has an answer for r.
func (m *model) answered(r *modelReq, d time.Duration) {
	testkit.WaitFor(m.t, d, "an answer for "+short(r.id), func() bool { _, err := r.agent.client.Result(r.id); return err == nil })
}

// awaiting submits a request for approval and waits until it waits.
func (m *model) awaiting(a *modelAgent) *modelReq {
	r := m.send(a, "gated", time.Hour)
	m.until("the request to await approval", func() bool { return m.state(r) == ledger.StateAwaitingApproval })
	return r
}

// running submits op (the gate closed) and waits until it started.
func (m *model) running(op string) *modelReq {
	r := m.send(m.agents[0], op, time.Hour)
	m.until(op+" to start", func() bool { return len(m.starts()[r.id]) > 0 })
	return r
}

// crashed runs op (the gate closed), crashes the daemon while it runs,
// opens the gate and starts the daemon again.
func (m *model) crashed(op string) *modelReq { return m.crashedTTL(op, time.Hour) }

func (m *model) crashedTTL(op string, ttl time.Duration) *modelReq {
	m.closeGate()
	r := m.send(m.agents[0], op, ttl)
	m.until(op+" to start", func() bool { return len(m.starts()[r.id]) > 0 })
	m.logf("crash")
	m.d.Kill()
	m.interrupted()
	m.openGate()
	m.start()
	return r
}

func (m *model) approveOn(r *modelReq) {
	r.decided = true
	if _, err := operator.Approve(m.p.host, r.agent.name+"/"+r.id); err == nil {
		r.approved = true
	}
	m.answered(r, 15*time.Second)
}

func (m *model) cancelOn(r *modelReq) {
	if err := r.agent.client.Cancel(r.id); err == nil {
		r.cancelled = true
		m.logf("cancel %s", short(r.id))
	}
}

// reconcileAs waits until r is held uncertain, then settles it as a human
// would.
func (m *model) reconcileAs(r *modelReq, as string) {
	m.until("the request to be uncertain", func() bool { return m.state(r) == ledger.StateUncertain })
	if _, err := host.Reconcile(m.p.host, r.agent.name+"/"+r.id, as); err != nil {
		m.t.Fatalf("reconcile: %v", err)
	}
	if as == "rerun" {
		r.allowed++
	}
	m.logf("reconcile %s as %s", short(r.id), as)
}

// abandonOn takes a request's files out of the folder.
func (m *model) abandonOn(r *modelReq) {
	for _, ext := range []string{".manifest", ".payload"} {
		os.Remove(m.requestDir(r) + "/" + r.id + ext)
	}
	r.withheld, r.abandoned = true, true
	m.logf("abandon %s", short(r.id))
}

// restoreBackup stops the daemon, puts the saved ledger back, repairs (as
// OPERATIONS.md says to after a restore) and starts the daemon again.
func (m *model) restoreBackup() {
	m.d.Stop(m.t, 1)
	m.interrupted()
	testkit.RestoreLedger(m.t, m.p.host, m.backup)
	if _, err := host.RepairLedger(m.p.host); err != nil {
		m.t.Fatal(err)
	}
	m.lostAll()
	m.logf("restore the ledger from the backup, repair")
	m.start()
}
