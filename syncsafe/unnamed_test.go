package syncsafe

import (
	"os"
	"testing"
)

// An unnamed temp is a working file (written, read back at an offset)
// that leaves no name in its directory once closed (on Unix, at once).
func TestUnnamedTempLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	f, err := UnnamedTemp(dir, ".output-*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("sealed output"), 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if _, err := f.ReadAt(got, 7); err != nil || string(got) != "output" {
		t.Fatalf("read back %q, %v", got, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("left in the directory: %v, %v", entries, err)
	}
}
