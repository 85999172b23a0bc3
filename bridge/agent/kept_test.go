package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
)

// ackedAndCollected submits a request, answers it with stdout, acks the
// answer and removes the host's copy, as the host's collection does.
func ackedAndCollected(t *testing.T, h *homes, stdout []byte) *Sent {
	t.Helper()
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	ackAndCollect(t, h, s, stdout)
	return s
}

// ackAndCollect answers s with stdout, acks the answer and removes the
// host's copy, as the host's collection does.
func ackAndCollect(t *testing.T, h *homes, s *Sent, stdout []byte) {
	t.Helper()
	h.publishResultWith(t, s, bridge.StatusDone, stdout)
	out, err := h.client.Result(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	ackThenCollect(t, h, s, out)
}

// ackThenCollect acks out, the answer to s, closes it, and removes the
// host's copy from the folder, as the host's collection does.
func ackThenCollect(t *testing.T, h *homes, s *Sent, out *Outcome) {
	t.Helper()
	if err := h.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	out.Close()
	dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToAgentDir(s.Host, h.agent.Config.ID)))
	os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtResult))
	os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtOutput))
}

// answered submits a request and answers it with stdout in the folder; it
// returns the request and the answer's outcome (to be closed).
func answered(t *testing.T, h *homes, stdout []byte) (*Sent, *Outcome) {
	t.Helper()
	s, err := h.client.Submit(SubmitOptions{Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	h.publishResultWith(t, s, bridge.StatusDone, stdout)
	out, err := h.client.Result(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	return s, out
}

// toOlderLayout rewrites s's record as the release before this one's
// would hold it: the result's manifest and output in files beside it.
func toOlderLayout(t *testing.T, h *homes, s *Sent) {
	t.Helper()
	rec, err := h.client.readSent(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(h.agent.Path("requests", s.ID+"."+bridge.ExtResult), rec.Result, 0o600))
	must(os.WriteFile(h.agent.Path("requests", s.ID+"."+bridge.ExtOutput), rec.Output, 0o600))
	rec.Result, rec.Output = nil, nil
	must(h.client.writeRecord(*rec, true))
}

// A wait for an answer this home acked and whose kept copy no longer opens
// (the host's copy collected) ends with that error at once: no answer is
// to come (red team of 86fce10: Wait and WaitAll waited out their time).
func TestWaitEndsOnAnUnreadableKeptCopy(t *testing.T) {
	h := newHomes(t)
	s := ackedAndCollected(t, h, []byte("the answer\n"))
	rec, err := h.client.readSent(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.Output[len(rec.Output)-1] ^= 1
	if err := h.client.writeRecord(*rec, true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := h.client.Wait(ctx, s.ID, nil); !errors.Is(err, errKeptUnreadable) || ctx.Err() != nil {
		t.Fatalf("Wait: %v (context: %v)", err, ctx.Err())
	}
	var gotErr error
	left, err := h.client.WaitAll(ctx, []string{s.ID}, func(id string, out *Outcome, err error) {
		gotErr = err
		if out != nil {
			out.Close()
		}
	}, nil)
	if err != nil || len(left) != 0 || !errors.Is(gotErr, errKeptUnreadable) || ctx.Err() != nil {
		t.Fatalf("WaitAll: left %v, %v; its answer's error: %v (context: %v)", left, err, gotErr, ctx.Err())
	}
}

// An answer kept in the layout of the release before (its manifest in
// requests/<id>.result) is acked: not outstanding, and not to be
// forgotten (red team of 86fce10, older than it).
func TestOlderLayoutAckedIsNotOutstanding(t *testing.T) {
	h := newHomes(t)
	s := ackedAndCollected(t, h, []byte("the answer\n"))
	toOlderLayout(t, h, s)
	if got, err := h.client.Sent(s.ID); err != nil || !got.Acked {
		t.Fatalf("Sent: %+v, %v", got, err)
	}
	if ids, err := h.client.Outstanding(); err != nil || len(ids) != 0 {
		t.Fatalf("outstanding: %v, %v", ids, err)
	}
	if err := h.client.Forget(s.ID); err == nil {
		t.Fatal("Forget took a request whose answer is acked")
	}
}

// An ack of an answer kept already as it would keep it writes nothing (a
// second `result --ack`, an MCP read; on Windows the kept output, open,
// could not be renamed over: red team of 86fce10).
func TestAckAgainWritesNothing(t *testing.T) {
	for _, size := range []int{16, inlineOutputMax + 1} {
		h := newHomes(t)
		s := ackedAndCollected(t, h, []byte(strings.Repeat("x", size)))
		record := h.agent.Path("requests", s.ID+".json")
		before, err := os.Stat(record)
		if err != nil {
			t.Fatal(err)
		}
		out, err := h.client.Result(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.client.Ack(out); err != nil {
			t.Fatalf("output of %d bytes: ack again: %v", size, err)
		}
		out.Close()
		if after, err := os.Stat(record); err != nil || !os.SameFile(before, after) {
			t.Fatalf("output of %d bytes: the record was written again by a second ack (%v)", size, err)
		}
	}
}

// A reader of a kept answer while another process's ack moves it from the
// older layout into the record never sees it unreadable: the record is
// written before the older copies go, and a failed look is made once more
// (red team of 86fce10). A look that read the record before the move and
// the older copy's name after it finds none: "no result yet" for that
// moment, which a wait looks past.
func TestReaderDuringALayoutMoveNeverSeesItUnreadable(t *testing.T) {
	for i := range 40 {
		h := newHomes(t)
		s := ackedAndCollected(t, h, []byte("the answer\n"))
		toOlderLayout(t, h, s)
		out, err := h.client.Result(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		other, err := OpenClient(h.agent)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- h.client.Ack(out) }()
		for running := true; running; {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				running = false
			default:
			}
			got, err := other.Result(s.ID)
			if errors.Is(err, ErrNoResult) {
				continue
			}
			if err != nil {
				t.Fatalf("round %d: a read during the move: %v", i, err)
			}
			got.Close()
		}
		out.Close()
		other.Close()
	}
}

// The kept answer of a request sealed to a box key that a rotation retired
// and the home destroyed since cannot be opened: the error says so, not
// "restore from a backup" (red team of 86fce10).
func TestKeptAnswerUnderADestroyedKeySaysSo(t *testing.T) {
	// (and a process that predates a rotation, whose key is not destroyed,
	// is told to start again: TestStaleProcessAfterARotationIsToldToRestart)
	h := newHomes(t)
	s := ackedAndCollected(t, h, []byte("the answer\n"))
	if _, err := h.agent.Rotate(0); err != nil {
		t.Fatal(err)
	}
	metas, _ := filepath.Glob(h.agent.Path(trust.OwnKeysDir, "*.json"))
	for _, m := range metas { // its time is over: keep_until in the past
		var r map[string]any
		data, err := os.ReadFile(m)
		if err != nil || json.Unmarshal(data, &r) != nil {
			t.Fatalf("%s: %v", m, err)
		}
		r["keep_until"] = 1
		data, _ = json.Marshal(r)
		if err := os.WriteFile(m, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	home, err := trust.OpenHome(h.agent.Dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenClient(home)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Result(s.ID)
	var he *bridge.HintError
	if !errors.Is(err, errKeptUnreadable) || !errors.As(err, &he) || !strings.Contains(he.Hint, "destroyed") {
		t.Fatalf("the kept answer after its key was destroyed: %v", err)
	}
}

// A keyed resend of a request found again from the folder, in one process,
// and an ack of its answer, in another, at the same time: the record keeps
// the acked answer whichever writes last (red team of 86fce10..794f9a5:
// the resend wrote back a record read before the ack, and the answer was
// lost once the host collected its copy).
func TestKeyedResendBesideAnAckKeepsTheAnswer(t *testing.T) {
	for i := range 60 {
		h := newHomes(t)
		o := SubmitOptions{Op: "echo", Key: "k1"}
		s, err := h.client.Submit(o)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(h.agent.Path("requests", s.ID+".json"))
		if _, err := h.client.Sent(s.ID); err != nil { // found again, remembered without its op
			t.Fatal(err)
		}
		h.publishResultWith(t, s, bridge.StatusDone, []byte("the answer\n"))
		other, err := OpenClient(h.agent)
		if err != nil {
			t.Fatal(err)
		}
		out, err := other.Result(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 2)
		go func() { done <- other.Ack(out) }()
		go func() { _, err := h.client.Submit(o); done <- err }()
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		out.Close()
		other.Close()
		if r, err := h.client.readSent(s.ID); err != nil || r.Result == nil || r.Op != "echo" {
			if err != nil {
				t.Fatalf("round %d: the record after a keyed resend beside an ack: %v", i, err)
			}
			t.Fatalf("round %d: the record after a keyed resend beside an ack: answer kept %v, op %q", i, r.Result != nil, r.Op)
		}
	}
}

// An answer read from the folder because the kept copy beside it no longer
// opens (damaged), then acked: the ack keeps the folder's copy again before
// it lets the host collect it (red team of 43e0d59: a kept copy of the same
// size was taken for this one, and the answer was lost).
func TestAckOfTheFoldersCopyKeepsItAgain(t *testing.T) {
	for _, size := range []int{16, inlineOutputMax + 1} {
		h := newHomes(t)
		s, out := answered(t, h, []byte(strings.Repeat("x", size)))
		if err := h.client.Ack(out); err != nil {
			t.Fatal(err)
		}
		out.Close()
		rec, err := h.client.readSent(s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Output != nil {
			rec.Output[len(rec.Output)-1] ^= 1
			if err := h.client.writeRecord(*rec, true); err != nil {
				t.Fatal(err)
			}
		} else {
			p := h.agent.Path("requests", s.ID+"."+bridge.ExtOutput)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 1
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out, err = h.client.Result(s.ID) // the folder's copy, verified
		if err != nil {
			t.Fatalf("output of %d bytes, its kept copy damaged: %v", size, err)
		}
		ackThenCollect(t, h, s, out)
		if got, err := h.client.Result(s.ID); err != nil {
			t.Fatalf("output of %d bytes: after an ack of the folder's copy and its collection: %v", size, err)
		} else {
			got.Close()
		}
	}
}

// A process opened before a rotation (a long-running MCP server) cannot
// open an answer sealed to the new key: it is told to start again, not
// that the key is gone (red team of 43e0d59).
func TestStaleProcessAfterARotationIsToldToRestart(t *testing.T) {
	h := newHomes(t)
	stale := h.client
	fresh, err := trust.OpenHome(h.agent.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Rotate(time.Hour); err != nil {
		t.Fatal(err)
	}
	fc, err := OpenClient(fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	hh := *h
	hh.agent, hh.client = fresh, fc
	s := ackedAndCollected(t, &hh, []byte("the answer\n"))
	_, err = stale.Result(s.ID)
	var he *bridge.HintError
	if !errors.As(err, &he) || !strings.Contains(he.Hint, "start it again") {
		t.Fatalf("a process that predates the rotation: %v", err)
	}
}

// An older layout's kept answer with a large output, acked again: only the
// record changes; the kept output, which the outcome holds open, is not
// written over (on Windows it could not be: red team of 4505f2c).
func TestAckOfAnOlderLayoutKeepsItsOutputFile(t *testing.T) {
	h := newHomes(t)
	s := ackedAndCollected(t, h, []byte(strings.Repeat("y", inlineOutputMax+1)))
	rec, err := h.client.readSent(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The older layout: the manifest beside the record too.
	if err := os.WriteFile(h.agent.Path("requests", s.ID+"."+bridge.ExtResult), rec.Result, 0o600); err != nil {
		t.Fatal(err)
	}
	rec.Result = nil
	if err := h.client.writeRecord(*rec, true); err != nil {
		t.Fatal(err)
	}
	outputFile := h.agent.Path("requests", s.ID+"."+bridge.ExtOutput)
	before, err := os.Stat(outputFile)
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.client.Result(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := h.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(outputFile)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the kept output after the ack: written over (%v)", err)
	}
	if r, err := h.client.readSent(s.ID); err != nil || r.Result == nil {
		t.Fatalf("the record after the ack: %v", err)
	}
	if _, err := os.Stat(h.agent.Path("requests", s.ID+"."+bridge.ExtResult)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("requests/<id>.result after the ack: %v", err)
	}
}

// An ack takes the records' lock file, which another process holding it
// keeps it from (the two clients of TestKeyedResendBesideAnAckKeepsTheAnswer
// share this process's mutex, so it does not show that): while it is held,
// the ack fails once its wait is over and changes nothing; after, it goes
// through.
func TestAckWaitsForTheRecordsLockFile(t *testing.T) {
	h := newHomes(t)
	s, out := answered(t, h, []byte("the answer\n"))
	defer out.Close()
	held, err := syncsafe.Lock(h.agent.Path("requests", recordsLock)) // another open: as another process
	if err != nil {
		t.Fatal(err)
	}
	recordsLockWait = 20 * time.Millisecond
	defer func() { recordsLockWait = 30 * time.Second }()
	if err := h.client.Ack(out); !errors.Is(err, syncsafe.ErrLocked) {
		t.Fatalf("an ack while another holds the records' lock: %v", err)
	}
	if r, err := h.client.readSent(s.ID); err != nil || r.Result != nil {
		t.Fatalf("the record after an ack kept from the lock: %v", err)
	}
	if err := held.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := h.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	if r, err := h.client.readSent(s.ID); err != nil || r.Result == nil {
		t.Fatalf("the record after the ack: %v", err)
	}
}

// Submit remembers its request after the publish. If, in between, another
// process of the agent found the request in the folder, was answered and
// acked (keeping the answer in the record, the host free to collect its
// copy), Submit's record comes late and must not write over that one: the
// kept answer would be gone with the host's copy (red team R3 F3 of
// session 28, left then).
func TestLateSubmitRecordKeepsAnotherProcessAck(t *testing.T) {
	h := newHomes(t)
	// As if Submit had not remembered it yet: another process finds it in
	// the folder, reads the answer, acks it; the host collects its copy.
	rec, other := notYetRemembered(t, h, SubmitOptions{Op: "echo"})
	s := &rec.Sent
	if _, err := other.Sent(s.ID); err != nil { // found again (ls, status, a wait over everything outstanding)
		t.Fatal(err)
	}
	ackElsewhereThenRememberLate(t, h, other, rec, "the answer\n")
	if tmps, _ := filepath.Glob(h.agent.Path("requests", ".tmp-*")); len(tmps) != 0 {
		t.Fatalf("the late record left its temp: %v", tmps)
	}
	// What was asked, which the record found again from the folder lacked,
	// is learnt from the late one.
	if r, err := h.client.readSent(s.ID); err != nil || r.Op != "echo" || r.Result == nil {
		t.Fatalf("the record after the late one: %+v, %v", r, err)
	}
}

// A keyed resend whose earlier record was torn by a crash (records are
// written without an fsync) and whose manifest is gone from the folder
// publishes anew under the same id: its record replaces the torn one,
// which the no-overwrite placing of a new record must not keep (red team
// of 823a946).
func TestKeyedResendReplacesATornRecord(t *testing.T) {
	h := newHomes(t)
	o := SubmitOptions{Op: "echo", Args: map[string]string{"a": "b"}, Key: "k1"}
	s, err := h.client.Submit(o)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToHostDir(s.Host, h.agent.Config.ID)))
	os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtManifest))
	os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtPayload))
	if err := os.WriteFile(h.agent.Path("requests", s.ID+".json"), nil, 0o600); err != nil { // torn
		t.Fatal(err)
	}
	again, err := h.client.Submit(o)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != s.ID || again.Earlier {
		t.Fatalf("the resend: id %s (first %s), earlier %v; want the same id sent anew", again.ID, s.ID, again.Earlier)
	}
	rec, err := h.client.readSent(s.ID)
	if err != nil {
		t.Fatalf("the record after the resend: %v", err)
	}
	if rec.Op != "echo" || rec.Key != "k1" || rec.ManifestSHA256 != again.ManifestSHA256 || rec.Manifest == nil {
		t.Fatalf("the record after the resend: op %q key %q, manifest %v of the one sent", rec.Op, rec.Key, rec.ManifestSHA256 == again.ManifestSHA256)
	}
}

// The same with a keyed request: the other process's resend of the same
// key found the request in the folder and learnt what was asked (its record
// then names the op), then acked the answer. Submit's late record must
// keep that one all the same (red team of b934d87: only the record without
// an op was tested).
func TestLateKeyedRecordKeepsAnotherProcessAck(t *testing.T) {
	h := newHomes(t)
	o := SubmitOptions{Op: "echo", Key: "k2"}
	rec, other := notYetRemembered(t, h, o)
	s := &rec.Sent
	if again, err := other.Submit(o); err != nil || !again.Earlier || again.ID != s.ID {
		t.Fatalf("the other process's keyed resend: %+v, %v", again, err)
	}
	if r, err := other.readSent(s.ID); err != nil || r.Op != "echo" {
		t.Fatalf("the other process's record: %+v, %v; want it to name the op", r, err)
	}
	ackElsewhereThenRememberLate(t, h, other, rec, "the keyed answer\n")
}

// notYetRemembered submits o and takes its record away, as if Submit had
// not written it yet; it returns the record to write late and another
// client of the agent (another process), open until the test ends.
func notYetRemembered(t *testing.T, h *homes, o SubmitOptions) (*sentRecord, *Client) {
	t.Helper()
	s, err := h.client.Submit(o)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := h.client.readSent(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(h.agent.Path("requests", s.ID+".json")); err != nil {
		t.Fatal(err)
	}
	other, err := OpenClient(h.agent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return rec, other
}

// ackElsewhereThenRememberLate answers rec's request with answer, has other
// (another process of the agent) read and ack it, removes the host's copy as
// its collection does, then writes h.client's Submit record of it late: the
// answer must still read from h.client.
func ackElsewhereThenRememberLate(t *testing.T, h *homes, other *Client, rec *sentRecord, answer string) {
	t.Helper()
	s := &rec.Sent
	h.publishResultWith(t, s, bridge.StatusDone, []byte(answer))
	out, err := other.Result(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Ack(out); err != nil {
		t.Fatal(err)
	}
	out.Close()
	dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToAgentDir(s.Host, h.agent.Config.ID)))
	os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtResult))
	os.Remove(filepath.Join(dir, s.ID+"."+bridge.ExtOutput))
	if err := h.client.rememberSent(s, rec.Manifest, false); err != nil {
		t.Fatal(err)
	}
	again, err := h.client.Result(s.ID)
	if err != nil {
		t.Fatalf("the answer after a late record of its submit: %v", err)
	}
	defer again.Close()
	if string(again.Stdout) != answer {
		t.Fatalf("the kept answer reads %q", again.Stdout)
	}
}
