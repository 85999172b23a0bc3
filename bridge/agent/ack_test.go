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
	if removed, err := h.client.GC(false); err != nil || len(removed) != 0 {
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
