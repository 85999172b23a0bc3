package syncthing

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A results directory that a folder writer replaced by a link (the bridge
// folder carries links) is never shared: its target could be anywhere on
// this machine, and the folder's devices would get it read-write.
func TestPlainDirInRefusesLinks(t *testing.T) {
	base := t.TempDir()
	victim := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "hosts", "h1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(base, "hosts", "h1", "to-agent")); err != nil {
		t.Fatal(err)
	}
	if _, err := plainDirIn(base, "hosts/h1/to-agent", true); err == nil || !strings.Contains(err.Error(), "not a plain directory") {
		t.Fatalf("a linked results directory: %v", err)
	}
	if err := os.Symlink(victim, filepath.Join(base, "hosts", "h2")); err != nil {
		t.Fatal(err)
	}
	if _, err := plainDirIn(base, "hosts/h2/to-agent", true); err == nil {
		t.Fatal("a linked host directory above the results directory was followed")
	}
	if _, err := os.Stat(filepath.Join(victim, "to-agent")); err == nil {
		t.Fatal("a directory was made through the link")
	}
	got, err := plainDirIn(base, "hosts/h3/to-agent", true)
	if err != nil || got != filepath.Join(base, "hosts", "h3", "to-agent") {
		t.Fatalf("a plain new results directory: %q, %v", got, err)
	}
}
