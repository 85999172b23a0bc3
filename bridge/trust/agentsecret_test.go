package trust

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/syncbridge/bridge/bridge"
)

// pairedHomes makes a host and an agent home that trust each other, on one
// folder.
func pairedHomes(t *testing.T) (host, agent *Home, folder string) {
	t.Helper()
	dir := t.TempDir()
	folder = filepath.Join(dir, "folder")
	os.Mkdir(folder, 0o755)
	host, err := InitHome(filepath.Join(dir, "host"), "host", "laptop", folder)
	if err != nil {
		t.Fatal(err)
	}
	agent, err = InitHome(filepath.Join(dir, "agent"), "agent", "cloud-1", folder)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Trust(agent.BundleText(), "cloud-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Trust(host.BundleText(), "laptop"); err != nil {
		t.Fatal(err)
	}
	return host, agent, folder
}

// A host that rotated after the secret was made is followed from the pinned
// key through its statements in the folder, as a paired agent would.
func TestRestoreFollowsHostRotation(t *testing.T) {
	host, agent, folder := pairedHomes(t)
	secret, err := agent.ExportAgentSecret()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Rotate(DefaultOverlap); err != nil {
		t.Fatal(err)
	}
	fresh, err := RestoreAgentHome(filepath.Join(t.TempDir(), "fresh"), folder, secret)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Config.ID != agent.Config.ID || fresh.Identity().SignKid() != agent.Identity().SignKid() {
		t.Fatalf("restored another party: %s", fresh.Config.ID)
	}
	p, b, err := fresh.Peer("laptop")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Keys) != 2 || b.Seq != 1 || b.SignKid() != host.Identity().SignKid() {
		t.Fatalf("host trusted at %d generations, current seq %d", len(p.Keys), b.Seq)
	}
	// The same idempotency secret: keyed ids are the same.
	a, _ := agent.KeyedRequestID(host.Config.ID, "op", nil, "k")
	f, _ := fresh.KeyedRequestID(host.Config.ID, "op", nil, "k")
	if a != f {
		t.Fatalf("keyed id %s after restore, %s before", f, a)
	}
}

// A host bundle in the folder that is not one of the pinned chain's keys is
// refused, and no home is written.
func TestRestoreRefusesReplacedHostBundle(t *testing.T) {
	host, agent, folder := pairedHomes(t)
	secret, err := agent.ExportAgentSecret()
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	imposter, err := InitHome(filepath.Join(other, "h"), "host", "laptop", filepath.Join(folder))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(imposter.Path(BundleName))
	if err := os.WriteFile(filepath.Join(folder, bridge.HostBundlePath(host.Config.ID)), data, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "fresh")
	if _, err := RestoreAgentHome(dir, folder, secret); err == nil {
		t.Fatal("a replaced host bundle was trusted")
	}
	if _, err := os.Stat(filepath.Join(dir, configName)); err == nil {
		t.Fatal("a refused restore left a home")
	}
}
