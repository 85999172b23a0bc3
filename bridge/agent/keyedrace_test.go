package agent

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// wholeRequest fails unless the folder holds request id whole: its manifest
// pins the payload beside it.
func wholeRequest(t *testing.T, h *homes, id string) {
	t.Helper()
	dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToHostDir(h.host.Config.ID, h.agent.Config.ID)))
	m, err := os.ReadFile(filepath.Join(dir, id+"."+bridge.ExtManifest))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := os.ReadFile(filepath.Join(dir, id+"."+bridge.ExtPayload))
	if err != nil {
		t.Fatal(err)
	}
	var r bridge.Request
	if err := bridge.OpenBody(bcrypto.KindRequest, m, [][]byte{h.agent.Identity().SignPublic()}, &r); err != nil {
		t.Fatal(err)
	}
	if r.Payload.SHA256 != bridge.SHA256Hex(pl) || r.Payload.Len != int64(len(pl)) {
		t.Fatalf("the manifest of %s pins a payload that is not the one in the folder", id)
	}
}

// Two clients of an agent submit the same keyed request at once (an agent
// retrying a call whose first attempt is still on its way): one request is
// sent, whole, and the other submit returns it as sent before. Before, the
// second one's removal of a stale payload could land between the first
// one's payload and its manifest (the manifest then pinned a payload no
// longer there, and the request waited on a hash mismatch until the host
// rejected it as incomplete), or it failed with "file already exists".
func TestConcurrentKeyedSubmitsSendOneWholeRequest(t *testing.T) {
	for i := range 40 {
		h := newHomes(t)
		other, err := OpenClient(h.agent)
		if err != nil {
			t.Fatal(err)
		}
		o := SubmitOptions{Op: "echo", Key: fmt.Sprint("k", i)}
		type sent struct {
			s   *Sent
			err error
		}
		got := make(chan sent, 2)
		for _, c := range []*Client{h.client, other} {
			go func() { s, err := c.Submit(o); got <- sent{s, err} }()
		}
		var id string
		earlier := 0
		for range 2 {
			r := <-got
			if r.err != nil {
				t.Fatalf("round %d: a keyed submit beside another: %v", i, r.err)
			}
			if id != "" && r.s.ID != id {
				t.Fatalf("round %d: two ids for one key: %s and %s", i, id, r.s.ID)
			}
			id = r.s.ID
			if r.s.Earlier {
				earlier++
			}
		}
		other.Close()
		if earlier != 1 {
			t.Fatalf("round %d: %d of the two submits were told the request was sent before; want one", i, earlier)
		}
		wholeRequest(t, h, id)
	}
}

// The same across processes (the records' file lock, not only the
// process's mutex): the test binary submits beside a child of itself.
func TestConcurrentKeyedSubmitsAcrossProcesses(t *testing.T) {
	if home := os.Getenv("BRIDGE_TEST_KEYED_CHILD"); home != "" {
		keyedChild(home, os.Getenv("BRIDGE_TEST_KEYED_KEY"))
		return
	}
	for i := range 20 {
		h := newHomes(t)
		key := fmt.Sprint("k", i)
		cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrentKeyedSubmitsAcrossProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), "BRIDGE_TEST_KEYED_CHILD="+h.agent.Dir, "BRIDGE_TEST_KEYED_KEY="+key)
		in, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(stdout)
		if l, _ := br.ReadString('\n'); l != "READY\n" {
			t.Fatalf("child: %q", l)
		}
		in.Write([]byte("g")) // both go
		s, err := h.client.Submit(SubmitOptions{Op: "echo", Key: key})
		child, _ := io.ReadAll(br)
		cmd.Wait()
		if err != nil {
			t.Fatalf("round %d: %v (child: %s)", i, err, child)
		}
		var childID string
		var childEarlier bool
		if _, err := fmt.Sscanf(string(child), "OK %s %t", &childID, &childEarlier); err != nil || childID != s.ID {
			t.Fatalf("round %d: the child said %q; this process sent %s", i, child, s.ID)
		}
		if s.Earlier == childEarlier {
			t.Fatalf("round %d: earlier here %v, in the child %v; want exactly one", i, s.Earlier, childEarlier)
		}
		wholeRequest(t, h, s.ID)
	}
}

// keyedChild is the child of TestConcurrentKeyedSubmitsAcrossProcesses: it
// opens the agent's home, says READY, and submits once told to.
func keyedChild(dir, key string) {
	h, err := trust.OpenHome(dir)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(0)
	}
	c, err := OpenClient(h)
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(0)
	}
	fmt.Println("READY")
	os.Stdin.Read(make([]byte, 1))
	s, err := c.Submit(SubmitOptions{Op: "echo", Key: key})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(0)
	}
	fmt.Println("OK", s.ID, s.Earlier)
	os.Exit(0)
}

// A keyed submit reads its standard input before it takes the records'
// lock: a slow pipe must not hold an ack, a forget or another keyed submit
// past the lock's wait (red team of 8468a9c: they failed after 30 s).
func TestSlowKeyedStdinHoldsNoLock(t *testing.T) {
	saved := recordsLockWait
	recordsLockWait = 300 * time.Millisecond
	defer func() { recordsLockWait = saved }()
	h := newHomes(t)
	other, err := OpenClient(h.agent)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	plain, err := h.client.Submit(SubmitOptions{Op: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() }) // a failure must not leave the submit holding anything
	done := make(chan error, 1)
	go func() {
		_, err := h.client.Submit(SubmitOptions{Op: "echo", Key: "slow", Stdin: pr, NoCheck: true})
		done <- err
	}()
	if _, err := pw.Write([]byte("first bytes")); err != nil { // the submit is reading
		t.Fatal(err)
	}
	// The pipe stays open for more than the lock's wait while the others go.
	if _, err := other.Submit(SubmitOptions{Op: "echo", Key: "another-key"}); err != nil {
		t.Fatalf("a keyed submit beside one reading a slow input: %v", err)
	}
	if err := other.Forget(plain.ID); err != nil {
		t.Fatalf("a forget beside a keyed submit reading a slow input: %v", err)
	}
	time.Sleep(2 * recordsLockWait) // a slow producer, past the lock's wait
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("the slow keyed submit: %v", err)
	}
}

// A keyed retry whose record is there but cannot be read (not missing, not
// torn: a directory in its place, a file of another user) must not take the
// request for unsent: replacing the payload under the live manifest would
// strand it. It fails, nothing sent (red team of 8468a9c, older code).
func TestKeyedRetryWithAnUnreadableRecordSendsNothing(t *testing.T) {
	h := newHomes(t)
	o := SubmitOptions{Op: "echo", Key: "k"}
	s, err := h.client.Submit(o)
	if err != nil {
		t.Fatal(err)
	}
	rec := h.agent.Path("requests", s.ID+".json")
	if err := os.Remove(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(rec, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Submit(o); err == nil || !strings.Contains(err.Error(), "cannot be read") {
		t.Fatalf("a keyed retry with an unreadable record: %v; want a refusal", err)
	}
	wholeRequest(t, h, s.ID)
	// Acked and collected, the request's files gone from the folder: the
	// record was the only trace of it, and a retry must still not send the
	// id anew (the host, having forgotten it, would run it again).
	dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToHostDir(h.host.Config.ID, h.agent.Config.ID)))
	for _, ext := range []string{bridge.ExtManifest, bridge.ExtPayload} {
		if err := os.Remove(filepath.Join(dir, s.ID+"."+ext)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.client.Submit(o); err == nil || !strings.Contains(err.Error(), "cannot be read") {
		t.Fatalf("a keyed retry with an unreadable record, its files collected: %v; want a refusal", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, s.ID+"."+bridge.ExtManifest)); err == nil {
		t.Fatal("the refused retry published a manifest")
	}
}

// A keyed submit that waited for the records' lock past its request's
// expiry sends nothing: sent, it would spend the key on an answer that can
// only say expired (red team of f6794ae).
func TestKeyedSubmitExpiredWhileWaitingSendsNothing(t *testing.T) {
	h := newHomes(t)
	if err := os.MkdirAll(h.agent.Path("requests"), 0o700); err != nil {
		t.Fatal(err)
	}
	held, err := syncsafe.Lock(h.agent.Path("requests", recordsLock)) // as another process
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() { time.Sleep(1500 * time.Millisecond); held.Unlock(); close(released) }()
	t.Cleanup(func() { <-released })
	o := SubmitOptions{Op: "echo", Key: "late", TTL: time.Second}
	if _, err := h.client.Submit(o); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("a keyed submit that waited past its TTL: %v; want a refusal", err)
	}
	id, err := h.agent.KeyedRequestID(h.host.Config.ID, o.Op, map[string]string{}, o.Key)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToHostDir(h.host.Config.ID, h.agent.Config.ID)))
	if _, err := os.Lstat(filepath.Join(dir, id+"."+bridge.ExtManifest)); err == nil {
		t.Fatal("the expired request was published")
	}
}

// The same for a record under the older public id of a keyed request (a
// home from before keyed ids were derived with its secret): one there that
// does not read refuses the submit, rather than a new id being sent for a
// request that may have run (red team of 502fbda).
func TestKeyedSubmitWithAnUnreadableOlderRecordSendsNothing(t *testing.T) {
	h := newHomes(t)
	o := SubmitOptions{Op: "echo", Key: "old-key"}
	old := publicKeyedID(h.agent.Config.ID, h.host.Config.ID, o.Op, map[string]string{}, o.Key)
	if err := os.MkdirAll(h.agent.Path("requests", old+".json"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Submit(o); err == nil || !strings.Contains(err.Error(), "cannot be read") {
		t.Fatalf("a keyed submit beside an unreadable record of its older id: %v; want a refusal", err)
	}
}
