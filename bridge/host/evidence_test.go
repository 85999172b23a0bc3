package host

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/doctor"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
)

// The evidence a host finds of what it did with a request, when its ledger
// is behind (docs/DESIGN.md §6, rows record-lost and catch-up), and the
// reruns a human orders: each test here is a hole a red team found.

// waitAnswer waits for a result of id other than the one given (nil: any).
func (e *edge) waitAnswer(t *testing.T, id string, not *agent.Outcome) *agent.Outcome {
	t.Helper()
	var out *agent.Outcome
	testkit.WaitFor(t, 20*time.Second, "a new answer to "+id, func() bool {
		o, err := e.client.Result(id)
		if err != nil || not != nil && string(o.Manifest) == string(not.Manifest) {
			return false
		}
		out = o
		return true
	})
	return out
}

// A human may ask for a rerun of the same request again and again; an ack
// of an earlier uncertain answer is no evidence against a later rerun, and
// the agent's ack of the final answer names it, so the host collects it.
func TestEveryRerunRuns(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	id := e.submit(t, "block")
	var last *agent.Outcome
	for round := 1; round <= 2; round++ {
		e.block()
		d := startDaemonProcess(t, e.pair, env...)
		testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == round })
		d.Kill()
		e.unblock()
		d = startDaemonProcess(t, e.pair, env...)
		last = e.waitAnswer(t, id, last)
		if last.Receipt.Status != bridge.StatusUncertain {
			t.Fatalf("round %d, after the crash: %s (%s)", round, last.Receipt.Status, last.Receipt.Reason)
		}
		testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
		if err := e.client.Ack(last); err != nil { // `bridge result --ack`
			t.Fatal(err)
		}
		d.Kill()
		if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
			t.Fatal(err)
		}
		// Claimed for the next start: it waits to start, it was not cut off.
		for _, f := range Doctor(e.host, doctor.Options{}) {
			if f.Check == "cut-off" {
				t.Fatalf("doctor: %s", f.Message)
			}
		}
	}
	startDaemonProcess(t, e.pair, env...)
	last = e.waitAnswer(t, id, last)
	if last.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the second rerun: %s (%s): %s", last.Receipt.Status, last.Receipt.Reason, last.Receipt.Detail)
	}
	e.wantStarts(t, "block", id, 3)
	if err := e.client.Ack(last); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(e.toHost(), id+".ack"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := bridge.OpenAck(data, id, e.host.Config.ID, e.agent.Config.ID, [][]byte{e.agent.Identity().SignPublic()})
	if err != nil || a.ResultSHA256 != bridge.SHA256Hex(last.Manifest) {
		t.Fatalf("the ack does not name the final answer (%v): the host would never collect it", err)
	}
}

// A request whose run record a repair dropped is held uncertain
// (record-lost); a human's rerun of it runs, and is not held again for
// the output of the run the ledger lost.
func TestRerunOfRecordLostRuns(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.block()
	id := e.submit(t, "chatty") // its output streams: progress chunks in the folder
	env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	d := startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the op to stream", func() bool {
		_, err := os.Stat(filepath.Join(e.toAgent(), id+".progress-1"))
		return err == nil
	})
	d.Kill()
	e.unblock()
	dropRunRecord(t, e)
	// A folder writer without keys puts junk at the ack's name: it must
	// not pass for the agent's ack and keep the agent from being told.
	os.WriteFile(filepath.Join(e.toHost(), id+".ack"), []byte("BRA1 junk"), 0o644)
	d = startDaemonProcess(t, e.pair, env...)
	out := e.wait(t, id)
	if out.Receipt.Status != bridge.StatusUncertain || out.Receipt.Reason != "record-lost" {
		t.Fatalf("after the repair: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to hold it", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
	d.Kill()
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
		t.Fatal(err)
	}
	startDaemonProcess(t, e.pair, env...)
	out = e.waitAnswer(t, id, out)
	if out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the rerun: %s (%s): %s", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail)
	}
	if n := e.starts(t, "chatty", id); n != 2 {
		t.Fatalf("started %d times, want 2", n)
	}
}

// dropRunRecord damages the ledger's last record (the run's) and repairs
// it, as a torn disk would: the entry is left claimed.
func dropRunRecord(t *testing.T, e *edge) {
	t.Helper()
	db := e.host.Path("ledger", "ledger.db")
	data, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	at := lastIndex(data, `"state":"running"`)
	if at < 0 {
		t.Fatal("no running record in the ledger")
	}
	data[at+1] = 'X'
	os.WriteFile(db, data, 0o600)
	os.Remove(db + ".checked")
	if rep, err := RepairLedger(e.host); err != nil || !rep.Damaged {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
}

func lastIndex(data []byte, s string) int {
	for i := len(data) - len(s); i >= 0; i-- {
		if string(data[i:i+len(s)]) == s {
			return i
		}
	}
	return -1
}

// A human's rerun whose process cannot start (its program broke since) is
// not answered failed, which tells the agent a retry is safe: the request
// ran before, so it stays uncertain (rerun-refused).
func TestRerunThatCannotStartIsUncertain(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	prog := filepath.Join(e.bin, "bridge-test-missing-prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho missing-$1 >> \"$RUNS\"\nwhile [ -f \"$RUNS.block\" ]; do sleep 0.05; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.block()
	id := e.submit(t, "missing")
	env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	d := startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "missing", id) == 1 })
	d.Kill()
	e.unblock()
	d = startDaemonProcess(t, e.pair, env...)
	out := e.wait(t, id)
	if out.Receipt.Status != bridge.StatusUncertain {
		t.Fatalf("after the crash: %s", out.Receipt.Status)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
	d.Kill()
	// Found on PATH, but the kernel cannot execute it.
	if err := os.WriteFile(prog, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
		t.Fatal(err)
	}
	startDaemonProcess(t, e.pair, env...)
	out = e.waitAnswer(t, id, out)
	if out.Receipt.Status != bridge.StatusUncertain || out.Receipt.Reason != "rerun-refused" {
		t.Fatalf("a rerun that could not start: %s (%s); want uncertain (rerun-refused)", out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
}

// backupHome copies the host's home, as a backup would.
// doneAfterBackup backs the host's home up while a request runs, lets it
// end done and stops the daemon.
func doneAfterBackup(t *testing.T) (e *edge, id, backup string, done *agent.Outcome) {
	t.Helper()
	e = newEdge(t)
	e.block()
	d := e.daemon(t)
	id = e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == 1 })
	testkit.WaitFor(t, 5*time.Second, "the ledger to say running", func() bool { return e.entry(t, id).State == ledger.StateRunning })
	backup = backupHome(t, e)
	e.unblock()
	if done = e.wait(t, id); done.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the run: %s", done.Receipt.Status)
	}
	stopDaemon(d, context.Background())
	return e, id, backup, done
}

// rerunAfterBackup makes a request uncertain (its daemon killed while it
// ran), backs the host's home up, and has a human's rerun answered done by
// a new daemon process, which it returns running.
func rerunAfterBackup(t *testing.T) (e *edge, env []string, id, backup string, done *agent.Outcome, d *daemonProcess) {
	t.Helper()
	e = newEdge(t)
	env = []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	id, uncertain := uncertainAfterCrash(t, e, env)
	backup = backupHome(t, e)
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
		t.Fatal(err)
	}
	d = startDaemonProcess(t, e.pair, env...)
	if done = e.waitAnswer(t, id, uncertain); done.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the rerun: %s", done.Receipt.Status)
	}
	return e, env, id, backup, done, d
}

// uncertainAfterCrash submits a request of the op block, kills the daemon
// process while it runs, and has a new one answer it uncertain (it may
// have had its effect); no daemon runs on return.
func uncertainAfterCrash(t *testing.T, e *edge, env []string) (id string, uncertain *agent.Outcome) {
	t.Helper()
	e.block()
	id = e.submit(t, "block")
	d := startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == 1 })
	d.Kill()
	e.unblock()
	d = startDaemonProcess(t, e.pair, env...)
	uncertain = e.waitAnswer(t, id, nil)
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
	d.Kill()
	return id, uncertain
}

func backupHome(t *testing.T, e *edge) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "home")
	if err := exec.Command("cp", "-a", e.hostHome, dir).Run(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// restoreHome puts a backup in place of the host's home and repairs the
// ledger, as docs/OPERATIONS.md says to.
func restoreHome(t *testing.T, e *edge, backup string) {
	t.Helper()
	os.RemoveAll(e.hostHome)
	if err := exec.Command("cp", "-a", backup, e.hostHome).Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := RepairLedger(e.host); err != nil {
		t.Fatal(err)
	}
}

// A home restored from a backup taken while a request waited for approval:
// the request was approved and ran since, and its agent acked and took its
// files away. No answer of the restored ledger's (approval expired, a
// denial) replaces the result the host signed; the ledger records it.
func TestRestoredApprovalKeepsItsAnswer(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	d := e.daemon(t)
	id := e.submit(t, "gated")
	testkit.WaitFor(t, 10*time.Second, "the request to await approval", func() bool { return e.entry(t, id).State == ledger.StateAwaitingApproval })
	stopDaemon(d, context.Background())
	backup := backupHome(t, e)
	d = e.daemon(t)
	if _, err := operator.Approve(e.host, "cloud-1/"+id); err != nil {
		t.Fatal(err)
	}
	done := e.wait(t, id)
	if done.Receipt.Status != bridge.StatusDone {
		t.Fatalf("approved: %s", done.Receipt.Status)
	}
	if err := e.client.Ack(done); err != nil {
		t.Fatal(err)
	}
	stopDaemon(d, context.Background())
	restoreHome(t, e, backup)
	// The approval the backup waits for expired long ago.
	runDaemon(t, e.host, DaemonOptions{Rescan: 300 * time.Millisecond, ApprovalTTL: time.Millisecond, Env: envWith(e.env)})
	testkit.WaitFor(t, 15*time.Second, "the ledger to record the signed result", func() bool {
		got := e.entry(t, id)
		return got.State == ledger.StateDone && got.Reason == "record-lost"
	})
	out, err := e.client.Result(id)
	if err != nil || string(out.Manifest) != string(done.Manifest) {
		t.Fatalf("the agent's answer was replaced: %v", err)
	}
	if n := e.starts(t, "gated", id); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// A whole home restored from a backup taken before a request ran, which
// then ran, was acked and collected: a copy of its files a folder writer
// kept comes back before it expires. The result the host keeps until the
// request expires shows it was answered: it never runs twice.
func TestRestoredHomeAndReplayNeverRunsTwice(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id, manifest, payload := e.pendingThenStopped(t, "block")
	backup := backupHome(t, e)
	os.WriteFile(filepath.Join(e.toHost(), id+".payload"), payload, 0o644)
	d := e.daemon(t)
	out := e.wait(t, id)
	if out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("first run: %s", out.Receipt.Status)
	}
	if err := e.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	stopDaemon(d, context.Background())
	if _, err := GC(e.host, GCOptions{Grace: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.client.GC(false); err != nil {
		t.Fatal(err)
	}
	restoreHome(t, e, backup)
	os.WriteFile(filepath.Join(e.toHost(), id+".payload"), payload, 0o644)
	os.WriteFile(filepath.Join(e.toHost(), id+".manifest"), manifest, 0o644)
	d = e.daemon(t)
	testkit.WaitFor(t, 10*time.Second, "the ledger to record the answer", func() bool { return e.entry(t, id).State.Terminal() })
	settleRescans(t, d)
	if n := e.starts(t, "block", id); n != 1 {
		t.Fatalf("ran %d times after the home was restored and the request replayed", n)
	}
}

// After a rotation the agent's old key is revoked, or its overlap ends
// (its thief may write to the folder): an ack signed by it is no evidence,
// and does not keep a request of the new key from running.
func TestOldKeyMakesNoEvidence(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"revoked", "expired"} {
		t.Run(how, func(t *testing.T) {
			e := newEdge(t)
			e.daemon(t)
			stolen := e.agent.Identity()
			overlap := time.Hour
			if how == "expired" {
				overlap = time.Second
			}
			if _, err := e.agent.Rotate(overlap); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 10*time.Second, "the host to follow the rotation", func() bool {
				p, err := e.host.PeerByID(e.agent.Config.ID)
				return err == nil && len(p.Keys) == 2
			})
			if how == "revoked" {
				if _, err := e.host.Revoke(stolen.SignKid()); err != nil {
					t.Fatal(err)
				}
			} else {
				time.Sleep(2 * time.Second)
			}
			id := e.submit(t, "gated")
			testkit.WaitFor(t, 10*time.Second, "the request to await approval", func() bool { return e.entry(t, id).State == ledger.StateAwaitingApproval })
			forged, err := bridge.SignAck(stolen, bridge.Ack{ID: id, Agent: e.agent.Config.ID, Host: e.host.Config.ID,
				ResultSHA256: bridge.SHA256Hex([]byte("anything")), Created: time.Now().Unix()})
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(e.toHost(), id+".ack"), forged, 0o644)
			if _, err := operator.Approve(e.host, "cloud-1/"+id); err != nil {
				t.Fatal(err)
			}
			if out := e.wait(t, id); out.Receipt.Status != bridge.StatusDone {
				t.Fatalf("approved, with an ack forged by a %s key in the folder: %s (%s)", how, out.Receipt.Status, out.Receipt.Reason)
			}
			if n := e.starts(t, "gated", id); n != 1 {
				t.Fatalf("ran %d times", n)
			}
		})
	}
}

// A request id comes back with another manifest after a whole home was
// restored (an agent that lost its own home retries with the same
// idempotency key): the result of the first manifest shows the id was
// answered, so it never runs, but it is not that request's answer (its
// agent could not open it): the request is held uncertain and told so.
func TestResultOfAnotherManifestIsHeld(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	d := e.daemon(t)
	warm := e.submit(t, "blockidem")
	e.wait(t, warm)
	stopDaemon(d, context.Background())
	backup := backupHome(t, e)
	d = e.daemon(t)
	id, m1, p1 := e.sealManual(t, "blockidem", map[string]string{}, nil)
	os.WriteFile(filepath.Join(e.toHost(), id+".payload"), p1, 0o644)
	os.WriteFile(filepath.Join(e.toHost(), id+".manifest"), m1, 0o644)
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("first: %s", out.Receipt.Status)
	}
	stopDaemon(d, context.Background())
	restoreHome(t, e, backup)
	_, m2, p2 := e.sealManual(t, "blockidem", map[string]string{}, func(n *bridge.NewRequest) { n.ID = id })
	os.WriteFile(filepath.Join(e.toHost(), id+".payload"), p2, 0o644)
	os.WriteFile(filepath.Join(e.toHost(), id+".manifest"), m2, 0o644)
	e.daemon(t)
	testkit.WaitFor(t, 10*time.Second, "the agent to get an answer it can open", func() bool {
		out, err := e.client.Result(id)
		return err == nil && out.Receipt.Status == bridge.StatusUncertain && out.Receipt.Reason == "record-lost"
	})
	// The answer is published before its record (DESIGN §6): wait for it.
	testkit.WaitFor(t, 10*time.Second, "the ledger to hold it uncertain", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
	if n := e.starts(t, "blockidem", id); n != 1 {
		t.Fatalf("ran %d times", n)
	}
}

// A folder writer without keys puts a file where the host keeps the
// agent's result directory: it is cleared, and the answer goes out.
func TestSquattedResultDirectoryIsCleared(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	e.block()
	e.daemon(t)
	id := e.submit(t, "block")
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == 1 })
	dir := e.toAgent()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("squat"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.unblock()
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("answer: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateDone })
	if _, err := e.client.Ops(""); err != nil {
		t.Fatalf("the op catalog, which lived in the squatted directory: %v", err)
	}
}

// A human orders a rerun of an uncertain request: the agent is told
// (rerun-ordered), its status says so, and waiting waits for the rerun's
// answer instead of returning the uncertain one at once.
func TestWaitFollowsAnOrderedRerun(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	e.block()
	id := e.submit(t, "block")
	d := startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == 1 })
	d.Kill()
	startDaemonProcess(t, e.pair, env...)
	uncertain := e.wait(t, id)
	if uncertain.Receipt.Status != bridge.StatusUncertain {
		t.Fatalf("after the crash: %s", uncertain.Receipt.Status)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil { // queued for the running daemon
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the agent to see the rerun ordered", func() bool {
		st, err := e.client.Status(id)
		return err == nil && st.State == bridge.StateRerunOrdered
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if out, err := e.client.Wait(ctx, id, nil); err == nil {
		t.Fatalf("wait returned the answer a rerun replaces: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	e.unblock()
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the rerun's answer: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	e.wantStarts(t, "block", id, 2)
}

// A home restored from a backup holds less than the folder: a request that
// ran to its end after the backup (taken while it ran), or an uncertain
// request that a human's rerun finished since. The host's newer signed
// result in the folder is what happened: the ledger catches up to it, it
// is never replaced by an older answer, and nothing runs again.
func TestRestoredHomeKeepsNewerResult(t *testing.T) {
	t.Parallel()
	t.Run("backup while it ran", func(t *testing.T) {
		e, id, backup, done := doneAfterBackup(t)
		restoreHome(t, e, backup)
		d := e.daemon(t)
		testkit.WaitFor(t, 10*time.Second, "the ledger to catch up", func() bool {
			got := e.entry(t, id)
			return got.State == ledger.StateDone && got.Reason == "record-lost"
		})
		settleRescans(t, d)
		if out, err := e.client.Result(id); err != nil || string(out.Manifest) != string(done.Manifest) {
			t.Fatalf("the agent's answer changed: %v", err)
		}
		if n := e.starts(t, "block", id); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
	// A red team: the same, but a folder writer deleted the answer's output
	// before the restored daemon started. A result without its output is
	// nobody's answer: the ledger must not record it done (with no copy
	// anywhere to give the agent), and the agent must get an answer.
	t.Run("backup while it ran, output deleted", func(t *testing.T) {
		e, id, backup, done := doneAfterBackup(t)
		must(t, os.Remove(filepath.Join(e.toAgent(), id+".output")))
		restoreHome(t, e, backup)
		e.daemon(t)
		got := e.waitAnswer(t, id, done)
		if got.Receipt.Status != bridge.StatusUncertain {
			t.Fatalf("the agent got %s, want uncertain", got.Receipt.Status)
		}
		// The answer is published before the ledger records it.
		testkit.WaitFor(t, 5*time.Second, "the ledger to say uncertain", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
		if n := e.starts(t, "block", id); n != 1 {
			t.Fatalf("ran %d times", n)
		}
	})
	t.Run("backup while uncertain, rerun since", func(t *testing.T) {
		e, env, id, backup, done, d := rerunAfterBackup(t)
		testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateDone })
		d.Kill()
		restoreHome(t, e, backup)
		dp := startDaemonProcess(t, e.pair, env...)
		testkit.WaitFor(t, 10*time.Second, "the ledger to catch up", func() bool { return e.entry(t, id).State == ledger.StateDone })
		dp.WaitRescans(t, 3)
		if out, err := e.client.Result(id); err != nil || string(out.Manifest) != string(done.Manifest) {
			t.Fatalf("the agent's answer changed: %v", err)
		}
		if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err == nil {
			t.Fatal("a request whose rerun ended done could be run again")
		}
		if n := e.starts(t, "block", id); n != 2 {
			t.Fatalf("ran %d times, want 2", n)
		}
	})
}

// A red team: a home backed up while a request was uncertain; a human's
// rerun then ended done, but a folder writer deleted that answer's output
// before the restored home's daemon started, and the agent had not taken
// it. Nothing can deliver the rerun's answer any more: the ledger's
// uncertain answer stands, and the agent, told a rerun's answer would
// come, must be told it will not (not wait for ever).
func TestLostRerunAnswerAfterRestore(t *testing.T) {
	t.Parallel()
	e, _, id, backup, _, d := rerunAfterBackup(t)
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateDone })
	d.Kill()
	must(t, os.Remove(filepath.Join(e.toAgent(), id+".output")))
	restoreHome(t, e, backup)
	var logs testkit.LockedBuffer
	runDaemon(t, e.host, DaemonOptions{Rescan: 300 * time.Millisecond, Grace: 100 * time.Millisecond, Env: envWith(e.env),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := e.client.Wait(ctx, id, nil)
	if err != nil {
		cur, rerr := e.client.Result(id)
		if rerr == nil {
			t.Logf("the agent holds %s, rerun ordered %v", cur.Receipt.Status, e.client.RerunOrdered(cur))
		}
		ents, _ := os.ReadDir(e.toAgent())
		for _, de := range ents {
			fi, _ := de.Info()
			t.Logf("folder: %s %d", de.Name(), fi.Size())
		}
		evs, _ := ReadAudit(e.host, 0)
		for _, ev := range evs {
			t.Logf("audit: %s %s %s %s", ev.Event, ev.ID, ev.Status, ev.Detail)
		}
		items, _ := e.client.Inbox()
		for _, it := range items {
			t.Logf("inbox: %s %s %s", it.Note.Event, it.Note.Request, it.Note.Supersedes)
		}
		t.Fatalf("the agent's wait: %v (result: %v)", err, rerr)
	}
	if out.Receipt.Status != bridge.StatusUncertain || e.client.RerunOrdered(out) {
		t.Fatalf("the agent holds %s (rerun ordered: %v), want the uncertain answer standing", out.Receipt.Status, e.client.RerunOrdered(out))
	}
	if st := e.entry(t, id).State; st != ledger.StateUncertain {
		t.Fatalf("the ledger says %s, want uncertain", st)
	}
	if n := e.starts(t, "block", id); n != 2 {
		t.Fatalf("ran %d times, want 2", n)
	}
}

// A folder writer puts back an earlier uncertain answer while a human's
// rerun waits: an answer older than the ledger's last move is no evidence
// that the ledger is behind, and the rerun runs.
func TestOlderResultIsNoEvidence(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	id := e.submit(t, "block")
	var first []byte
	var firstOut []byte
	var last *agent.Outcome
	for round := 1; round <= 2; round++ {
		e.block()
		d := startDaemonProcess(t, e.pair, env...)
		testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == round })
		d.Kill()
		d = startDaemonProcess(t, e.pair, env...)
		last = e.waitAnswer(t, id, last)
		testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
		if round == 1 {
			first, _ = os.ReadFile(filepath.Join(e.toAgent(), id+".result"))
			firstOut, _ = os.ReadFile(filepath.Join(e.toAgent(), id+".output"))
		}
		d.Kill()
		time.Sleep(1100 * time.Millisecond) // the ledger moves a second after the answer
		if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
			t.Fatal(err)
		}
	}
	e.unblock()
	os.WriteFile(filepath.Join(e.toAgent(), id+".output"), firstOut, 0o644)
	os.WriteFile(filepath.Join(e.toAgent(), id+".result"), first, 0o644)
	startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 20*time.Second, "the rerun's answer", func() bool {
		out, err := e.client.Result(id)
		return err == nil && out.Receipt.Status == bridge.StatusDone
	})
	e.wantStarts(t, "block", id, 3)
}

// wantStarts fails the test unless op started want times for id.
func (e *edge) wantStarts(t *testing.T, op, id string, want int) {
	t.Helper()
	if n := e.starts(t, op, id); n != want {
		t.Fatalf("%s %s started %d times, want %d", op, id, n, want)
	}
}

// uncertainBlock runs a block op and crashes the daemon while it runs: the
// request is answered uncertain and recorded so, by the daemon it returns
// (serving, with env).
func (e *edge) uncertainBlock(t *testing.T) (id string, out *agent.Outcome, d *daemonProcess, env []string) {
	t.Helper()
	e.block()
	id = e.submit(t, "block")
	env = []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	d = startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the op to start", func() bool { return e.starts(t, "block", id) == 1 })
	d.Kill()
	e.unblock()
	d = startDaemonProcess(t, e.pair, env...)
	out = e.wait(t, id)
	if out.Receipt.Status != bridge.StatusUncertain {
		t.Fatalf("after the crash: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateUncertain })
	return id, out, d, env
}

// A rerun the running daemon ordered while the request's manifest was not
// in the folder waits pending; if the daemon stops before the manifest
// comes back, the next start must still run it. Its uncertain answer was in
// the finished set, which rescans skip, and the stalled sweep leaves alone
// a request whose manifest is in the folder: it waited for ever (found by
// the lifecycle model, seed 42 under load).
func TestRerunLeftPendingRunsAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id, out, d, env := e.uncertainBlock(t)
	manifest := filepath.Join(e.toHost(), id+".manifest")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(manifest) // in transit again (a sync client moving it)
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the rerun to wait for its manifest", func() bool { return e.entry(t, id).State == ledger.StatePending })
	d.Stop(t, 1)
	if err := os.WriteFile(manifest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	startDaemonProcess(t, e.pair, env...)
	out = e.waitAnswer(t, id, out)
	if out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the rerun: %s (%s): %s", out.Receipt.Status, out.Receipt.Reason, out.Receipt.Detail)
	}
	e.wantStarts(t, "block", id, 2)
}

// A human's rerun that the ledger then loses (here: the ledger restored from
// a backup taken before it) leaves the uncertain answer standing: its
// private copies, set aside by the rerun, come back, so it is published
// again if the folder loses it, and the agent told of the rerun is told
// that it was lost instead of waiting for ever. Nothing runs again (found
// by the red team: the copies were removed, and the agent waited).
func TestLostRerunKeepsTheUncertainAnswer(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id, out, d, env := e.uncertainBlock(t)
	d.Stop(t, 1)
	backup := testkit.BackupLedger(t, e.host)
	// The rerun is ordered while its manifest is away, so it cannot start.
	manifest := filepath.Join(e.toHost(), id+".manifest")
	data, _ := os.ReadFile(manifest)
	os.Remove(manifest)
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the agent to hear of the rerun", func() bool { return e.client.RerunOrdered(out) })
	testkit.RestoreLedger(t, e.host, backup)
	must(t, os.WriteFile(manifest, data, 0o644))
	startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the agent to hear that the rerun was lost", func() bool { return !e.client.RerunOrdered(out) })
	kept := e.host.Path("results", e.agent.Config.ID, id+"."+bridge.ExtResult)
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("the uncertain answer's private copy is not back: %v", err)
	}
	res := filepath.Join(e.toAgent(), id+"."+bridge.ExtResult)
	must(t, os.Remove(res)) // a sync client loses it
	testkit.WaitFor(t, 10*time.Second, "the uncertain answer to be published again", func() bool {
		o, err := e.client.Result(id)
		return err == nil && bridge.SHA256Hex(o.Manifest) == bridge.SHA256Hex(out.Manifest)
	})
	if st := e.entry(t, id).State; st != ledger.StateUncertain {
		t.Fatalf("the ledger says %s", st)
	}
	e.wantStarts(t, "block", id, 1)
}

// A second rerun's reconcile cut short between its two renames (the
// manifest set aside, the output not yet) must not put back the second
// uncertain answer beside the first one's set-aside output: only an output
// the manifest pins goes back with it, or the agent could never open the
// answer published again (found by the red team).
func TestCutShortSecondRerunKeepsAMatchingPair(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id, u1, d, env := e.uncertainBlock(t)
	d.Stop(t, 1)
	e.block()
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
		t.Fatal(err)
	}
	d = startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the rerun to start", func() bool { return e.starts(t, "block", id) == 2 })
	d.Kill()
	e.unblock()
	d = startDaemonProcess(t, e.pair, env...)
	u2 := e.waitAnswer(t, id, u1)
	testkit.WaitFor(t, 5*time.Second, "the ledger to record the second uncertain answer", func() bool {
		en := e.entry(t, id)
		return en.State == ledger.StateUncertain && en.ResultSHA256 == bridge.SHA256Hex(u2.Manifest)
	})
	d.Stop(t, 1)
	// What a second `reconcile --as rerun` killed after its first rename
	// leaves, had the first rerun's set-aside pair still been there.
	dir := e.host.Path("results", e.agent.Config.ID)
	res, out := filepath.Join(dir, id+"."+bridge.ExtResult), filepath.Join(dir, id+"."+bridge.ExtOutput)
	if _, err := os.Stat(out + supersededSuffix); err != nil {
		t.Fatalf("the first rerun's set-aside output is not there: the test tests nothing: %v", err)
	}
	must(t, os.Rename(res, res+supersededSuffix))
	startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the copies to come back", func() bool { _, err := os.Stat(res); return err == nil })
	for _, ext := range []string{bridge.ExtOutput, bridge.ExtResult} {
		must(t, os.Remove(filepath.Join(e.toAgent(), id+"."+ext))) // a sync client loses them
	}
	testkit.WaitFor(t, 10*time.Second, "the second uncertain answer, published again and whole", func() bool {
		o, err := e.client.Result(id)
		return err == nil && bridge.SHA256Hex(o.Manifest) == bridge.SHA256Hex(u2.Manifest)
	})
	e.wantStarts(t, "block", id, 2)
}

// doneThenRestoredLedger runs a block op to done with a ledger backup taken
// before it, stops the daemon (its finished cache now names the request),
// and puts the backup back: the ledger knows nothing of the request.
func (e *edge) doneThenRestoredLedger(t *testing.T) (id string, env []string) {
	t.Helper()
	env = []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	d := startDaemonProcess(t, e.pair, env...)
	d.Stop(t, 1)
	backup := testkit.BackupLedger(t, e.host)
	d = startDaemonProcess(t, e.pair, env...)
	id = e.submit(t, "block")
	if out := e.wait(t, id); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("%s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateDone })
	d.Stop(t, 1)
	if data, err := os.ReadFile(e.host.Path(finishedName)); err != nil || !strings.Contains(string(data), id) {
		t.Fatalf("the finished cache does not name the request: the test tests nothing (%v)", err)
	}
	testkit.RestoreLedger(t, e.host, backup)
	return id, env
}

// A ledger restored from a backup beside the finished-requests cache of
// later: a request the cache names and the ledger does not hold is looked
// at again after the start-up scan, so the ledger records what the host
// did (catch-up from its published result) and can collect it; the
// cache alone made rescans skip it for ever (found by the red team).
func TestRestoredLedgerBesideFinishedCacheRecordsTheRequest(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id, env := e.doneThenRestoredLedger(t)
	startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the ledger to record the request again", func() bool { return e.entry(t, id).State == ledger.StateDone })
	e.wantStarts(t, "block", id, 1)
}

// The same, when the cache is the only evidence left (the home's kept
// copies gone with a partial restore, the folder's result, output and ack
// removed by a folder writer), beside 20,000 more finished requests, so
// that the request's key is not in the first rescans' share of checks: the
// cache still counts as evidence when the request is looked at again, and
// it is held uncertain (record-lost), never run a second time (found by the
// red team: the look dropped the key from the cache first).
func TestFinishedCacheAloneKeepsARequestFromRunningAgain(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	id, env := e.doneThenRestoredLedger(t)
	ag := e.agent.Config.ID
	for _, p := range []string{e.host.Path("manifests", ag, id+".manifest"), e.host.Path("results", ag, id+".result"), e.host.Path("results", ag, id+".output")} {
		must(t, os.Remove(p))
	}
	ents, _ := os.ReadDir(e.toAgent())
	for _, en := range ents {
		if strings.HasPrefix(en.Name(), id) {
			must(t, os.Remove(filepath.Join(e.toAgent(), en.Name())))
		}
	}
	os.Remove(filepath.Join(e.toHost(), id+".ack"))
	key := ag + "/" + id
	n := 20000 // the test daemon rescans every 200 ms: the key's share must come late
	for sh := (n + 1 + 999) / 1000; int(fnv32a(key))%sh < 12; sh = (n + 1 + 999) / 1000 {
		n += 1000
	}
	f, err := os.OpenFile(e.host.Path(finishedName), os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	for range n {
		fmt.Fprintf(f, "%s/%s -1 0 0 -1 0 0\n", ag, bridge.NewRequestID())
	}
	must(t, f.Close())
	startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the request to be held uncertain", func() bool {
		en := e.entry(t, id)
		return en.State == ledger.StateUncertain && en.Reason == "record-lost"
	})
	e.wantStarts(t, "block", id, 1)
}

// A red team (session 30): a request answered uncertain, then done by a
// human's rerun; its ledger record is lost (the ledger restored from a
// backup taken before it, repaired), and a folder writer puts the uncertain
// answer back. The request comes back record-lost: the home's done copy,
// newer than the folder's, stands (and is published again), never replaced
// by the folder's older one, and nothing runs again.
func TestRecordLostKeepsTheHomesNewerResult(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	env := []string{"RUNS=" + e.runs, "PATH=" + e.env["PATH"]}
	d := startDaemonProcess(t, e.pair, env...)
	d.Kill()
	before := testkit.BackupLedger(t, e.host)
	id, uncertain := uncertainAfterCrash(t, e, env)
	var older [2][]byte
	for i, ext := range []string{bridge.ExtResult, bridge.ExtOutput} {
		older[i] = mustRead(t, filepath.Join(e.toAgent(), id+"."+ext))
	}
	if _, err := Reconcile(e.host, "cloud-1/"+id, "rerun"); err != nil {
		t.Fatal(err)
	}
	d = startDaemonProcess(t, e.pair, env...)
	done := e.waitAnswer(t, id, uncertain)
	if done.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the rerun: %s", done.Receipt.Status)
	}
	testkit.WaitFor(t, 5*time.Second, "the ledger to record it", func() bool { return e.entry(t, id).State == ledger.StateDone })
	d.Kill()

	testkit.RestoreLedger(t, e.host, before)
	if _, err := RepairLedger(e.host); err != nil {
		t.Fatal(err)
	}
	for i, ext := range []string{bridge.ExtResult, bridge.ExtOutput} {
		must(t, os.WriteFile(filepath.Join(e.toAgent(), id+"."+ext), older[i], 0o644))
	}
	d = startDaemonProcess(t, e.pair, env...)
	testkit.WaitFor(t, 10*time.Second, "the request to come back", func() bool { return e.entry(t, id).State.Answered() })
	d.WaitRescans(t, 2)
	if kept := mustRead(t, e.host.Path("results", e.agent.Config.ID, id+"."+bridge.ExtResult)); string(kept) != string(done.Manifest) {
		t.Fatal("the home's newer (done) copy was replaced by the folder's older answer")
	}
	if got := mustRead(t, filepath.Join(e.toAgent(), id+"."+bridge.ExtResult)); string(got) != string(done.Manifest) {
		t.Error("the folder does not hold the done answer again")
	}
	if n := e.starts(t, "block", id); n != 2 {
		t.Fatalf("ran %d times, want 2", n)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
