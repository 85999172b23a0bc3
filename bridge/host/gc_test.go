package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/ledger"
	"github.com/syncbridge/bridge/bridge/operator"
)

// GC removes an acked result once the grace passed and the request
// expired (until then the result shows that the host answered it, should
// the ledger be restored from a backup), forgets the ledger entry with it,
// and a late redelivery of the request is then refused as expired:
// collected ids never run again.
func TestGCCollectsAndForgets(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	countFile := filepath.Join(t.TempDir(), "count")
	p.start(t, map[string]string{"COUNT_FILE": countFile})
	id, manifest, payload := p.sealManual(t, "count", nil, func(n *bridge.NewRequest) { n.Expires = n.Created.Add(2 * time.Second) })
	os.WriteFile(filepath.Join(p.toHost(), id+".payload"), payload, 0o644)
	os.WriteFile(filepath.Join(p.toHost(), id+".manifest"), manifest, 0o644)
	out := p.wait(t, id)
	if err := p.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	// Acked, past the grace, not yet expired: nothing to collect.
	rep, err := GC(p.host, GCOptions{Grace: time.Nanosecond, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Items) != 0 {
		t.Fatalf("before the request expired: %+v", rep.Items)
	}
	// Nor past the retention: it concerns results nobody acked; an acked
	// one stays as evidence until its request expires (issue 26: a short
	// --retention collected it).
	rep, err = GC(p.host, GCOptions{Grace: time.Nanosecond, Retention: time.Nanosecond, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range rep.Items {
		if it.ID == id {
			t.Fatalf("acked, past the retention, before the request expired: %+v", it)
		}
	}
	p.stop(t)
	later := func() time.Time { return time.Now().Add(time.Hour) }
	gcLater := func(o GCOptions) *GCReport {
		t.Helper()
		rep, err := gcAt(p.host, o, later)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// An hour later: a dry run lists, and removes nothing.
	rep = gcLater(GCOptions{DryRun: true})
	if len(rep.Items) != 2 || rep.Items[0].Why != "acked" || rep.Items[1].What != "ledger entry" {
		t.Fatalf("dry run: %+v", rep.Items)
	}
	if _, err := os.Stat(filepath.Join(p.toAgent(), id+".result")); err != nil {
		t.Fatal("a dry run removed the result")
	}
	if rep := gcLater(GCOptions{}); len(rep.Items) != 2 || rep.Items[1].What != "ledger entry" {
		t.Fatalf("gc: %+v", rep)
	}
	for _, ext := range []string{".result", ".output"} {
		if _, err := os.Stat(filepath.Join(p.toAgent(), id+ext)); !os.IsNotExist(err) {
			t.Fatalf("%s still there after gc", ext)
		}
	}
	if p.entry(t, id).ID != "" {
		t.Fatal("the ledger entry was kept past its expiry")
	}
	// The agent keeps its copy: result and status still work.
	if out, err := p.client.Result(id); err != nil || out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("the agent lost its result: %v", err)
	}
	// The request is delivered again: refused as expired, never run again.
	d := runDaemon(t, p.host, DaemonOptions{Now: later, Rescan: 200 * time.Millisecond, Env: envWith(map[string]string{"COUNT_FILE": countFile})})
	os.WriteFile(filepath.Join(p.toHost(), id+".payload"), payload, 0o644)
	os.WriteFile(filepath.Join(p.toHost(), id+".manifest"), manifest, 0o644)
	settleRescans(t, d)
	if n := testkit.Count(t, countFile, "run"); n != 1 {
		t.Fatalf("ran %d times", n)
	}
	if p.entry(t, id).ID != "" {
		t.Fatal("the late redelivery was admitted again")
	}
	d.fin.mu.Lock()
	_, kept := d.fin.done.get(p.agent.Config.ID + "/" + id)
	d.fin.mu.Unlock()
	if kept {
		t.Fatal("the finished set holds a forgotten request")
	}
	audit, _ := os.ReadFile(p.host.Path("audit.log"))
	if !strings.Contains(string(audit), `"reason":"expired"`) || !strings.Contains(string(audit), `"event":"collected"`) {
		t.Fatalf("audit log:\n%s", audit)
	}
	// The agent's gc removes its ack once the host collected the result.
	files, _, err := p.client.GC(false)
	if err != nil || len(files) == 0 {
		t.Fatalf("agent gc: %v %v", files, err)
	}
}

// A result nobody acked stays (and so does its ledger entry) until the
// retention passes, even after the request expired: an agent may still come
// back for it. Then both go.
func TestGCRetentionOfUnackedResults(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "keep"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(t, s.ID)
	p.stop(t)
	collectAt := func(later time.Duration) {
		t.Helper()
		d, err := NewDaemon(p.host, DaemonOptions{Now: func() time.Time { return time.Now().Add(later) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.openCore(); err != nil {
			t.Fatal(err)
		}
		defer d.closeResources()
		all, _ := d.ledger.List(nil)
		if _, err := d.gc.collect(GCOptions{}, all); err != nil {
			t.Fatal(err)
		}
	}
	collectAt(25 * time.Hour) // expired, but within the retention
	if _, err := os.Stat(filepath.Join(p.toAgent(), s.ID+".result")); err != nil {
		t.Fatal("an unacked result was collected before the retention")
	}
	if p.entry(t, s.ID).ID == "" {
		t.Fatal("the ledger forgot a request whose result is still in the folder")
	}
	collectAt(31 * 24 * time.Hour)
	for _, ext := range []string{".result", ".output"} {
		if _, err := os.Stat(filepath.Join(p.toAgent(), s.ID+ext)); !os.IsNotExist(err) {
			t.Fatalf("%s still there after the retention", ext)
		}
	}
	if p.entry(t, s.ID).ID != "" {
		t.Fatal("the ledger entry was kept after the retention")
	}
}

// The periodic collection reads only the settled entries it may act on: a
// finished request whose result is published and not acked is skipped (not
// decoded) until its retention, and an acked one until the grace passed
// and it expired; then its result is collected and it is forgotten. An
// ordered collection, which reads each ack from the folder, reads by times
// alone: what passed its retention or expired, not the whole ledger.
func TestPeriodicGCReadsOnlyWhatItCanAct(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	d := runDaemon(t, p.host, DaemonOptions{Now: now, Rescan: 100 * time.Millisecond})
	var ids [2]string
	var outs [2]*agent.Outcome
	for i := range ids {
		s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "gc"}, TTL: 3 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = s.ID
		outs[i] = p.wait(t, s.ID)
	}
	acked, unacked := p.agent.Config.ID+"/"+ids[0], p.agent.Config.ID+"/"+ids[1]
	// Recorded before the clock moves: the ledger's last write of an
	// entry comes after the publish the agent saw, and one made on the
	// moved clock would be an hour and a half younger.
	for _, id := range ids {
		testkit.WaitFor(t, 10*time.Second, "the ledger to record the result", func() bool { return p.entry(t, id).ResultSHA256 != "" })
	}
	if err := p.client.Ack(outs[0]); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "a walk to see the ack", func() bool {
		d.fin.mu.Lock()
		defer d.fin.mu.Unlock()
		return d.fin.acks[acked]
	})
	wants := func(o GCOptions) map[string]bool {
		t.Helper()
		o.defaults()
		got := map[string]bool{}
		all, err := d.gc.due(o, now())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range all {
			got[e.Key] = true
		}
		return got
	}
	offset.Store(int64(90 * time.Minute)) // past the grace, before the expiry
	if got := wants(GCOptions{}); len(got) != 0 {
		t.Fatalf("past the grace, before the expiry, the collection reads %v; want nothing (an acked result stays until its request expires)", got)
	}
	if got := wants(GCOptions{Retention: time.Hour}); !got[acked] || !got[unacked] {
		t.Fatalf("past the retention, the collection reads %v; want both", got)
	}
	// An order (`bridge gc`) reads the acks from the folder, and so goes
	// by times alone: nothing before the expiry or the retention.
	if got := wants(GCOptions{Before: now()}); len(got) != 0 {
		t.Fatalf("past the grace, before the expiry, an ordered collection reads %v; want nothing", got)
	}
	if got := wants(GCOptions{Retention: time.Hour, Before: now()}); !got[acked] || !got[unacked] {
		t.Fatalf("past the retention, an ordered collection reads %v; want both", got)
	}
	d.gc.run(GCOptions{})
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(p.toAgent(), id+".result")); err != nil {
			t.Fatalf("a result was collected before its request expired: %v", err)
		}
	}
	offset.Store(int64(4 * time.Hour)) // past the expiry and skew
	if got := wants(GCOptions{}); !got[acked] || got[unacked] {
		t.Fatalf("past the expiry, the collection reads %v; want only the acked %s", got, acked)
	}
	if got := wants(GCOptions{Before: now()}); !got[acked] || !got[unacked] {
		t.Fatalf("past the expiry, an ordered collection reads %v; want both (it reads each ack from the folder)", got)
	}
	d.gc.run(GCOptions{})
	if _, err := os.Stat(filepath.Join(p.toAgent(), ids[0]+".result")); !os.IsNotExist(err) {
		t.Fatalf("the acked result was not collected: %v", err)
	}
	if p.entry(t, ids[0]).ID != "" {
		t.Fatal("the collected request's entry was kept past its expiry")
	}
	if _, err := os.Stat(filepath.Join(p.toAgent(), ids[1]+".result")); err != nil {
		t.Fatalf("the unacked result was collected before its retention: %v", err)
	}
	if p.entry(t, ids[1]).ID == "" {
		t.Fatal("the unacked request's entry was forgotten while its result is in the folder")
	}
	if got := wants(GCOptions{}); len(got) != 0 {
		t.Fatalf("after collecting, the collection reads %v; want nothing", got)
	}
	d.fin.mu.Lock()
	_, inAcks := d.fin.acks[acked]
	d.fin.mu.Unlock()
	if inAcks {
		t.Fatal("the ack set still holds a forgotten request")
	}
}

// A dry run changes nothing: not the home (no ledger check file, no lock
// file, no staging directory), not the folder.
func TestGCDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if err := p.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	p.stop(t)
	later := func() time.Time { return time.Now().Add(time.Hour) }
	check := func(name string) {
		t.Helper()
		before := treeState(t, p.host.Dir, p.host.Config.Folder)
		rep, err := gcAt(p.host, GCOptions{Grace: time.Nanosecond, Retention: time.Nanosecond, DryRun: true}, later)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(rep.Items) == 0 {
			t.Fatalf("%s: the dry run listed nothing, so it proves nothing", name)
		}
		if after := treeState(t, p.host.Dir, p.host.Config.Folder); after != before {
			t.Fatalf("%s: a dry run changed files:\nbefore:\n%s\nafter:\n%s", name, before, after)
		}
	}
	// What the daemon leaves behind a clean stop is gone: a dry run must not
	// make it again.
	for _, name := range []string{"ledger/ledger.db.checked", "staging"} {
		os.RemoveAll(filepath.Join(p.host.Dir, name))
	}
	check("daemon stopped")
}

// treeState lists every file under the roots with its size, mode and
// modification time, one line each.
func treeState(t *testing.T, roots ...string) string {
	t.Helper()
	var b strings.Builder
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, de os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := de.Info()
			if err != nil {
				return err
			}
			size := fi.Size()
			if fi.IsDir() {
				size = 0
			}
			fmt.Fprintf(&b, "%s %d %v %d\n", path, size, fi.Mode(), fi.ModTime().UnixNano())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// A collection ordered (`bridge gc` beside a running daemon) reads the
// acks from the folder, not from what the daemon's walks saw: carried out
// before its first walk (here, by the daemon just opened), it collects a
// result acked while the daemon was down. Going by the walks' acks it kept
// it and said nothing (CI of b400e2c: the crash loop's gc step waited for a
// collection that never came).
func TestOrderedGCReadsAcksFromTheFolder(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.skew = time.Millisecond
	var logs testkit.LockedBuffer
	p.log = slog.New(slog.NewTextHandler(&logs, nil))
	p.start(t, nil)
	s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "gc"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out := p.wait(t, s.ID)
	testkit.WaitFor(t, 10*time.Second, "the ledger to record the result", func() bool { return p.entry(t, s.ID).ResultSHA256 != "" })
	p.stop(t)
	if err := p.client.Ack(out); err != nil { // while the daemon is down
		t.Fatal(err)
	}
	result := filepath.Join(p.toAgent(), s.ID+".result")
	if _, err := os.Stat(result); err != nil {
		t.Fatal(err)
	}

	// Opened, not walking the folder: its clock past the request's
	// expiry, so that the acked result is due.
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true, Skew: time.Millisecond, Logger: p.log,
		Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(context.Background()) })
	if d.fin.walked() {
		t.Fatal("the daemon walked the folder before it was served")
	}
	if _, err := gcAt(p.host, GCOptions{Grace: time.Nanosecond}, d.opt.Now); !errors.Is(err, operator.ErrQueued) {
		t.Fatalf("gc beside an open daemon: %v, want ErrQueued", err)
	}
	// The control loop (started by Open, told of the order by a file
	// notification) carries it out; the folder is not walked until Run.
	ordersDone := func() bool {
		orders, _ := filepath.Glob(p.host.Path("control", "*.json"))
		return len(orders) == 0
	}
	testkit.WaitFor(t, 40*time.Second, "the control loop to carry out the order", ordersDone)
	if _, err := os.Stat(result); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the ordered collection left the result acked while the daemon was down: %v", err)
	}
	if d.fin.walked() {
		t.Fatal("the daemon walked the folder before it was served")
	}
	// The operator was told to look in the log: an ordered collection
	// says it ran, even when it took nothing.
	if _, err := gcAt(p.host, GCOptions{Grace: time.Nanosecond}, d.opt.Now); !errors.Is(err, operator.ErrQueued) {
		t.Fatalf("a second gc beside the open daemon: %v, want ErrQueued", err)
	}
	testkit.WaitFor(t, 40*time.Second, "the control loop to carry out the second order", ordersDone)
	said := regexp.MustCompile("as `bridge gc` ordered\" items=([0-9]+)").FindAllStringSubmatch(logs.String(), -1)
	if len(said) != 2 || said[0][1] == "0" || said[1][1] != "0" {
		t.Errorf("the log does not say both ordered collections ran, the second taking nothing:\n%s", logs.String())
	}
}

// A collection ordered by `bridge gc` takes only what had finished when it
// was ordered (GCOptions.Before, the order's time), and goes by the order's
// time: the daemon may carry it out later (an order left while it was down,
// at its next start), and what finished or came due since was in no list
// the operator saw (a red team's finding, with --retention 0 and a folder
// the daemon could not walk yet).
func TestOrderedGCTakesOnlyWhatFinishedBeforeIt(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	d := runDaemon(t, p.host, DaemonOptions{})
	// Real times throughout: the ledger stamps its entries with the
	// machine's clock, not the daemon's.
	const retention = 300 * time.Millisecond
	finish := func() ledger.Entry {
		t.Helper()
		s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "gc"}, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		p.wait(t, s.ID)
		testkit.WaitFor(t, 10*time.Second, "the ledger to record the result", func() bool { return p.entry(t, s.ID).ResultSHA256 != "" })
		return p.entry(t, s.ID)
	}
	untilPast := func(at time.Time) {
		for time.Now().Before(at) {
			time.Sleep(time.Until(at))
		}
	}
	collected := func(e ledger.Entry) bool {
		_, err := os.Stat(filepath.Join(p.toAgent(), e.ID+".result"))
		return errors.Is(err, fs.ErrNotExist)
	}
	before := finish()
	// Ordered when half the retention had passed, carried out once all of
	// it had: the order goes by its own time.
	untilPast(before.Updated.Add(retention))
	d.gc.run(GCOptions{Retention: retention, Before: before.Updated.Add(retention / 2)})
	if collected(before) {
		t.Fatal("an ordered collection carried out later took a result whose retention passed only after the order")
	}
	ordered := time.Now()
	after := finish()
	if !after.Updated.After(ordered) {
		t.Fatalf("the second request finished at %v, before the order's time %v", after.Updated, ordered)
	}
	d.gc.run(GCOptions{Retention: retention, Before: ordered})
	if !collected(before) || collected(after) {
		t.Fatalf("the ordered collection: collected %v (finished before the order), %v (after it); want true, false", collected(before), collected(after))
	}
	untilPast(after.Updated.Add(retention))
	d.gc.run(GCOptions{Retention: retention})
	if !collected(after) {
		t.Fatal("the next collection left what finished after the order")
	}
}

// An agent publishes its ack without an fsync (SPEC §10): what a power cut
// on its machine leaves of one (nothing, zeros at its size, its beginning)
// is a lost ack, not a forgery. The host's collection notes it as waiting,
// never as refused, and keeps the result; the agent's next ack of the id
// replaces it, and the result is collected as acked. An ack that is whole
// but altered is still refused.
func TestTornAckIsALostAck(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	id, manifest, payload := p.sealManual(t, "echo", map[string]string{"msg": "hi"}, func(n *bridge.NewRequest) { n.Expires = n.Created.Add(2 * time.Second) })
	must(t, os.WriteFile(filepath.Join(p.toHost(), id+".payload"), payload, 0o644))
	must(t, os.WriteFile(filepath.Join(p.toHost(), id+".manifest"), manifest, 0o644))
	out := p.wait(t, id)
	must(t, p.client.Ack(out))
	p.stop(t)
	ackPath := filepath.Join(p.toHost(), id+".ack")
	whole, err := os.ReadFile(ackPath)
	must(t, err)
	later := func() time.Time { return time.Now().Add(time.Hour) }
	collected := func() bool {
		t.Helper()
		rep, err := gcAt(p.host, GCOptions{}, later)
		must(t, err)
		for _, it := range rep.Items {
			if it.ID == id && it.Why == "acked" {
				return true
			}
		}
		return false
	}
	ackEvents := func(event string) int {
		t.Helper()
		evs, err := ReadAudit(p.host, 0)
		must(t, err)
		n := 0
		for _, e := range evs {
			if e.Event == event && strings.HasSuffix(e.File, id+".ack") {
				n++
				if event == "waiting" && e.Reason != "truncated" {
					t.Errorf("a torn ack is waiting for the reason %q, want truncated", e.Reason)
				}
			}
		}
		return n
	}
	torn := []struct {
		name string
		data []byte
	}{{"empty", nil}, {"zeros", make([]byte, len(whole))}, {"its beginning", whole[:len(whole)/2]},
		{"its beginning, then zeros", append(bytes.Clone(whole[:len(whole)/2]), make([]byte, len(whole)-len(whole)/2)...)}}
	for i, c := range torn {
		must(t, os.WriteFile(ackPath, c.data, 0o644))
		if collected() {
			t.Fatalf("%s at the ack's name: the result was collected as acked", c.name)
		}
		if n := ackEvents("refused"); n != 0 {
			t.Fatalf("%s at the ack's name: refused as a forgery", c.name)
		}
		if n := ackEvents("waiting"); n != i+1 {
			t.Fatalf("%s at the ack's name: %d waiting events, want %d", c.name, n, i+1)
		}
		if _, err := os.Stat(filepath.Join(p.toAgent(), id+".result")); err != nil {
			t.Fatalf("%s at the ack's name: %v", c.name, err)
		}
	}
	altered := bytes.Clone(whole)
	altered[len(altered)-10] ^= 1
	must(t, os.WriteFile(ackPath, altered, 0o644))
	if collected() || ackEvents("refused") != 1 {
		t.Fatal("an altered ack was not refused")
	}
	// The agent acks again (`bridge result --ack`): the torn ack is
	// replaced, and the result collected.
	must(t, os.WriteFile(ackPath, nil, 0o644))
	must(t, p.client.Ack(out))
	if !collected() {
		t.Fatal("the result was not collected after the agent acked again")
	}
}
