package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/syncsafe"
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

// An ack keeps the result's manifest in the request's record, and its
// output there too when it is small (inlineOutputMax), else beside it in
// requests/<id>.output, so the answer survives the host collecting its
// copy; a home from the releases before kept the manifest in
// requests/<id>.result and every output beside the record, which is still
// read.
func TestKeptResultInRecordAndOldLayout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stdout []byte
		inline bool
	}{
		{"small output", []byte("hello from the host\n"), true},
		{"large output", bytes.Repeat([]byte("0123456789abcdef"), inlineOutputMax/16+1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHomes(t)
			s, err := h.client.Submit(SubmitOptions{Op: "echo"})
			if err != nil {
				t.Fatal(err)
			}
			h.publishResultWith(t, s, bridge.StatusDone, tc.stdout)
			out, err := h.client.Result(s.ID)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			if _, inMemory := out.output.(memOutput); inMemory != tc.inline {
				t.Fatalf("output checked in memory: %v, want %v (%d sealed bytes)", inMemory, tc.inline, out.size)
			}
			if err := h.client.Ack(out); err != nil {
				t.Fatal(err)
			}
			r, err := h.client.readSent(s.ID)
			if err != nil || !bytes.Equal(r.Result, out.Manifest) || (r.Output != nil) != tc.inline {
				t.Fatalf("record after the ack: result kept %v, output kept %v (want %v), %v", r != nil && r.Result != nil, r != nil && r.Output != nil, tc.inline, err)
			}
			outputFile := h.agent.Path("requests", s.ID+"."+bridge.ExtOutput)
			if _, err := os.Stat(outputFile); (err == nil) == tc.inline {
				t.Fatalf("requests/<id>.output after the ack: %v (output in the record: %v)", err, tc.inline)
			}
			// The host collects its result.
			dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToAgentDir(s.Host, h.agent.Config.ID)))
			os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtResult))
			os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtOutput))
			check := func(layout string) {
				t.Helper()
				got, err := h.client.Result(s.ID)
				if err != nil || !bytes.Equal(got.Manifest, out.Manifest) || !bytes.Equal(got.Stdout, tc.stdout) {
					t.Fatalf("%s: result after the host collected its copy: %v", layout, err)
				}
				got.Close()
				if st := h.client.keptStatus(s.ID); st != bridge.StatusDone {
					t.Fatalf("%s: kept status %q", layout, st)
				}
			}
			check("record")
			if tc.inline {
				// A kept output that is not the one the result pins is
				// refused, not shown.
				bad := *r
				bad.Output = append([]byte(nil), r.Output...)
				bad.Output[len(bad.Output)-1] ^= 1
				if err := h.client.writeRecord(bad, false); err != nil {
					t.Fatal(err)
				}
				check, own, err := h.client.resultCheck(s)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := h.client.keptResult(s, check, own); !errors.Is(err, bridge.ErrHashMismatch) {
					t.Fatalf("a kept output changed in the record: %v", err)
				} else if got != nil {
					got.Close()
				}
				// With the host's copy collected, that is an error to
				// show, not an answer still to come.
				if got, err := h.client.Result(s.ID); !errors.Is(err, errKeptUnreadable) || errors.Is(err, ErrNoResult) {
					t.Fatalf("Result with the kept output changed and the host's copy collected: %v", err)
				} else if got != nil {
					got.Close()
				}
				sealed := make([]byte, out.size)
				if _, err := out.output.ReadAt(sealed, 0); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(outputFile, sealed, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// The layout of a home from before: the manifest in its own
			// file, the output beside the record, the record without
			// either.
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
			if !tc.inline {
				// The kept output file gone: the copy cannot be read.
				if err := os.Rename(outputFile, outputFile+".away"); err != nil {
					t.Fatal(err)
				}
				if got, err := h.client.Result(s.ID); !errors.Is(err, errKeptUnreadable) {
					t.Fatalf("Result with the kept output file gone: %v", err)
				} else if got != nil {
					got.Close()
				}
				if err := os.Rename(outputFile+".away", outputFile); err != nil {
					t.Fatal(err)
				}
				check("old layout, output back")
			}
			if tc.inline {
				// Acked again (a home of the old layout acking a result
				// it kept): the output moves into the record, and the
				// copies beside it go.
				got, err := h.client.Result(s.ID)
				if err != nil {
					t.Fatal(err)
				}
				defer got.Close()
				if err := h.client.Ack(got); err != nil {
					t.Fatal(err)
				}
				for _, ext := range []string{bridge.ExtOutput, bridge.ExtResult} {
					if _, err := os.Stat(h.agent.Path("requests", s.ID+"."+ext)); !errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("requests/<id>.%s after the ack moved it into the record: %v", ext, err)
					}
				}
				check("old layout acked again")
			}
		})
	}
}

// An ack that moves an older layout's kept copies into the record removes
// them only once the record's new name is on disk (the directory's fsync):
// a crash between a removal and that fsync could keep the removal and
// lose the rename, leaving the old record without its copies (red team of
// 392e148).
func TestAckRemovesOldCopiesOnlyOnceTheRecordIsDurable(t *testing.T) {
	h := newHomes(t)
	s, out := answered(t, h, []byte("the answer\n"))
	defer out.Close()
	// The layout of the release before: the output beside the record.
	sealed := make([]byte, out.size)
	if _, err := out.output.ReadAt(sealed, 0); err != nil {
		t.Fatal(err)
	}
	outputFile := h.agent.Path("requests", s.ID+"."+bridge.ExtOutput)
	if err := os.WriteFile(outputFile, sealed, 0o600); err != nil {
		t.Fatal(err)
	}
	synced := 0
	syncRequests = func(dir string) error {
		synced++
		if _, err := os.Stat(outputFile); err != nil {
			t.Errorf("the older copy was removed before the directory's fsync: %v", err)
		}
		return syncsafe.SyncDir(dir)
	}
	defer func() { syncRequests = syncsafe.SyncDir }()
	if err := h.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(outputFile); synced != 1 || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the ack: %d fsyncs of the directory, the older copy: %v", synced, err)
	}
}

// A keyed resend of a request this home found again from the folder (its
// record lost) and has acked since keeps the kept answer in the record: it
// was written over with the request alone, and the answer lost once the
// host collected its copy (red team of 392e148; older than it).
func TestKeyedResendKeepsTheKeptAnswer(t *testing.T) {
	h := newHomes(t)
	o := SubmitOptions{Op: "echo", Key: "k1"}
	s, err := h.client.Submit(o)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(h.agent.Path("requests", s.ID+".json")) // the home loses its record
	if rs, err := h.client.Sent(s.ID); err != nil || rs.Op != "" {
		t.Fatalf("found again from the folder: %+v, %v", rs, err)
	}
	ackAndCollect(t, h, s, []byte("the answer\n"))
	again, err := h.client.Submit(o)
	if err != nil || again.ID != s.ID {
		t.Fatalf("keyed resend: %+v, %v", again, err)
	}
	got, err := h.client.Result(s.ID)
	if err != nil || string(got.Stdout) != "the answer\n" {
		t.Fatalf("the acked answer after a keyed resend: %v", err)
	}
	got.Close()
	if r, err := h.client.readSent(s.ID); err != nil || r.Op != "echo" || r.Key != "k1" {
		t.Fatalf("the record after a keyed resend: %+v, %v", r, err)
	}
}
