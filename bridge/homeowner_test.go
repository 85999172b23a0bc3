//go:build unix

package bridge

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// init refuses, before it writes anything, a home another user owns, one
// group or others may write, or one reached through another user's link
// (issue 26, item 6: it wrote keys into such a directory and chmodded it,
// leaving it theirs). A directory of this user's, even 0755, is fine.
func TestInitRefusesAHomeNotOfThisUsersOwn(t *testing.T) {
	folder := t.TempDir()
	tmp := t.TempDir()
	init := func(dir string) error {
		t.Helper()
		_, err := InitHome(dir, "host", "h", folder)
		if err == nil {
			os.RemoveAll(dir)
		}
		return err
	}
	refused := func(dir, want string) {
		t.Helper()
		err := init(dir)
		var h *HintError
		if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &h) || h.Hint == "" {
			t.Fatalf("init %s: %v; want a refusal saying %q, with a hint", dir, err, want)
		}
		if _, err := os.Stat(filepath.Join(dir, IdentityName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("init %s wrote its identity before refusing: %v", dir, err)
		}
	}
	open := filepath.Join(tmp, "open")
	must(t, os.Mkdir(open, 0o777))
	must(t, os.Chmod(open, 0o777))
	refused(open, "group or others may write it")

	mine := filepath.Join(tmp, "mine")
	must(t, os.Mkdir(mine, 0o755))
	if err := init(mine); err != nil {
		t.Fatalf("a 0755 directory of this user's: %v", err)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: the other user's directory and link are not tried")
		return
	}
	const nobody = 65534
	theirs := filepath.Join(tmp, "theirs")
	must(t, os.Mkdir(theirs, 0o700))
	must(t, os.Chown(theirs, nobody, nobody))
	refused(theirs, "another user owns it")

	// Below a directory another user owns: they may rename the home away.
	refused(filepath.Join(theirs, "sub", "home"), "is another user's")

	target := filepath.Join(tmp, "target")
	must(t, os.Mkdir(target, 0o700))
	link := filepath.Join(tmp, "link")
	must(t, os.Symlink(target, link))
	must(t, os.Lchown(link, nobody, nobody))
	refused(link, "a link another user owns")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A home under a directory others may write without the sticky bit could
// be renamed away and replaced: refused too. Under a sticky one (/tmp) it
// is fine.
func TestInitRefusesAHomeOthersCanRename(t *testing.T) {
	folder := t.TempDir()
	tmp := t.TempDir()
	open := filepath.Join(tmp, "open")
	must(t, os.Mkdir(open, 0o777))
	must(t, os.Chmod(open, 0o777))
	if _, err := InitHome(filepath.Join(open, "home"), "host", "h", folder); err == nil || !strings.Contains(err.Error(), "lets group or others rename") {
		t.Fatalf("a home under a 0777 directory: %v", err)
	}
	must(t, os.Chmod(open, 0o777|os.ModeSticky))
	if _, err := InitHome(filepath.Join(open, "home"), "host", "h", folder); err != nil {
		t.Fatalf("a home under a sticky 1777 directory: %v", err)
	}
}
