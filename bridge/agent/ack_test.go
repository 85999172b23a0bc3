package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
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
	rec, err := h.client.readSent(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	c := bridge.RequestCheck{Host: s.Host, HostBoxKids: []string{h.host.Identity().BoxKid()}, Agent: h.agent.Config.ID,
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
