package syncsafe

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkListFresh20k reads a directory of 20,000 files afresh, as the
// first full walk after a start (and every tenth walk) does beside 10,000
// finished requests.
func BenchmarkListFresh20k(b *testing.B) {
	w := watcher20k(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l, err := w.list(".")
		if err != nil || len(l.files) != 20_000 {
			b.Fatal(err, len(l.files))
		}
	}
}

// BenchmarkListAgain20k reads the same directory again during full walks
// where its listing may not be reused unread (as at every tenth walk): it
// is found unchanged and kept.
func BenchmarkListAgain20k(b *testing.B) {
	w := watcher20k(b)
	w.visited = map[string]bool{}
	first, err := w.list(".")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		first.reused = maxListingReuse
		l, err := w.list(".")
		if err != nil || l != first {
			b.Fatal(err, l != first)
		}
	}
}

// watcher20k watches a new directory of 20,000 files named as a folder
// beside 10,000 finished requests names them.
func watcher20k(b *testing.B) *Watcher {
	dir := b.TempDir()
	for i := 0; i < 10_000; i++ {
		for _, ext := range []string{"manifest", "payload"} {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%032x.%s", i*7919, ext)), nil, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
	w, err := NewWatcher(dir, WatchOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	return w
}

// BenchmarkFolderListFuncRare20k lists a directory of 20,000 files for the
// one name among them a caller keeps, as the daemon's start looks for
// rotation statements and temporaries beside 10,000 finished requests.
func BenchmarkFolderListFuncRare20k(b *testing.B) {
	f, dir := newFolder(b)
	for i := 0; i < 10_000; i++ {
		for _, ext := range []string{"manifest", "payload"} {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%032x.%s", i*7919, ext)), nil, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "rare"), nil, 0o600); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ents, err := f.ListFunc(".", func(name string) bool { return name == "rare" })
		if err != nil || len(ents) != 1 {
			b.Fatal(err, ents)
		}
	}
}
