package syncsafe

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// WriteFileAtomic and WriteFileUnsynced leave the new content, mode 0600,
// and no temp file. (That the second makes no fsync is counted by
// cmd/bridge's TestCostBudget: the host's kept manifest is written by it.)
func TestWriteFileAtomic(t *testing.T) {
	for name, write := range map[string]func(string, []byte) error{"atomic": WriteFileAtomic, "unsynced": WriteFileUnsynced} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "f")
			for _, content := range []string{"one", "two"} {
				if err := write(p, []byte(content)); err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(p)
				if err != nil || string(got) != content {
					t.Fatalf("read %q, %v; want %q", got, err, content)
				}
			}
			fi, _ := os.Stat(p)
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %o, want 600", fi.Mode().Perm())
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("%d entries in the directory, want the file alone", len(entries))
			}
			if err := write(filepath.Join(dir, "missing", "f"), nil); err == nil {
				t.Error("a write into a missing directory succeeded")
			}
		})
	}
}

// CreateFileAtomic never replaces: the second create fails with fs.ErrExist
// and the first content stays, at mode 0600, with no temp left behind.
func TestCreateFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := CreateFileAtomic(p, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := CreateFileAtomic(p, []byte("second")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create: %v, want fs.ErrExist", err)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got) != "first" {
		t.Fatalf("read %q, %v; want the first content", got, err)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %o, want 600", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries in the directory, want the file alone", len(entries))
	}
}
