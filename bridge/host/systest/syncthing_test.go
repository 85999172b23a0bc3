package systest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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
)

// syncthingPolicy's op appends the request id to a file outside the folder:
// one line per execution. It is not idempotent, so a run the SIGKILL
// interrupts must end uncertain, never run twice. The sleep widens the
// window in which the kill finds an op running.
const syncthingPolicy = `
[ops.count]
argv = ["sh", "-c", "echo \"$0\" >> \"$COUNT_FILE\"; sleep 0.05", "{request_id}"]
env = ["PATH", "COUNT_FILE"]
concurrency = 4
timeout = "1m"

[agents.cloud-1]
ops = ["count"]
`

// syncthingOpConcurrency is the policy's concurrency: at most this many
// runs can be interrupted by one kill.
const syncthingOpConcurrency = 4

// TestSyncthingEndToEnd runs host and agent on two folders kept in sync by
// two real Syncthing instances, with the daemon as a real process:
// requests in waves, a partition and heal in the middle, a SIGKILL and
// restart of the daemon, real Syncthing conflict copies of a manifest and of
// a payload, and conflict-named copies of manifests. It then requires that
// every request has exactly one verified result (done, or uncertain for a
// run the kill interrupted), that no request ran twice, and that conflict
// copies were never admitted.
//
// The at-most-once assertion: the op is not idempotent, so every id appears
// at most once in the count file; an id with a done result appears exactly
// once; an id with an uncertain result (reason "crashed") appears zero or
// one times, and there are at most as many of those as runs the kill could
// interrupt.
func TestSyncthingEndToEnd(t *testing.T) {
	// In parallel with the other real sync clients' tests and the crash
	// loop's steps: they mostly wait on processes of their own.
	t.Parallel()
	if testing.Short() {
		t.Skip("a system suite: -short leaves it out (docs/TESTING.md, \"Running\")")
	}
	st := startSyncthingPair(t)
	t0 := time.Now()
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("[%6.2fs] "+format, append([]any{time.Since(t0).Seconds()}, args...)...)
	}
	total := 200
	if s := os.Getenv("BRIDGE_SOAK"); s != "" {
		k, err := strconv.Atoi(s)
		if err != nil || k < 1 {
			t.Fatalf("BRIDGE_SOAK=%q: want a positive integer", s)
		}
		total *= k
	}
	logf("syncthing A (host) and B (agent) in sync; %d requests", total)

	// Homes: the host's bound to A's folder, the agent's to B's. The agent
	// can only be initialised once the host's marker has arrived.
	p := syncthingHomes(t, st)
	base := t.TempDir()
	var err error
	hostID, agentID := p.host.Config.ID, p.agent.Config.ID
	toHostA := st.A.folderPath(bridge.ToHostDir(hostID, agentID))
	toHostB := st.B.folderPath(bridge.ToHostDir(hostID, agentID))
	countFile := filepath.Join(base, "count")
	env := "COUNT_FILE=" + countFile
	daemon := startDaemonProcess(t, p, env)
	daemonLogs := []string{daemon.Log.Name()}
	logf("homes initialised and trusted through the sync; daemon process started")

	var ids []string
	submit := func(k int, what string) {
		t.Helper()
		for i := 0; i < k; i++ {
			s, err := p.client.Submit(agent.SubmitOptions{Op: "count"})
			if err != nil {
				t.Fatalf("submit (%s): %v", what, err)
			}
			ids = append(ids, s.ID)
		}
		logf("submitted %d requests (%s); %d so far", k, what, len(ids))
	}
	executed := func() int { return len(testkit.Lines(t, countFile)) }
	wave := total / 4

	// Wave 1, connected.
	submit(wave, "wave 1, connected")
	first := ids[0]
	testkit.WaitFor(t, 60*time.Second, "the first result on the agent's side", func() bool {
		_, err := p.client.Result(first)
		return err == nil
	})
	logf("first result arrived on B; %d executed", executed())

	// Partition. Each side writes the same two request file names with
	// different content: on A junk with an old mtime (a second writer in the
	// agent's tree), on B the agent's real files. On heal Syncthing keeps the
	// newer (B's) and turns A's into conflict copies.
	st.Partition()
	logf("partitioned")
	junkManifest := []byte("not the agent's manifest\n")
	junkPayload := []byte("not the agent's payload\n")
	conflictM, err := p.agent.KeyedRequestID(hostID, "count", map[string]string{}, "conflict-on-the-manifest")
	if err != nil {
		t.Fatal(err)
	}
	conflictP, err := p.agent.KeyedRequestID(hostID, "count", map[string]string{}, "conflict-on-the-payload")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	testkit.PlantFile(t, base, filepath.Join(toHostA, conflictM+"."+bridge.ExtManifest), junkManifest, old)
	testkit.PlantFile(t, base, filepath.Join(toHostA, conflictP+"."+bridge.ExtPayload), junkPayload, old)
	submit(wave, "wave 2, partitioned")
	for _, key := range []string{"conflict-on-the-manifest", "conflict-on-the-payload"} {
		s, err := p.client.Submit(agent.SubmitOptions{Op: "count", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	if ids[len(ids)-2] != conflictM || ids[len(ids)-1] != conflictP {
		t.Fatalf("keyed ids: got %s %s, want %s %s", ids[len(ids)-2], ids[len(ids)-1], conflictM, conflictP)
	}
	// The daemon meets the junk manifest at the real name first and
	// refuses it (the junk payload alone is just "manifest not there yet").
	testkit.WaitFor(t, 30*time.Second, "the daemon to refuse the junk manifest", func() bool {
		return auditHas(t, p.host, "refused", bridge.RequestPath(hostID, agentID, conflictM, bridge.ExtManifest))
	})
	// Both sides index their version before the heal, so the two really
	// are concurrent versions.
	st.Scan(st.A, "")
	st.Scan(st.B, "")
	executedBeforeHeal := executed()
	st.Heal()
	logf("healed; %d executed before the heal", executedBeforeHeal)

	// SIGKILL the daemon while it works through the backlog the heal
	// delivered, submit a wave while it is down, restart it.
	testkit.WaitFor(t, 90*time.Second, "the daemon to work on the backlog", func() bool { return executed() >= executedBeforeHeal+5 })
	daemon.Kill()
	logf("daemon SIGKILLed with %d executed", executed())
	submit(wave, "wave 3, daemon down")
	daemon = startDaemonProcess(t, p, env)
	daemonLogs = append(daemonLogs, daemon.Log.Name())
	logf("daemon restarted")

	// Conflict-named copies on B, as a sync client would make them: of a
	// finished request's manifest and payload (a replay under another
	// name), and of a request that never had its manifest at the real name.
	// Neither may ever be admitted.
	tag := ".sync-conflict-20200101-000000-" + st.B.id[:7] + "."
	for _, ext := range []string{bridge.ExtManifest, bridge.ExtPayload} {
		data, err := os.ReadFile(filepath.Join(toHostB, first+"."+ext))
		if err != nil {
			t.Fatal(err)
		}
		testkit.PlantFile(t, base, filepath.Join(toHostB, first+tag+ext), data, time.Now())
	}
	never, manifest, payload := p.sealManual(t, "count", nil, nil)
	testkit.PlantFile(t, base, filepath.Join(toHostB, never+"."+bridge.ExtPayload), payload, time.Now())
	testkit.PlantFile(t, base, filepath.Join(toHostB, never+tag+bridge.ExtManifest), manifest, time.Now())

	// Every conflict copy is on the host's side before the last wave, so the
	// daemon is seen to keep serving after meeting them.
	conflicts := map[string][]byte{
		conflictM + ".sync-conflict-*." + bridge.ExtManifest: junkManifest,
		conflictP + ".sync-conflict-*." + bridge.ExtPayload:  junkPayload,
		first + tag + bridge.ExtManifest:                     nil,
		first + tag + bridge.ExtPayload:                      nil,
		never + tag + bridge.ExtManifest:                     manifest,
	}
	testkit.WaitFor(t, 60*time.Second, "the conflict copies on A", func() bool {
		for pat := range conflicts {
			if m, _ := filepath.Glob(filepath.Join(toHostA, pat)); len(m) == 0 {
				return false
			}
		}
		return true
	})
	logf("conflict copies present on A")
	submit(total-3*wave, "wave 4, after the conflicts")

	// Wait for every result, verified by the agent.
	outcomes := map[string]*agent.Outcome{}
	refused := map[string]error{}
	deadline := time.Now().Add(4 * time.Minute)
	lastLog := time.Now()
	for len(outcomes) < len(ids) {
		for _, id := range ids {
			if outcomes[id] != nil {
				continue
			}
			out, err := p.client.Result(id)
			switch {
			case err == nil:
				outcomes[id] = out
				delete(refused, id)
			case !errors.Is(err, agent.ErrNoResult):
				refused[id] = err // maybe a version still being replaced; reported if it stays
			}
		}
		if len(outcomes) == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests have no verified result after 4 minutes (lost?):\n%s",
				len(ids)-len(outcomes), len(ids), syncthingDiagnosis(t, st, p, ids, outcomes, refused, daemonLogs))
		}
		if time.Since(lastLog) > 5*time.Second {
			logf("%d/%d results verified, %d executed", len(outcomes), len(ids), executed())
			lastLog = time.Now()
		}
		time.Sleep(200 * time.Millisecond)
	}
	logf("all %d results verified", len(ids))

	// Let the sync settle, then five more full rescans of the daemon: a
	// late admission of a conflict copy would have happened by then
	// (counted, not slept: a slow machine waits longer, not less). Up to
	// three minutes: a side whose pulls failed while partitioned retries
	// them only a minute later ("isn't making sync progress - retrying in
	// 1m0s"), which a one-minute wait lost to once (CI9, session 17).
	st.WaitInSync(3 * time.Minute)
	daemon.WaitRescans(t, 5)

	// Exactly one result per request, done or (for a run the kill
	// interrupted) uncertain; at most once per id in the count file.
	seen := map[string]int{}
	for _, l := range testkit.Lines(t, countFile) {
		seen[l]++
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var uncertain []string
	done := 0
	for _, id := range ids {
		rc := outcomes[id].Receipt
		switch {
		case rc.Status == bridge.StatusDone:
			done++
			if seen[id] != 1 {
				t.Errorf("request %s is done but ran %d times", id, seen[id])
			}
		case rc.Status == bridge.StatusUncertain && rc.Reason == "crashed":
			uncertain = append(uncertain, id)
			if seen[id] > 1 {
				t.Errorf("uncertain request %s ran %d times", id, seen[id])
			}
		default:
			t.Errorf("request %s ended %s (%s): %s", id, rc.Status, rc.Reason, rc.Detail)
		}
	}
	for id, n := range seen {
		switch {
		case !want[id]:
			t.Errorf("the count file names %q, which is no request submitted at its real name", id)
		case n > 1:
			t.Errorf("request %s ran %d times", id, n)
		}
	}
	if len(uncertain) > syncthingOpConcurrency {
		t.Errorf("%d requests uncertain after one kill; at most %d runs were in flight", len(uncertain), syncthingOpConcurrency)
	}
	effect := 0
	for _, id := range uncertain {
		effect += seen[id]
	}

	// The ledger: one entry per request, none for the conflict-named
	// request, never more than one run.
	entries, err := operator.LedgerEntries(p.host)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]ledger.Entry{}
	for _, e := range entries {
		byID[e.ID] = e
		if !want[e.ID] {
			t.Errorf("ledger entry for %s (%s), which was never submitted at its real name", e.ID, e.State)
		}
		if e.Runs > 1 {
			t.Errorf("ledger: %s started %d times", e.ID, e.Runs)
		}
	}
	if len(byID) != len(ids) {
		t.Errorf("ledger has %d entries for %d requests", len(byID), len(ids))
	}

	// The conflict copies exist on both sides; Syncthing kept the agent's
	// version at the real name (the request ran from it) and the junk went
	// to the copies. The conflict-named request has no result.
	for _, in := range st.sides() {
		dir := in.folderPath(bridge.ToHostDir(hostID, agentID))
		for pat, content := range conflicts {
			m, _ := filepath.Glob(filepath.Join(dir, pat))
			if len(m) == 0 {
				t.Errorf("%s: no conflict copy %s", in.name, pat)
			}
			for _, f := range m {
				if b, err := os.ReadFile(f); err == nil && content != nil && string(b) != string(content) {
					t.Errorf("%s: %s holds %q, want the losing version", in.name, filepath.Base(f), b)
				}
			}
		}
		// The host's tree has one writer: it never conflicts.
		if m, _ := filepath.Glob(filepath.Join(in.folderPath(bridge.ToAgentDir(hostID, agentID)), "*sync-conflict*")); len(m) > 0 {
			t.Errorf("%s: conflict copies in the host's tree: %v", in.name, m)
		}
	}
	// The restarted daemon saw every conflict copy and set it aside as a
	// sync client's conflict copy.
	finalLog, _ := os.ReadFile(daemonLogs[len(daemonLogs)-1])
	for pat := range conflicts {
		m, _ := filepath.Glob(filepath.Join(toHostA, pat))
		for _, f := range m {
			if !strings.Contains(string(finalLog), agentID+"/"+filepath.Base(f)+" kind=conflict") {
				t.Errorf("the daemon's log does not show %s ignored as a conflict copy", filepath.Base(f))
			}
		}
	}
	if _, err := p.client.Result(never); !errors.Is(err, agent.ErrNoResult) {
		t.Errorf("the request whose manifest exists only under a conflict name: result %v, want none", err)
	}
	if seen[never] != 0 || byID[never].ID != "" {
		t.Errorf("the conflict-named request ran (%d) or was recorded (%s)", seen[never], byID[never].State)
	}
	double := 0
	for _, n := range seen {
		if n > 1 {
			double++
		}
	}
	logf("%d requests: %d done, %d uncertain (%d of them had run), %d executions, %d ran more than once; %d conflict-copy patterns ignored",
		len(ids), done, len(uncertain), effect, len(testkit.Lines(t, countFile)), double, len(conflicts))
}

// auditHas reports whether the host's audit log has an event about file.
func auditHas(t *testing.T, h *trust.Home, event, file string) bool {
	t.Helper()
	data, err := os.ReadFile(h.Path("audit.log"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(data), "\n") {
		var e host.AuditEvent
		if json.Unmarshal([]byte(l), &e) == nil && e.Event == event && e.File == file {
			return true
		}
	}
	return false
}

// syncthingDiagnosis says, for requests without a result, where each one's
// files are and what the ledger holds, plus the daemon log tails.
func syncthingDiagnosis(t *testing.T, st *stPair, p *pair, ids []string, outcomes map[string]*agent.Outcome, refused map[string]error, daemonLogs []string) string {
	var b strings.Builder
	entries, err := operator.LedgerEntries(p.host)
	if err != nil {
		fmt.Fprintf(&b, "ledger: %v\n", err)
	}
	byID := map[string]ledger.Entry{}
	for _, e := range entries {
		byID[e.ID] = e
	}
	hostID, agentID := p.host.Config.ID, p.agent.Config.ID
	has := func(in *stInstance, rel string) string {
		if _, err := os.Stat(in.folderPath(rel)); err == nil {
			return in.name
		}
		return "-"
	}
	var missing []string
	for _, id := range ids {
		if outcomes[id] == nil {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	for i, id := range missing {
		if i == 20 {
			fmt.Fprintf(&b, "... and %d more\n", len(missing)-i)
			break
		}
		e := byID[id]
		fmt.Fprintf(&b, "%s: manifest %s%s payload %s%s result %s%s; ledger %q runs %d reason %q; refused: %v\n", id,
			has(st.A, bridge.RequestPath(hostID, agentID, id, bridge.ExtManifest)), has(st.B, bridge.RequestPath(hostID, agentID, id, bridge.ExtManifest)),
			has(st.A, bridge.RequestPath(hostID, agentID, id, bridge.ExtPayload)), has(st.B, bridge.RequestPath(hostID, agentID, id, bridge.ExtPayload)),
			has(st.A, bridge.ResultPath(hostID, agentID, id, bridge.ExtResult)), has(st.B, bridge.ResultPath(hostID, agentID, id, bridge.ExtResult)),
			e.State, e.Runs, e.Reason, refused[id])
	}
	ok, why := st.inSync()
	fmt.Fprintf(&b, "syncthing in sync: %v (%s)\n", ok, why)
	for _, f := range daemonLogs {
		data, _ := os.ReadFile(f)
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		fmt.Fprintf(&b, "--- daemon log %s (tail) ---\n%s\n", f, data)
	}
	return b.String()
}
