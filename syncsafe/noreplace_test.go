package syncsafe

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// RenameNoReplace moves a file to a free name, and refuses one that is
// taken (by a file, or a dangling link) with fs.ErrExist, both left as
// they were; so does its link-and-remove fallback.
func TestRenameNoReplace(t *testing.T) {
	for name, move := range map[string]func(string, string) error{"RenameNoReplace": RenameNoReplace, "linkThenRemove": linkThenRemove} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := func(n string) string { return filepath.Join(dir, n) }
			write := func(n, s string) {
				t.Helper()
				if err := os.WriteFile(p(n), []byte(s), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			read := func(n string) string {
				t.Helper()
				b, err := os.ReadFile(p(n))
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			write("a", "mine")
			if err := move(p("a"), p("free")); err != nil {
				t.Fatal(err)
			}
			if read("free") != "mine" {
				t.Fatal("the moved file's content changed")
			}
			if _, err := os.Lstat(p("a")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the old name is still there: %v", err)
			}
			write("b", "new")
			write("taken", "theirs")
			if err := move(p("b"), p("taken")); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("onto a taken name: %v, want fs.ErrExist", err)
			}
			if read("taken") != "theirs" || read("b") != "new" {
				t.Fatal("a refused move changed a file")
			}
			if err := os.Symlink(p("nowhere"), p("dangling")); err != nil {
				t.Logf("no dangling link to move onto (%v): Windows without the symlink privilege", err)
				return
			}
			if err := move(p("b"), p("dangling")); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("onto a dangling link: %v, want fs.ErrExist", err)
			}
		})
	}
}
