package syncsafe

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A filesystem that does not know RENAME_NOREPLACE (EINVAL, as tmpfs did
// before Linux 3.17) gets the link and unlink: still no overwrite.
func TestRenameNoReplaceWithoutTheFlag(t *testing.T) {
	saved := renameat2
	renameat2 = func(int, string, int, string, uint) error { return unix.EINVAL }
	defer func() { renameat2 = saved }()
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	for _, n := range []string{"a", "b", "taken"} {
		if err := os.WriteFile(p(n), []byte(n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := RenameNoReplace(p("a"), p("free")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(p("a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("moved by the fallback, the old name is still there: %v", err)
	}
	if err := RenameNoReplace(p("b"), p("taken")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("onto a taken name by the fallback: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(p("taken")); string(b) != "taken" {
		t.Fatal("the fallback wrote over a taken name")
	}
}
