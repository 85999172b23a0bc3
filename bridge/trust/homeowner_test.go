//go:build unix

package trust

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge"
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
		var h *bridge.HintError
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
	refused(filepath.Join(theirs, "sub", "home"), "owned by another user")

	target := filepath.Join(tmp, "target")
	must(t, os.Mkdir(target, 0o700))
	link := filepath.Join(tmp, "link")
	must(t, os.Symlink(target, link))
	must(t, os.Lchown(link, nobody, nobody))
	refused(link, "a link another user owns")

	// A link of ours into another user's directory, or through a link of
	// theirs further on: followed, and refused there (the red team of
	// 8612227: only the path as written was walked).
	mylink := filepath.Join(tmp, "mylink")
	must(t, os.Symlink(theirs, mylink))
	refused(filepath.Join(mylink, "home"), "owned by another user")
	sticky := filepath.Join(tmp, "sticky")
	must(t, os.Mkdir(sticky, 0o755))
	must(t, os.Chmod(sticky, 0o777|os.ModeSticky))
	real := filepath.Join(tmp, "real")
	must(t, os.Mkdir(real, 0o700))
	theirLink := filepath.Join(sticky, "evl")
	must(t, os.Symlink(real, theirLink))
	must(t, os.Lchown(theirLink, nobody, nobody))
	mylink2 := filepath.Join(tmp, "mylink2")
	must(t, os.Symlink(sticky, mylink2))
	refused(filepath.Join(mylink2, "evl", "home"), "a link another user owns")
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
	if _, err := InitHome(filepath.Join(open, "home"), "host", "h", folder); err == nil || !strings.Contains(err.Error(), "which group or others may write") {
		t.Fatalf("a home under a 0777 directory: %v", err)
	}
	must(t, os.Chmod(open, 0o777|os.ModeSticky))
	if _, err := InitHome(filepath.Join(open, "home"), "host", "h", folder); err != nil {
		t.Fatalf("a home under a sticky 1777 directory: %v", err)
	}
}

// Every command opens a home only if it is this user's own: one made
// writable by group, or reached through a link another user owns (who can
// re-point it to a home of theirs), is refused, with the fix.
func TestOpenHomeRefusesAForeignHome(t *testing.T) {
	folder := t.TempDir()
	dir := filepath.Join(t.TempDir(), "home")
	if _, err := InitHome(dir, "host", "h", folder); err != nil {
		t.Fatal(err)
	}
	must(t, os.Chmod(dir, 0o770))
	var h *bridge.HintError
	if _, err := OpenHome(dir); err == nil || !strings.Contains(err.Error(), "group or others may write it") || !errors.As(err, &h) {
		t.Fatalf("a home group may write: %v", err)
	}
	must(t, os.Chmod(dir, 0o700))
	if _, err := OpenHome(dir); err != nil {
		t.Fatalf("the home made private again: %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(dir, link))
	must(t, os.Lchown(link, 65534, 65534))
	if _, err := OpenHome(link); err == nil || !strings.Contains(err.Error(), "a link another user owns") {
		t.Fatalf("a home through another user's link: %v", err)
	}
}
