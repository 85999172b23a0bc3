package host

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"testing"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// TestFinishedShareHash: a rescan checks the finished requests whose key
// hashes to its turn; fnv32a must be FNV-1a exactly as hash/fnv computes
// it, so that every key falls in one share and each is checked once every
// `shares` rescans.
func TestFinishedShareHash(t *testing.T) {
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
	if _, ok := d.finished[agentID+"/"+id]; ok {
		t.Fatal("a result without its output was taken for in place")
	}
}
