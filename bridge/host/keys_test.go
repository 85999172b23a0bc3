package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge/host/internal/probe"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// The host rotates its key while requests sealed to the old one are queued:
// every one completes, the agent follows the rotation and verifies results
// signed with the new key.
func TestRotateHostWhileQueued(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var ids []string
	for i := 0; i < 10; i++ {
		s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "q"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	info, err := p.host.Rotate(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p.start(t, nil)
	for _, id := range ids {
		out := p.wait(t, id)
		if out.Receipt.Status != bridge.StatusDone || out.Result.HostKid != info.NewSignKid {
			t.Fatalf("%s: %s, signed by %s (want the new key %s)", id, out.Receipt.Status, out.Result.HostKid, info.NewSignKid)
		}
	}
	// New requests are sealed to the new host key.
	out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "after"}})
	if string(out.Stdout) != "after\n" {
		t.Fatalf("after rotation: %q", out.Stdout)
	}
	peer, hb, _ := p.agent.Peer(p.host.Config.ID)
	if hb.Seq != 1 || len(peer.Keys) != 2 || peer.Keys[0].ValidUntil == 0 {
		t.Fatalf("agent's record of the host: %+v", peer.Keys)
	}
}

// The agent rotates: a request signed with the old key is accepted during
// the overlap, and refused (key-expired, visible in status) after it.
func TestRotateAgentOverlap(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	early, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "early"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.agent.Rotate(time.Hour); err != nil {
		t.Fatal(err)
	}
	p.start(t, nil)
	if out := p.wait(t, early.ID); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("old-key request within the overlap: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	p.stop(t)
	// Signed with key 1, then the agent rotates to key 2 with a short overlap.
	late, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "late"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.agent.Rotate(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	p.start(t, nil)
	out := p.wait(t, late.ID)
	if out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "key-expired" {
		t.Fatalf("old-key request after the overlap: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	st, err := p.client.Status(late.ID)
	if err != nil || st.State != bridge.StatusRejected || st.Reason != "key-expired" {
		t.Fatalf("status: %+v %v", st, err)
	}
	// The current key works.
	if out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "now"}}); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("new-key request: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
}

// A replayed old statement is ignored; a statement signed by a rotated-out
// key (a fork of the chain) or by a revoked key is refused.
func TestRotationReplayAndRevocation(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	dir := p.toHost()
	if _, err := p.agent.Rotate(time.Hour); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(dir, bridge.RotationName(1)))
	if _, err := p.agent.Rotate(time.Hour); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the host to follow two rotations", func() bool {
		peer, _, _ := p.host.Peer(p.agent.Config.ID)
		return len(peer.Keys) == 3
	})
	// Replay: statement 1 arrives again (as a resurrected file would).
	os.Remove(filepath.Join(dir, bridge.RotationName(1)))
	os.WriteFile(filepath.Join(dir, bridge.RotationName(1)), first, 0o644)
	settleRescans(t, p.daemon)
	if peer, _, _ := p.host.Peer(p.agent.Config.ID); len(peer.Keys) != 3 || peer.Keys[2].Seq != 2 {
		t.Fatalf("a replayed statement changed the record: %+v", peer.Keys)
	}
	if out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "ok"}}); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("after the replay: %s", out.Receipt.Status)
	}
	// Revoke the current key: its requests are refused with the reason.
	peer, _, _ := p.host.Peer(p.agent.Config.ID)
	cur := peer.Keys[2]
	if _, err := p.host.Revoke(cur.SignKid()); err != nil {
		t.Fatal(err)
	}
	// The running daemon notices: its stamp stops accepting the key.
	p.eventuallyStamp(t, "dropped the revoked key", func(s *bridge.LivenessStamp) bool { return !slices.Contains(s.Accepts, cur.SignKid()) })
	out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "stolen"}})
	if out.Receipt.Status != bridge.StatusRejected || out.Receipt.Reason != "revoked" {
		t.Fatalf("request signed by a revoked key: %s (%s)", out.Receipt.Status, out.Receipt.Reason)
	}
	// One that also expired beyond the skew gets no entry and no result,
	// as any expired request: after GC forgot an earlier entry, it would
	// otherwise be answered a second time.
	old, m, pl := p.sealManual(t, "echo", map[string]string{"msg": "old"}, func(n *bridge.NewRequest) {
		n.Created, n.Expires = time.Now().Add(-3*time.Hour), time.Now().Add(-2*time.Hour)
	})
	os.WriteFile(filepath.Join(dir, old+".payload"), pl, 0o644)
	os.WriteFile(filepath.Join(dir, old+".manifest"), m, 0o644)
	testkit.WaitFor(t, 5*time.Second, "the expired request signed by a revoked key to be refused", func() bool {
		audit, _ := os.ReadFile(p.host.Path("audit.log"))
		return bytes.Contains(audit, []byte(`"event":"refused"`)) && bytes.Contains(audit, []byte(old+".manifest"))
	})
	if p.entry(t, old).ID != "" {
		t.Fatal("an expired request signed by a revoked key was recorded")
	}
	if _, err := os.Stat(filepath.Join(p.toAgent(), old+".result")); !os.IsNotExist(err) {
		t.Fatalf("an expired request signed by a revoked key was answered: %v", err)
	}
	// The thief rotates the revoked key away: refused.
	if _, err := p.agent.Rotate(time.Hour); err != nil {
		t.Fatal(err)
	}
	settleRescans(t, p.daemon)
	rec, err := p.host.PeerRecord(p.agent.Config.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Keys) != 3 {
		t.Fatalf("a rotation signed by a revoked key was accepted: %+v", rec.Keys)
	}
	audit, _ := os.ReadFile(p.host.Path("audit.log"))
	if !strings.Contains(string(audit), "seq 3: refused: signed by a revoked key") {
		t.Fatalf("the refused rotation is not in the audit log:\n%s", audit)
	}
}

// A catalog changed in the folder is refused; the real one lists only the
// ops this agent may run.
func TestTamperedCatalogRejected(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	cat, err := p.client.Ops("")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, op := range cat.Ops {
		names = append(names, op.Name)
	}
	if strings.Join(names, ",") != "count,echo,env,slow,slowidem" {
		t.Fatalf("catalog lists %v", names)
	}
	path := filepath.Join(p.toAgent(), "ops.catalog")
	data, _ := os.ReadFile(path)
	tampered := strings.Replace(string(data), `"name":"echo"`, `"name":"ecko"`, 1)
	if err := os.WriteFile(path, []byte(tampered), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client.Ops(""); err == nil || !strings.Contains(err.Error(), "bad signature") {
		t.Fatalf("a tampered catalog was accepted: %v", err)
	}
}

// Retired private keys are destroyed once nothing can need them.
func TestRetiredKeysDestroyed(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	if _, err := p.host.Rotate(0); err != nil {
		t.Fatal(err)
	}
	keys, err := p.host.OwnKeys()
	if err != nil || len(keys) != 2 {
		t.Fatalf("after rotation: %d keys, %v", len(keys), err)
	}
	// Move the keep time into the past, as time passing would.
	meta := p.host.Path(trust.OwnKeysDir, "0.json")
	data, _ := os.ReadFile(meta)
	var r trust.RetiredKey
	json.Unmarshal(data, &r)
	r.KeepUntil = time.Now().Add(-time.Second).Unix()
	data, _ = json.Marshal(r)
	os.WriteFile(meta, data, 0o600)
	keys, err = p.host.OwnKeys()
	if err != nil || len(keys) != 1 {
		t.Fatalf("after the keep time: %d keys, %v", len(keys), err)
	}
	if _, err := os.Stat(p.host.Path(trust.OwnKeysDir, "0.secret")); !os.IsNotExist(err) {
		t.Fatalf("the retired secret key is still there: %v", err)
	}
}

// Junk rotation statements left in the folder are read once per batch and
// agent, and each refusal is logged once: not once per statement per
// statement, again at every rescan (30 files once gave 900 audit lines per
// rescan).
func TestJunkRotationsLoggedOnce(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	const n = 30
	scratch := t.TempDir()
	for i := 1; i <= n; i++ {
		// Renamed into place whole: a statement seen half-written is
		// refused for that, and again, rightly, once it changes.
		tmp := filepath.Join(scratch, bridge.RotationName(uint64(i)))
		if err := os.WriteFile(tmp, []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(p.toHost(), bridge.RotationName(uint64(i)))); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		audit, _ := os.ReadFile(p.host.Path("audit.log"))
		return bytes.Count(audit, []byte(`"event":"rotation"`))
	}
	testkit.WaitFor(t, 5*time.Second, "the junk statements to be refused", func() bool { return count() >= n })
	settleRescans(t, p.daemon) // three rescans
	if got := count(); got != n {
		t.Fatalf("%d junk statements gave %d rotation lines in the audit log, want %d", n, got, n)
	}
	if out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "still"}}); out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("a request beside junk statements: %s", out.Receipt.Status)
	}
}

// A result signed by a host key this agent home no longer accepts, or
// cannot know, is named for what it is, never a bare "bad signature"
// (issue 27, wrong 4): past the overlap of the host's rotation, "whose
// overlap ended"; in a home rebuilt from an agent secret exported after
// the host rotated, which knows the host only from its new key on,
// "signed by none of the host's keys this home holds ... cannot be checked
// here". A result signed by the new key reads in both.
func TestResultOfAnEarlierHostKeySaysWhatIsTrue(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	old := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "before"}})
	if old.Receipt.Status != bridge.StatusDone {
		t.Fatalf("before the rotation: %s", old.Receipt.Status)
	}
	old.Close()
	id := old.Result.ID
	p.stop(t)
	// Times are whole seconds: the old request's must be before the
	// rotation's, and the next one's not (a wait for the clock).
	time.Sleep(1100 * time.Millisecond)
	if _, err := p.host.Rotate(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	p.start(t, nil)
	fresh := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "after"}})
	fresh.Close()
	// Past the overlap (a wait for the clock, not for an absence).
	time.Sleep(time.Second)
	_, err := p.client.Result(id)
	var he *bridge.HintError
	if !errors.Is(err, bcrypto.ErrBadSignature) || !strings.Contains(err.Error(), `signed by host "laptop"'s key of generation 0, whose overlap after its rotation ended`) || !errors.As(err, &he) {
		t.Fatalf("a result of the rotated-out key, past the overlap: %v", err)
	}

	secret, err := p.agent.ExportAgentSecret()
	if err != nil {
		t.Fatal(err)
	}
	home, err := trust.RestoreAgentHome(filepath.Join(t.TempDir(), "rebuilt"), p.folder, secret)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := agent.OpenClient(home)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.Result(id)
	if !errors.Is(err, agent.ErrEarlierHostKey) || !strings.Contains(err.Error(), `host "laptop"'s keys this home holds begin at its generation 1, and the request was made before the host took it up`) ||
		!errors.Is(err, bcrypto.ErrBadSignature) || !errors.As(err, &he) || strings.Contains(he.Hint, "send the request again") || !strings.Contains(he.Hint, "send it again only if it did not run") {
		t.Fatalf("a result of the host's earlier key, in a home rebuilt after the rotation: %v", err)
	}
	st, err := cl.Status(id)
	if err == nil || !errors.Is(err, agent.ErrEarlierHostKey) {
		t.Fatalf("status in the rebuilt home: %+v, %v", st, err)
	}
	out, err := cl.Result(fresh.Result.ID)
	if err != nil || out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("a result of the new key, in the rebuilt home: %v", err)
	}
	out.Close()

	// A result of a request made after the rotation, spoiled by a folder
	// writer: a bad signature, never "an earlier key" (which would excuse
	// it), and no hint to send it again (red team: a second run). The
	// daemon is stopped first: a running one puts its kept copy back.
	p.stop(t)
	resPath := filepath.Join(p.folder, filepath.FromSlash(bridge.ResultPath(p.host.Config.ID, p.agent.Config.ID, fresh.Result.ID, bridge.ExtResult)))
	data, err := os.ReadFile(resPath)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 1 // in the signature
	if err := os.WriteFile(resPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cl2 := p.freshAgentClient(t)
	_, err = cl2.Result(fresh.Result.ID)
	if !errors.Is(err, bcrypto.ErrBadSignature) || errors.Is(err, agent.ErrEarlierHostKey) || strings.Contains(err.Error(), "earlier") {
		t.Fatalf("a spoiled result of a request made after the rotation: %v", err)
	}
}

// An agent paired after the daemon opened, but before its control loop
// started, is loaded: the loop compares the peers directory with what Open
// loaded, not with what it found at its own start (CI33: the README's
// `bridge run hello` waited for good when `bridge pair` landed while a
// loaded machine was still starting `bridge serve`).
func TestAgentPairedWhileTheDaemonStartsIsLoaded(t *testing.T) {
	t.Parallel()
	p := newUnpaired(t, testPolicy+"\n[agents.cloud-2]\nops = [\"echo\"]\n", "cloud-1")
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true, Rescan: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d.probe.Opened = func() {
		if len(d.agents()) != 0 {
			t.Errorf("agents trusted before the pairing: %v", d.agents())
		}
		if _, err := p.host.Trust(p.agent.BundleText(), "cloud-1"); err != nil {
			t.Error(err)
		}
	}
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	serveOpened(t, d)
	s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "paired late"}})
	if err != nil {
		t.Fatal(err)
	}
	if out := p.wait(t, s.ID); string(out.Stdout) != "paired late\n" {
		t.Fatalf("stdout %q", out.Stdout)
	}
}

// A host that started with no agent watches its peers directory all the
// same: a second agent paired while it serves is loaded at once, not at
// the control loop's 30 s fallback look (the directory did not exist when
// the loop began to watch the home, so only its creation was seen).
func TestSecondAgentPairedWhileServingIsLoaded(t *testing.T) {
	t.Parallel()
	p := newUnpaired(t, testPolicy+"\n[agents.cloud-2]\nops = [\"echo\"]\n", "cloud-1")
	if _, err := os.Stat(p.host.Path(trust.PeersDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a new host home has a peers directory already (%v): this test starts without one", err)
	}
	logs := &testkit.LockedBuffer{}
	d := runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	// The loop's first wake-up comes after it set its watches: a directory
	// it could not watch is logged by then.
	testkit.WaitFor(t, 10*time.Second, "the control loop's first look", func() bool { return d.probe.N(probe.ControlWakes) >= 1 })
	if strings.Contains(logs.String(), "watch the home for changes") {
		t.Fatalf("a directory of the home is not watched:\n%s", logs)
	}
	for i, name := range []string{"cloud-1", "cloud-2"} {
		if i > 0 {
			p.addAgent(t, filepath.Join(t.TempDir(), name), name)
		}
		if _, err := p.host.Trust(p.agent.BundleText(), name); err != nil {
			t.Fatal(err)
		}
		s, err := p.client.Submit(agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "from " + strings.ReplaceAll(name, "-", " ")}})
		if err != nil {
			t.Fatal(err)
		}
		if out := p.wait(t, s.ID); string(out.Stdout) != "from "+strings.ReplaceAll(name, "-", " ")+"\n" {
			t.Fatalf("%s: stdout %q, receipt %+v", name, out.Stdout, out.Receipt)
		}
	}
	if n := len(d.agents()); n != 2 {
		t.Fatalf("%d agents trusted, want 2", n)
	}
}
