package host

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// TestFinishedShareHash: a rescan checks the finished requests whose key
// hashes to its turn; fnv32a must be FNV-1a exactly as hash/fnv computes
// it, so that every key falls in one share and each is checked once every
// `shares` rescans.
func TestFinishedShareHash(t *testing.T) {
	t.Parallel()
	for i := range 1000 {
		key := bridge.NewRequestID()[:i%33] + "/" + bridge.NewRequestID()
		h := fnv.New32a()
		h.Write([]byte(key))
		if got, want := fnv32a(key), h.Sum32(); got != want {
			t.Fatalf("fnv32a(%q) = %d, want %d", key, got, want)
		}
	}
	if got := fnv32a(""); got != 2166136261 {
		t.Fatalf("fnv32a(\"\") = %d, want the offset basis", got)
	}
}

// TestLostOutputIsNotTakenForFinished: a result whose output the sync lost
// (or renamed away as a conflict) right after the publish is not recorded
// as in place; else no rescan would look at it again, and the agent would
// wait for ever for an output that no one publishes again (the simulator,
// seed 26 under load: an rclone conflict renamed the output on both sides).
func TestLostOutputIsNotTakenForFinished(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	p.start(t, nil)
	out := p.run(t, agent.SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	p.stop(t)
	agentID, id := p.agent.Config.ID, out.Receipt.ID
	if err := os.Remove(filepath.Join(p.toAgent(), id+"."+bridge.ExtOutput)); err != nil {
		t.Fatal(err)
	}
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.openCore(); err != nil {
		t.Fatal(err)
	}
	defer d.closeResources()
	d.markFinished(agentID, id)
	if _, ok := d.fin.done[agentID+"/"+id]; ok {
		t.Fatal("a result without its output was taken for in place")
	}
}

// requestKeyOf, now the shape and then the digits, answers as the file-name
// parser does for every kind of path a rescan meets.
func TestRequestKeyOfMatchesParser(t *testing.T) {
	t.Parallel()
	const id = "0123456789abcdef0123456789abcdef"
	agent := strings.Repeat("ab", 16)
	var paths []string
	for _, name := range []string{
		id + ".manifest", id + ".payload", id + ".cancel", id + ".ack", id + ".result", id + ".manifest.tmp",
		id + ".", id, "0123456789abcdef0123456789abcdeF.manifest", "0123456789abcdef0123456789abcde.manifest",
		"0123456789abcdef0123456789abcdefa.manifest", "x" + id[1:] + ".payload", id + ".manifestx", id + "/manifest",
		"rotate-1.rotation", "", "~$" + id + ".manifest.1.tmp",
	} {
		paths = append(paths, agent+"/"+name, name, "/"+name, "a/b/"+name)
	}
	for _, p := range paths {
		want, wantOK := "", false
		if slash := strings.IndexByte(p, '/'); slash > 0 {
			if _, ext, ok := bridge.ParseToHostName(p[slash+1:]); ok && ext != bridge.ExtAck {
				want, wantOK = p[:slash+1+32], true
			}
		}
		if got, ok := requestKeyOf(p); got != want || ok != wantOK {
			t.Errorf("requestKeyOf(%q) = %q, %v; the parser says %q, %v", p, got, ok, want, wantOK)
		}
		if key, ok := requestKeyShape(p); wantOK && (!ok || key != want) {
			t.Errorf("requestKeyShape(%q) = %q, %v, for a request path", p, key, ok)
		}
	}
}
