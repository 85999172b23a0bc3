//go:build unix

package safepath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A home (or any directory kept private) reached through a directory group
// or others may write is refused, unless that directory is sticky (as /tmp
// is): whoever may write it could rename what is below and put their own in
// its place. A name that does not exist yet ends the walk where it would be
// made; a `..` after it is refused (it would resolve through whatever the
// name becomes).
func TestWalkOwned(t *testing.T) {
	base := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	open := filepath.Join(base, "open")
	must(os.Mkdir(open, 0o755))
	must(os.Chmod(open, 0o777))
	sticky := filepath.Join(base, "sticky")
	must(os.Mkdir(sticky, 0o755))
	must(os.Chmod(sticky, 0o777|os.ModeSticky))
	mine := filepath.Join(base, "mine")
	must(os.Mkdir(mine, 0o700))
	must(os.Symlink(mine, filepath.Join(sticky, "link")))
	for _, c := range []struct {
		path   string
		exists bool
		why    string // "" = fine, else a word of it
	}{
		{filepath.Join(mine, "home"), false, ""},
		{mine, true, ""},
		{filepath.Join(open, "home"), false, "which group or others may write"},
		{filepath.Join(sticky, "home"), false, ""},
		{filepath.Join(sticky, "link", "home"), false, ""},
		{sticky + "/nx/../home", false, "after a name that does not exist yet"}, // not Join: it would clean the ..
		{"/proc/self/cwd", false, "under /proc"},
	} {
		resolved, exists, why := WalkOwned(c.path)
		switch {
		case c.why == "" && why != "":
			t.Errorf("%s: refused (%s)", c.path, why)
		case c.why != "" && !strings.Contains(why, c.why):
			t.Errorf("%s: %q, want %q", c.path, why, c.why)
		case c.why == "" && exists != c.exists:
			t.Errorf("%s: exists %v", c.path, exists)
		case c.why == "" && !strings.HasPrefix(resolved, base) && !strings.HasPrefix(resolved, "/"):
			t.Errorf("%s: resolved to %s", c.path, resolved)
		}
	}
	if r, _, _ := WalkOwned(filepath.Join(sticky, "link", "home")); r != filepath.Join(mine, "home") {
		t.Errorf("through the link: resolved to %s, want %s", r, filepath.Join(mine, "home"))
	}
}
