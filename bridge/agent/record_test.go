package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/syncbridge/bridge/bridge"
)

// The record of a sent request is written after its manifest is published
// and without an fsync until its result is acked: a crash may lose it or
// leave it empty or cut short. The agent then
// finds the request again from its own signed manifest in the folder, and a
// keyed retry is the same request, not a second one.
func TestTornRecordFoundFromFolder(t *testing.T) {
	h := newHomes(t)
	o := SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}, Key: "k1"}
	s, err := h.client.Submit(o)
	if err != nil {
		t.Fatal(err)
	}
	rec := h.agent.Path("requests", s.ID+".json")
	lose := func(torn []byte) {
		t.Helper()
		if torn == nil {
			if err := os.Remove(rec); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(rec, torn, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Lost (a crash right after the manifest's publish), empty, cut short.
	for _, torn := range [][]byte{nil, {}, []byte(`{"v":1,"id":"`)} {
		lose(torn)
		got, err := h.client.Sent(s.ID)
		if err != nil || got.ManifestSHA256 != s.ManifestSHA256 || got.Host != s.Host {
			t.Fatalf("with a record of %q: %+v, %v", torn, got, err)
		}
		lose(torn)
		again, err := h.client.Submit(o)
		if err != nil || again.ID != s.ID || again.ManifestSHA256 != s.ManifestSHA256 {
			t.Fatalf("keyed retry with a record of %q: %+v, %v (first %s)", torn, again, err, s.ID)
		}
	}
	// The retry remembered it again, whole.
	if r, err := h.client.readSent(s.ID); err != nil || r.Op != "echo" || r.Manifest == nil {
		t.Fatalf("record after the retry: %+v, %v", r, err)
	}
	h.publishResult(t, s, bridge.StatusDone)
	if out, err := h.client.Result(s.ID); err != nil {
		t.Fatal(err)
	} else {
		out.Close()
	}
}

// An ack keeps the result's manifest in the request's record (and its
// output beside it), so the answer survives the host collecting its copy;
// a home from the release before kept it in requests/<id>.result, which is
// still read.
func TestKeptResultInRecordAndOldLayout(t *testing.T) {
	h := newHomes(t)
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	h.publishResult(t, s, bridge.StatusDone)
	out, err := h.client.Result(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := h.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	r, err := h.client.readSent(s.ID)
	if err != nil || !bytes.Equal(r.Result, out.Manifest) {
		t.Fatalf("record after the ack: %+v, %v", r, err)
	}
	// The host collects its result.
	dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToAgentDir(s.Host, h.agent.Config.ID)))
	os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtResult))
	os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtOutput))
	check := func(layout string) {
		t.Helper()
		got, err := h.client.Result(s.ID)
		if err != nil || !bytes.Equal(got.Manifest, out.Manifest) {
			t.Fatalf("%s: result after the host collected its copy: %v", layout, err)
		}
		got.Close()
		if st := h.client.keptStatus(s.ID); st != bridge.StatusDone {
			t.Fatalf("%s: kept status %q", layout, st)
		}
	}
	check("record")
	// The layout of a home from before: the manifest in its own file, the
	// record without it.
	old := struct {
		Sent
		Manifest []byte `json:"manifest,omitempty"`
	}{r.Sent, r.Manifest}
	data, _ := json.Marshal(old)
	if err := os.WriteFile(h.agent.Path("requests", s.ID+".json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.agent.Path("requests", s.ID+"."+bridge.ExtResult), out.Manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	check("old layout")
}
