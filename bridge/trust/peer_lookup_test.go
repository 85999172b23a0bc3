package trust

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge"
)

// A peer is found by id from its own record's file: another peer's broken
// record does not stop the lookup (the daemon serves its other agents), while
// a listing (by name, Peers, `keys show`) names the broken file. A record
// under an id's name holding another id is not that peer, and an id without
// a record is unknown.
func TestPeerByIDBesideABrokenRecord(t *testing.T) {
	host, agent, _ := pairedHomes(t)
	hostID := host.Bundle().ID
	if err := os.WriteFile(agent.Path(PeersDir, "junk.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, b, err := agent.Peer(hostID)
	if err != nil || p.ID != hostID || b.ID != hostID {
		t.Fatalf("Peer(id) beside a broken record: %v", err)
	}
	if _, _, err := agent.Peer("laptop"); err == nil || !strings.Contains(err.Error(), "junk.json") {
		t.Fatalf("Peer(name) beside a broken record: %v, want the broken file named", err)
	}
	_, err = agent.Peers()
	if err == nil || !strings.Contains(err.Error(), "junk.json") {
		t.Fatalf("Peers beside a broken record: %v, want the broken file named", err)
	}
	// It says what to do about it.
	var h *bridge.HintError
	if !errors.As(err, &h) || !strings.Contains(h.Hint, "move it out of") || !strings.Contains(h.Hint, agent.Path(PeersDir)) {
		t.Fatalf("a broken record's error without the hint to move it away: %#v", err)
	}
	os.Remove(agent.Path(PeersDir, "junk.json"))

	// The host's record copied under another id's file name.
	other := strings.Repeat("ab", 16)
	data, err := os.ReadFile(agent.Path(PeersDir, hostID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agent.Path(PeersDir, other+".json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := agent.Peer(other); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Peer(%s) of a record holding %s: %v, want unknown", other, hostID, err)
	}
	if _, _, err := agent.Peer(strings.Repeat("cd", 16)); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Peer of an id without a record: %v, want unknown", err)
	}
}
