package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// A trusted bundle must not let one party take over another's id or name.
func TestTrustRefusesTakeover(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	mallory, _ := bcrypto.GenerateIdentity(nil)
	// A later key generation claiming the agent's id, with Mallory's keys.
	signed, err := mallory.SignBundle(bcrypto.Bundle{Role: "agent", Name: "cloud-1", ID: p.agent.Config.ID, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.host.Trust(bcrypto.BundleText(signed), "other"); err == nil || !strings.Contains(err.Error(), "already trusted") {
		t.Fatalf("a seq 1 bundle claiming another id was trusted: %v", err)
	}
	// Its fingerprint is not the agent's: the user comparing would notice.
	mb, _ := bcrypto.ParseBundle(signed)
	if mb.Fingerprint() == p.agent.Bundle().Fingerprint() {
		t.Fatal("a bundle claiming the agent's id shows the agent's fingerprint")
	}
	// A first-generation bundle whose name is the agent's id.
	own, _ := mallory.SignBundle(bcrypto.Bundle{Role: "agent", Name: "m", ID: mallory.SignKid()})
	if _, err := p.host.Trust(bcrypto.BundleText(own), p.agent.Config.ID); err == nil {
		t.Fatal("a peer name that is an id was accepted")
	}
	// The name of an existing peer.
	if _, err := p.host.Trust(bcrypto.BundleText(own), "cloud-1"); err == nil {
		t.Fatal("an existing peer's name was reused")
	}
	// The same id with other keys cannot overwrite the record.
	peerFile := p.host.Path(trust.PeersDir, p.agent.Config.ID+".json")
	before, _ := os.ReadFile(peerFile)
	other, _ := bcrypto.GenerateIdentity(nil)
	if _, err := p.host.Trust(bcrypto.BundleText(mustBundle(t, other, "agent")), "x"); err != nil {
		t.Fatal(err) // a genuinely new agent is fine
	}
	after, _ := os.ReadFile(peerFile)
	if string(before) != string(after) {
		t.Fatal("trusting another agent changed an existing record")
	}
	// Trusting the same bundle again is harmless; a host bundle is refused on a host.
	if _, err := p.host.Trust(p.agent.BundleText(), "cloud-1"); err != nil {
		t.Fatalf("re-trusting the same bundle: %v", err)
	}
	if _, err := p.host.Trust(p.host.BundleText(), "me"); err == nil {
		t.Fatal("a host trusted a host bundle")
	}
	// A record edited to point at other keys is refused when loaded, even
	// by a home that has the good record cached.
	if _, _, err := p.host.Peer(p.agent.Config.ID); err != nil {
		t.Fatal(err)
	}
	rec, _ := os.ReadFile(peerFile)
	forged := strings.Replace(string(rec), p.agent.BundleText(), bcrypto.BundleText(own), 1)
	if err := os.WriteFile(peerFile, []byte(forged), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.host.Peer(p.agent.Config.ID); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("a forged peer record was served from the cache: %v", err)
	}
	d, _ := NewDaemon(p.host, DaemonOptions{AllowRoot: true})
	if err := d.openCore(); err == nil || !strings.Contains(err.Error(), "does not match") {
		d.closeResources()
		t.Fatalf("a forged peer record was loaded: %v", err)
	}
}

func mustBundle(t *testing.T, id *bcrypto.Identity, role string) []byte {
	t.Helper()
	b, err := id.SignBundle(bcrypto.Bundle{Role: role, Name: role + "-x", ID: id.SignKid()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The state directory may never be inside the synced folder.
func TestHomeInsideFolderRefused(t *testing.T) {
	t.Parallel()
	folder := t.TempDir()
	if _, err := trust.InitHome(filepath.Join(folder, "state"), "host", "h", folder); err == nil || !strings.Contains(err.Error(), "inside the synced folder") {
		t.Fatalf("a home inside the folder was accepted: %v", err)
	}
}
