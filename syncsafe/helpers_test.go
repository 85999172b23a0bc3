package syncsafe

import (
	"os"
	"path/filepath"
	"testing"
)

func newFolder(t testing.TB, opts ...FolderOption) (*Folder, string) {
	t.Helper()
	dir := t.TempDir()
	f, err := OpenFolder(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, dir
}

func writeFile(t *testing.T, p string, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
