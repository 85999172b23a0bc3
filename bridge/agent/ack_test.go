package agent

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/syncsafe"
)

// publishResult writes a result of the host for request s, as the daemon
// would, with the given status.
func (h *homes) publishResult(t *testing.T, s *Sent, status string) {
	t.Helper()
	h.publishResultWith(t, s, status, nil)
}

// publishResultWith is publishResult with stdout as the op's output.
func (h *homes) publishResultWith(t *testing.T, s *Sent, status string, stdout []byte) {
	t.Helper()
	h.publishResultSealed(t, s, status, stdout, []string{h.host.Identity().BoxKid()})
}

// publishResultSealed is publishResultWith for a request sealed to one of
// the host's box keys boxKids (an earlier one, after a rotation).
func (h *homes) publishResultSealed(t *testing.T, s *Sent, status string, stdout []byte, boxKids []string) {
	t.Helper()
	rec, err := h.client.readSent(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := bridge.RequestCheck{Host: s.Host, HostBoxKids: boxKids, Agent: h.agent.Config.ID,
		AgentKeys: [][]byte{h.agent.Identity().SignPublic()}, Now: time.Now()}
	r, err := bridge.OpenRequest(rec.Manifest, s.ID, c)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := bridge.SealResult(&out, bridge.NewResult{Host: h.host.Identity(), HostID: h.host.Config.ID,
		AgentBoxPub: h.agent.Identity().BoxPublic(), Request: r, RequestSHA: bridge.SHA256Hex(rec.Manifest),
		Receipt: bridge.Receipt{Status: status, Reason: "crashed"}, Stdout: stdout, Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	// Each by a temporary and a rename, the output first, as the host
	// publishes them: a look never sees a file half written.
	dir := filepath.Join(h.folder, bridge.ToAgentDir(s.Host, h.agent.Config.ID))
	for _, f := range []struct {
		ext  string
		data []byte
	}{{"output", out.Bytes()}, {"result", res}} {
		tmp := filepath.Join(dir, ".tmp-"+s.ID+"."+f.ext)
		if err := os.WriteFile(tmp, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, s.ID+"."+f.ext)); err != nil {
			t.Fatal(err)
		}
	}
}

// An uncertain answer is not settled: acking it keeps the request's files
// (a human's rerun on the host needs them), and so does the agent's gc;
// once a settled answer is acked, they go.
func TestAckKeepsFilesOfUncertain(t *testing.T) {
	h := newHomes(t)
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtManifest))
	h.publishResult(t, s, bridge.StatusUncertain)
	out, err := h.client.Result(s.ID)
	if err != nil || out.Receipt.Status != bridge.StatusUncertain {
		t.Fatalf("result: %+v, %v", out, err)
	}
	if err := h.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	if removed, _, err := h.client.GC(false); err != nil || len(removed) != 0 {
		t.Fatalf("gc removed %v, %v", removed, err)
	}
	if _, err := os.Stat(manifest); err != nil {
		t.Fatalf("the request's files went with an uncertain answer: %v", err)
	}
	h.publishResult(t, s, bridge.StatusDone) // a human settled it
	out, err = h.client.Result(s.ID)
	if err != nil || out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("settled result: %+v, %v", out, err)
	}
	if err := h.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(manifest); err == nil {
		t.Fatal("the request's files stayed after a settled answer was acked")
	}
}

// An acked answer that is not uncertain is final for the agent: a host
// whose home was restored from a backup may answer the request again
// (rejected, expired), and the agent keeps what it acked (found by the red
// team: the agent's status flipped from done to rejected).
func TestAckedAnswerIsFinal(t *testing.T) {
	h := newHomes(t)
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	h.publishResult(t, s, bridge.StatusDone)
	out, err := h.client.Result(s.ID)
	if err != nil || out.Receipt.Status != bridge.StatusDone {
		t.Fatalf("result: %+v, %v", out, err)
	}
	if err := h.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a later answer, to the second
	h.publishResult(t, s, bridge.StatusRejected)
	for _, read := range []func() (*Outcome, error){
		func() (*Outcome, error) { return h.client.Result(s.ID) },
		func() (*Outcome, error) { return h.client.Wait(t.Context(), s.ID, nil) },
	} {
		got, err := read()
		if err != nil || got.Receipt.Status != bridge.StatusDone || !bytes.Equal(got.Manifest, out.Manifest) {
			t.Fatalf("after a second answer: %+v, %v", got.Receipt, err)
		}
	}
	if st, err := h.client.Status(s.ID); err != nil || st.State != bridge.StatusDone {
		t.Fatalf("status: %+v, %v", st, err)
	}
}

// ackOf opens the ack in the folder for request s, or fails the test.
func (h *homes) ackOf(t *testing.T, s *Sent) *bridge.Ack {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := bridge.OpenAck(data, s.ID, s.Host, h.agent.Config.ID, [][]byte{h.agent.Identity().SignPublic()})
	if err != nil {
		t.Fatalf("the ack in the folder: %v", err)
	}
	return a
}

// An uncertain answer read before a human settled the request, and acked
// only after the settled answer was (a `bridge run` still printing it, an
// MCP read), never replaces the settled one: the home keeps the settled
// answer as final (SPEC §10), and the folder's ack goes on naming it, so
// the host collects the settled result, and the agent reads it after.
func TestLateAckKeepsTheSettledAnswer(t *testing.T) {
	h := newHomes(t)
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	h.publishResult(t, s, bridge.StatusUncertain)
	early, err := h.client.Result(s.ID)
	if err != nil || early.Receipt.Status != bridge.StatusUncertain {
		t.Fatalf("uncertain: %v", err)
	}
	defer early.Close()
	h.publishResult(t, s, bridge.StatusDone) // a human settled it
	settled, err := h.client.Result(s.ID)
	if err != nil || settled.Receipt.Status != bridge.StatusDone {
		t.Fatalf("settled: %v", err)
	}
	if err := h.client.Ack(settled); err != nil {
		t.Fatal(err)
	}
	settled.Close()
	if err := h.client.Ack(early); err != nil { // the late one
		t.Fatal(err)
	}
	if st := h.client.keptStatus(s.ID); st != bridge.StatusDone {
		t.Fatalf("the home keeps a %q answer, want the settled one", st)
	}
	if h.ackOf(t, s).ResultSHA256 != bridge.SHA256Hex(settled.Manifest) {
		t.Fatal("the folder's ack names the uncertain answer")
	}
	// The host collects its copy; the agent still reads the settled one.
	dir := filepath.Join(h.folder, bridge.ToAgentDir(s.Host, h.agent.Config.ID))
	must(t, os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtResult)))
	must(t, os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtOutput)))
	got, err := h.client.Result(s.ID)
	if err != nil || got.Receipt.Status != bridge.StatusDone {
		t.Fatalf("after the host collected: %v", err)
	}
	got.Close()
}

// An ack is written without an fsync: a power cut on this machine may
// lose it or leave it torn, and the host then keeps its copy until its
// retention. The agent's gc acks again each settled answer it keeps whose
// result is still in the folder and whose ack is missing or does not open
// (a dry run only names it); one that stands is left alone.
func TestGCAcksAgainWhatAPowerCutTore(t *testing.T) {
	h := newHomes(t)
	s, out := answered(t, h, []byte("x"))
	if err := h.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	out.Close()
	ackPath := filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck))
	whole, err := os.ReadFile(ackPath)
	must(t, err)
	if _, acked, err := h.client.GC(false); err != nil || len(acked) != 0 {
		t.Fatalf("with the ack in place, gc acked %v again (%v)", acked, err)
	}
	for name, torn := range map[string][]byte{"empty": {}, "zeros": make([]byte, len(whole)), "cut short": whole[:len(whole)/2], "missing": nil} {
		if torn == nil {
			must(t, os.Remove(ackPath))
		} else {
			must(t, os.WriteFile(ackPath, torn, 0o644))
		}
		if _, acked, err := h.client.GC(true); err != nil || len(acked) != 1 {
			t.Fatalf("%s: a dry run names %v (%v), want the ack", name, acked, err)
		}
		if now, _ := os.ReadFile(ackPath); !bytes.Equal(now, torn) {
			t.Fatalf("%s: a dry run wrote the ack", name)
		}
		if _, acked, err := h.client.GC(false); err != nil || len(acked) != 1 {
			t.Fatalf("%s: gc acked %v again (%v), want the ack", name, acked, err)
		}
		if h.ackOf(t, s).ResultSHA256 != bridge.SHA256Hex(out.Manifest) {
			t.Fatalf("%s: the ack written again names another result", name)
		}
	}
	// Once the host collected its copy, there is nothing to ack: the ack
	// goes.
	dir := filepath.Join(h.folder, bridge.ToAgentDir(s.Host, h.agent.Config.ID))
	must(t, os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtResult)))
	if removed, acked, err := h.client.GC(false); err != nil || len(acked) != 0 || len(removed) == 0 {
		t.Fatalf("after the host collected: removed %v, acked %v (%v)", removed, acked, err)
	}
}

// A message's ack (MarkSeen) replaces one at its name that does not open,
// as a result's does: else the host would keep the message until its
// retention.
func TestMessageAckReplacesATornOne(t *testing.T) {
	h := newHomes(t)
	id := bridge.NewRequestID()
	rel := bridge.RequestPath(h.host.Config.ID, h.agent.Config.ID, id, bridge.ExtAck)
	p := filepath.Join(h.folder, rel)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, nil, 0o644))
	sha := bridge.SHA256Hex([]byte("the message"))
	must(t, h.client.MarkSeen([]InboxItem{{ID: id, Host: h.host.Config.ID, sha: sha}}, true))
	data, err := os.ReadFile(p)
	must(t, err)
	a, err := bridge.OpenAck(data, id, h.host.Config.ID, h.agent.Config.ID, [][]byte{h.agent.Identity().SignPublic()})
	if err != nil || a.ResultSHA256 != sha {
		t.Fatalf("the message's ack: %v", err)
	}
}

// A settled answer stays final only while its kept copy opens. KEYS.md's
// recovery from a stolen host key: the thief's forged answer was acked and
// kept; the host rotates, the agent revokes the stolen key, and the host's
// genuine answer replaces the forgery in the folder. Acking the genuine
// one keeps it (the forged copy no longer opens) and the ack names it, so
// it is still read once the host collected its copy.
func TestAckReplacesAKeptAnswerThatNoLongerOpens(t *testing.T) {
	h := newHomes(t)
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	must(t, err)
	oldBox, oldSign := h.host.Identity().BoxKid(), h.host.Identity().SignKid()
	h.publishResultWith(t, s, bridge.StatusDone, []byte("forged")) // the thief, with the stolen key
	forged, err := h.client.Result(s.ID)
	must(t, err)
	must(t, h.client.Ack(forged))
	forged.Close()
	_, err = h.host.Rotate(0)
	must(t, err)
	if !h.client.followHost(s.Host) {
		t.Fatal("the agent did not follow the host's rotation")
	}
	_, err = h.agent.Revoke(oldSign)
	must(t, err)
	h.publishResultSealed(t, s, bridge.StatusDone, []byte("genuine"), []string{oldBox, h.host.Identity().BoxKid()})
	genuine, err := h.client.Result(s.ID)
	if err != nil || string(genuine.Stdout) != "genuine" {
		t.Fatalf("the result after the revocation: %v", err)
	}
	must(t, h.client.Ack(genuine))
	genuine.Close()
	if h.ackOf(t, s).ResultSHA256 != bridge.SHA256Hex(genuine.Manifest) {
		t.Fatal("the ack names the forged answer")
	}
	dir := filepath.Join(h.folder, bridge.ToAgentDir(s.Host, h.agent.Config.ID))
	must(t, os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtResult))) // the host collects
	must(t, os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtOutput)))
	got, err := h.client.Result(s.ID)
	if err != nil || string(got.Stdout) != "genuine" {
		t.Fatalf("after the host collected: %v", err)
	}
	got.Close()
}

// One ack that cannot be written (a directory a folder writer put at its
// name) stops neither the other acks nor the rest of the work: the inbox
// still records what was seen and acks the other message, and the agent's
// gc still removes the acks of collected results, then reports the error.
func TestOneAckThatFailsStopsNothingElse(t *testing.T) {
	h := newHomes(t)
	blocked := bridge.NewRequestID()
	p := filepath.Join(h.folder, bridge.RequestPath(h.host.Config.ID, h.agent.Config.ID, blocked, bridge.ExtAck))
	must(t, os.MkdirAll(filepath.Join(p, "x"), 0o755))
	other := InboxItem{ID: bridge.NewRequestID(), Host: h.host.Config.ID, sha: bridge.SHA256Hex([]byte("b"))}
	err := h.client.MarkSeen([]InboxItem{{ID: blocked, Host: h.host.Config.ID, sha: bridge.SHA256Hex([]byte("a"))}, other}, true)
	if err == nil {
		t.Fatal("the failed ack was not reported")
	}
	if st := h.client.inboxState(); !slices.Contains(st.Seen, blocked) || !slices.Contains(st.Seen, other.ID) {
		t.Fatalf("seen: %v", st.Seen)
	}
	if _, err := os.Stat(filepath.Join(h.folder, bridge.RequestPath(h.host.Config.ID, h.agent.Config.ID, other.ID, bridge.ExtAck))); err != nil {
		t.Fatalf("the other message was not acked: %v", err)
	}

	s, out := answered(t, h, []byte("x"))
	must(t, h.client.Ack(out))
	out.Close()
	collected, out2 := answered(t, h, []byte("y"))
	must(t, h.client.Ack(out2))
	out2.Close()
	dir := filepath.Join(h.folder, bridge.ToAgentDir(collected.Host, h.agent.Config.ID))
	must(t, os.Remove(filepath.Join(dir, collected.ID+"."+bridge.ExtResult)))
	must(t, os.Remove(filepath.Join(dir, collected.ID+"."+bridge.ExtOutput)))
	ack := filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck))
	must(t, os.Remove(ack))
	must(t, os.MkdirAll(filepath.Join(ack, "x"), 0o755))
	removed, _, err := h.client.GC(false)
	if err == nil {
		t.Fatal("gc did not report the ack it could not write")
	}
	if !slices.Contains(removed, bridge.RequestPath(collected.Host, h.agent.Config.ID, collected.ID, bridge.ExtAck)) {
		t.Fatalf("gc stopped before the collected result's ack: removed %v", removed)
	}
}

// The agent's gc does not ack again a kept answer whose copy no longer
// opens (its kept output lost): acked, the host could collect the only
// copy that still opens once the request expired; unacked, it keeps it
// until its retention, and `result --ack` keeps it again from there.
func TestGCDoesNotAckAKeptCopyThatNoLongerOpens(t *testing.T) {
	h := newHomes(t)
	s, out := answered(t, h, bytes.Repeat([]byte("z"), 8<<10)) // its output kept beside the record
	must(t, h.client.Ack(out))
	out.Close()
	must(t, os.Remove(h.agent.Path("requests", s.ID+"."+bridge.ExtOutput)))
	must(t, os.Remove(filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck))))
	if _, acked, err := h.client.GC(false); err != nil || len(acked) != 0 {
		t.Fatalf("gc acked %v again (%v) while the kept copy does not open", acked, err)
	}
}

// Two processes ack two answers of one request at once (a `run` printing
// the uncertain answer, an MCP read of the settled one): each keeps its
// answer and places its ack under the records' lock, so that the other's
// keep and ack cannot come in between, and the ack in the folder names the
// answer the home keeps. (Two goroutines racing showed nothing in 60
// rounds even without the lock: the check is on the lock itself.)
func TestAckIsPlacedUnderTheRecordsLock(t *testing.T) {
	h := newHomes(t)
	placed := 0
	ackPlacing = func() {
		placed++
		if recordsMu.TryLock() {
			recordsMu.Unlock()
			t.Error("the ack was placed without the records' lock")
		}
	}
	t.Cleanup(func() { ackPlacing = func() {} })
	s, out := answered(t, h, []byte("x"))
	must(t, h.client.Ack(out))
	out.Close()
	if placed != 1 {
		t.Fatalf("the ack was placed %d times", placed)
	}
	if h.ackOf(t, s).ResultSHA256 != bridge.SHA256Hex(out.Manifest) {
		t.Fatal("the ack names another answer")
	}
}

// An ack never names a kept copy whose name is not durable. A process that
// died between keeping an answer and its directory's fsync (here: the
// fsync fails) published no ack; whatever acks that answer next (the
// agent's gc, `result --ack` again, a late ack of an earlier answer) makes
// the directory durable before the ack goes out.
func TestNoAckBeforeTheKeptCopyIsDurable(t *testing.T) {
	for _, via := range []string{"gc", "result --ack", "late ack"} {
		t.Run(via, func(t *testing.T) {
			h := newHomes(t)
			var s *Sent
			var early, out *Outcome
			if via == "late ack" {
				var err error
				s, err = h.client.Submit(SubmitOptions{Op: "echo"})
				must(t, err)
				h.publishResult(t, s, bridge.StatusUncertain)
				early, err = h.client.Result(s.ID)
				must(t, err)
				defer early.Close()
				h.publishResult(t, s, bridge.StatusDone)
				out, err = h.client.Result(s.ID)
				must(t, err)
			} else {
				s, out = answered(t, h, []byte("x"))
			}
			syncRequests = func(string) error { return errors.New("killed before the directory's fsync") }
			t.Cleanup(func() { syncRequests = syncsafe.SyncDir })
			if err := h.client.Ack(out); err == nil {
				t.Fatal("the ack went through without the directory's fsync")
			}
			out.Close()
			ackPath := filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck))
			if _, err := os.Stat(ackPath); err == nil {
				t.Fatal("an ack was published")
			}
			synced := false
			syncRequests = func(dir string) error {
				if _, err := os.Stat(ackPath); err == nil {
					t.Error("the ack was out before the directory's fsync")
				}
				synced = true
				return syncsafe.SyncDir(dir)
			}
			switch via {
			case "gc":
				_, acked, err := h.client.GC(false)
				if err != nil || len(acked) != 1 {
					t.Fatalf("gc acked %v again (%v)", acked, err)
				}
			case "late ack":
				must(t, h.client.Ack(early))
			default:
				again, err := h.client.Result(s.ID)
				must(t, err)
				must(t, h.client.Ack(again))
				again.Close()
			}
			if _, err := os.Stat(ackPath); err != nil || !synced {
				t.Fatalf("ack there: %v; the directory fsynced: %v", err, synced)
			}
		})
	}
}

// The agent's gc checks a kept answer it acks again as it streams by,
// never holding its output (up to 512 MiB) in memory.
func TestGCChecksAKeptOutputWithoutHoldingIt(t *testing.T) {
	h := newHomes(t)
	const n = 16 << 20
	s, out := answered(t, h, bytes.Repeat([]byte("z"), n))
	must(t, h.client.Ack(out))
	out.Close()
	must(t, os.Remove(filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck))))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, acked, err := h.client.GC(false)
	runtime.ReadMemStats(&after)
	if err != nil || len(acked) != 1 {
		t.Fatalf("gc acked %v again (%v)", acked, err)
	}
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("gc allocated %d KiB to ack again an answer of %d MiB", got>>10, n>>20)
	if got > n/4 {
		t.Fatalf("gc allocated %d MiB to ack again an answer of %d MiB", got>>20, n>>20)
	}
}

// A kept settled answer that cannot be read for a reason that says nothing
// of it (a read error: here a directory where its output was) is not
// taken for one that does not open: a late ack of the uncertain answer
// fails, and the settled one stays kept.
func TestLateAckStopsOnAReadError(t *testing.T) {
	h := newHomes(t)
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	must(t, err)
	h.publishResult(t, s, bridge.StatusUncertain)
	early, err := h.client.Result(s.ID)
	must(t, err)
	defer early.Close()
	h.publishResultWith(t, s, bridge.StatusDone, bytes.Repeat([]byte("d"), 8<<10)) // its output kept beside the record
	settled, err := h.client.Result(s.ID)
	must(t, err)
	must(t, h.client.Ack(settled))
	settled.Close()
	kept := h.agent.Path("requests", s.ID+"."+bridge.ExtOutput)
	must(t, os.Remove(kept))
	must(t, os.Mkdir(kept, 0o700))
	if err := h.client.Ack(early); err == nil {
		t.Fatal("the late ack went through while the kept answer could not be read")
	}
	if st := h.client.keptStatus(s.ID); st != bridge.StatusDone {
		t.Fatalf("the home keeps a %q answer", st)
	}
}

// A host this home no longer trusts (every key revoked, or removed) never
// collects its result: the agent's gc takes the answer it kept from it for
// one that no longer opens, and goes on, every run, without an error and
// without acking it.
func TestGCPassesOverAHostNoLongerTrusted(t *testing.T) {
	for _, how := range []string{"revoked", "removed"} {
		t.Run(how, func(t *testing.T) {
			h := newHomes(t)
			s, out := answered(t, h, []byte("x"))
			must(t, h.client.Ack(out))
			out.Close()
			must(t, os.Remove(filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck))))
			var err error
			if how == "revoked" {
				_, err = h.agent.Revoke(h.host.Identity().SignKid())
			} else {
				_, err = h.agent.Remove(h.host.Config.ID)
			}
			must(t, err)
			if _, acked, err := h.client.GC(false); err != nil || len(acked) != 0 {
				t.Fatalf("gc: acked %v again, %v", acked, err)
			}
		})
	}
}

// A read error on a kept copy (a link loop here, as EACCES or EIO would
// be) is reported with what to do, and `bridge result ID --ack`, which
// keeps the folder's copy again, is a way out.
func TestAKeptCopyReadErrorSaysWhatToDo(t *testing.T) {
	h := newHomes(t)
	s, out := answered(t, h, bytes.Repeat([]byte("d"), 8<<10)) // its output kept beside the record
	must(t, h.client.Ack(out))
	out.Close()
	kept := h.agent.Path("requests", s.ID+"."+bridge.ExtOutput)
	must(t, os.Remove(kept))
	must(t, os.Symlink(filepath.Base(kept), kept))
	must(t, os.Remove(filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck))))
	_, _, err := h.client.GC(false)
	var he *bridge.HintError
	if !errors.As(err, &he) || !strings.Contains(he.Hint, "bridge result "+s.ID+" --ack") {
		t.Fatalf("gc: %v, without the way out in a hint", err)
	}
	again, err := h.client.Result(s.ID)
	must(t, err)
	must(t, h.client.Ack(again))
	again.Close()
	if _, acked, err := h.client.GC(false); err != nil || len(acked) != 0 {
		t.Fatalf("after result --ack, gc: acked %v, %v", acked, err)
	}
}

// A late ack of an earlier answer never replaces the settled one kept for
// a reason that is the home's, not the copy's: the host's record cut short
// (a read error) fails the ack; the host removed between reading the
// earlier answer and acking it fails it too (the answer is checked again
// against the keys as they stand). The settled answer stays kept.
func TestLateAckAfterTheHostsRecordChanged(t *testing.T) {
	for _, how := range []string{"record cut short", "host removed"} {
		t.Run(how, func(t *testing.T) {
			h := newHomes(t)
			s, early, settled := lateAckSetUp(t, h)
			var err error
			if how == "host removed" {
				_, err = h.agent.Remove(h.host.Config.ID)
				must(t, err)
			} else {
				rec := h.agent.Path("peers", h.host.Config.ID+".json")
				data, err := os.ReadFile(rec)
				must(t, err)
				must(t, os.WriteFile(rec, data[:len(data)/2], 0o600))
			}
			if err := h.client.Ack(early); err == nil {
				t.Fatal("the late ack went through")
			}
			if kept, _ := h.client.keptManifest(s.ID); !bytes.Equal(kept, settled.Manifest) {
				t.Fatalf("the home keeps a %q answer", resultStatus(kept))
			}
			if how == "record cut short" {
				// The agent's gc says so too, rather than pass over the
				// answer as one that no longer opens.
				must(t, os.Remove(filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck))))
				if _, acked, err := h.client.GC(false); err == nil {
					t.Fatalf("gc passed over a host record it could not read (acked %v)", acked)
				}
			}
		})
	}
}

// A host's key rotation between reading an answer and acking it changes
// nothing of what is kept, so long as the key that signed it is not
// revoked: a late ack of the uncertain answer still keeps the settled one
// and names it after the overlap ended; a settled answer read within the
// overlap and acked after it still replaces the uncertain one kept (an
// answer read before the overlap ended is kept once acked).
func TestAcksAcrossAHostRotation(t *testing.T) {
	t.Run("late ack of the uncertain answer", func(t *testing.T) {
		h := newHomes(t)
		s, early, settled := lateAckSetUp(t, h)
		must(t, os.Remove(filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck)))) // a power cut lost it
		_, err := h.host.Rotate(0)
		must(t, err)
		if !h.client.followHost(s.Host) {
			t.Fatal("the agent did not follow the host's rotation")
		}
		must(t, h.client.Ack(early))
		if st := h.client.keptStatus(s.ID); st != bridge.StatusDone {
			t.Fatalf("the home keeps a %q answer", st)
		}
		if h.ackOf(t, s).ResultSHA256 != bridge.SHA256Hex(settled.Manifest) {
			t.Fatal("the ack does not name the settled answer")
		}
	})
	t.Run("settled answer read within the overlap", func(t *testing.T) {
		h := newHomes(t)
		s, err := h.client.Submit(SubmitOptions{Op: "echo"})
		must(t, err)
		h.publishResult(t, s, bridge.StatusUncertain)
		u, err := h.client.Result(s.ID)
		must(t, err)
		must(t, h.client.Ack(u))
		u.Close()
		h.publishResult(t, s, bridge.StatusDone)
		settled, err := h.client.Result(s.ID)
		must(t, err)
		defer settled.Close()
		_, err = h.host.Rotate(0) // the overlap over at once, as while `run` prints
		must(t, err)
		if !h.client.followHost(s.Host) {
			t.Fatal("the agent did not follow the host's rotation")
		}
		must(t, h.client.Ack(settled))
		if st := h.client.keptStatus(s.ID); st != bridge.StatusDone {
			t.Fatalf("the home keeps a %q answer", st)
		}
	})
}

// The first ack of an answer is checked against the host's keys as they
// stand too: an answer signed by a key revoked between reading it and
// acking it (a thief's, KEYS.md) is not kept nor acked, and the error says
// why. A host record that cannot be read fails the ack as it is, without
// that hint.
func TestFirstAckAfterTheSigningKeyWasRevoked(t *testing.T) {
	h := newHomes(t)
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	must(t, err)
	stolen := h.host.Identity().SignKid()
	h.publishResult(t, s, bridge.StatusDone) // the thief's, with the key about to be revoked
	out, err := h.client.Result(s.ID)
	must(t, err)
	defer out.Close()
	_, err = h.host.Rotate(time.Hour)
	must(t, err)
	if !h.client.followHost(s.Host) {
		t.Fatal("the agent did not follow the host's rotation")
	}
	_, err = h.agent.Revoke(stolen)
	must(t, err)
	err = h.client.Ack(out)
	var he *bridge.HintError
	if !errors.As(err, &he) || !strings.Contains(he.Hint, "keys changed") {
		t.Fatalf("ack: %v, want a refusal saying the host's keys changed", err)
	}
	if st := h.client.keptStatus(s.ID); st != "" {
		t.Fatalf("the home keeps a %q answer", st)
	}
	if _, err := os.Stat(filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtAck))); err == nil {
		t.Fatal("an ack names the answer")
	}

	s2, out2 := answered(t, h, []byte("x"))
	defer out2.Close()
	rec := h.agent.Path("peers", h.host.Config.ID+".json")
	data, err := os.ReadFile(rec)
	must(t, err)
	must(t, os.WriteFile(rec, data[:len(data)/2], 0o600))
	err = h.client.Ack(out2)
	if err == nil || errors.As(err, &he) && strings.Contains(he.Hint, "keys changed") {
		t.Fatalf("ack with the host's record cut short: %v", err)
	}
	if st := h.client.keptStatus(s2.ID); st != "" {
		t.Fatalf("the home keeps a %q answer", st)
	}
}

// A keyed request's answer to an earlier send (the home lost its record,
// and a resend went out under the same id with another manifest) is kept
// when acked, and the kept copy still opens once the host collected its
// own: a kept copy is taken as Result takes the folder's.
func TestKeptAnswerOfAnEarlierKeyedSendOpens(t *testing.T) {
	h := newHomes(t)
	opts := SubmitOptions{Op: "echo", Key: "k-1"}
	s, err := h.client.Submit(opts)
	must(t, err)
	first, err := h.client.readSent(s.ID)
	must(t, err)
	must(t, os.Remove(h.agent.Path("requests", s.ID+".json")))
	must(t, os.Remove(filepath.Join(h.folder, bridge.RequestPath(s.Host, h.agent.Config.ID, s.ID, bridge.ExtManifest))))
	time.Sleep(1100 * time.Millisecond) // another created time, so another manifest
	again, err := h.client.Submit(opts)
	must(t, err)
	if again.ID != s.ID {
		t.Fatalf("the keyed resend has another id: %s, %s", again.ID, s.ID)
	}
	if second, err := h.client.readSent(s.ID); err != nil || bytes.Equal(second.Manifest, first.Manifest) {
		t.Fatalf("the resend sent the same manifest (%v): the test tests nothing", err)
	}
	// The host answers the first send, from its ledger.
	c := bridge.RequestCheck{Host: s.Host, HostBoxKids: []string{h.host.Identity().BoxKid()}, Agent: h.agent.Config.ID,
		AgentKeys: [][]byte{h.agent.Identity().SignPublic()}, Now: time.Now()}
	r, err := bridge.OpenRequest(first.Manifest, s.ID, c)
	must(t, err)
	var sealed bytes.Buffer
	res, err := bridge.SealResult(&sealed, bridge.NewResult{Host: h.host.Identity(), HostID: h.host.Config.ID,
		AgentBoxPub: h.agent.Identity().BoxPublic(), Request: r, RequestSHA: bridge.SHA256Hex(first.Manifest),
		Receipt: bridge.Receipt{Status: bridge.StatusDone, Op: "echo"}, Stdout: []byte("hi\n"), Created: time.Now()})
	must(t, err)
	dir := filepath.Join(h.folder, bridge.ToAgentDir(s.Host, h.agent.Config.ID))
	must(t, os.WriteFile(filepath.Join(dir, s.ID+"."+bridge.ExtOutput), sealed.Bytes(), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, s.ID+"."+bridge.ExtResult), res, 0o644))
	fresh, err := OpenClient(h.agent) // not the client that resent it
	must(t, err)
	defer fresh.Close()
	out, err := fresh.Result(s.ID)
	must(t, err)
	if !out.Earlier {
		t.Fatal("the answer was not taken for an earlier send's")
	}
	must(t, fresh.Ack(out))
	out.Close()
	must(t, os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtResult))) // the host collects
	must(t, os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtOutput)))
	kept, err := fresh.Result(s.ID)
	if err != nil {
		t.Fatalf("the kept answer of the earlier send: %v", err)
	}
	kept.Close()
}

// lateAckSetUp submits a request and reads its uncertain answer (early,
// not acked), then the settled one a human made of it, which it acks: a
// late ack of early is what the test does next.
func lateAckSetUp(t *testing.T, h *homes) (s *Sent, early, settled *Outcome) {
	t.Helper()
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	must(t, err)
	h.publishResult(t, s, bridge.StatusUncertain)
	early, err = h.client.Result(s.ID)
	must(t, err)
	t.Cleanup(func() { early.Close() })
	h.publishResult(t, s, bridge.StatusDone)
	settled, err = h.client.Result(s.ID)
	must(t, err)
	must(t, h.client.Ack(settled))
	settled.Close()
	return s, early, settled
}
