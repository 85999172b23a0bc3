package policy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/syncbridge/bridge/bridge/internal/safepath"
)

// A FUSE file system another user mounts (where /etc/fuse.conf allows
// user_allow_other) shows whatever owners and modes it likes: nobody's
// bindfs shows its own directory and program as root's, 0755. Refused as
// a program, a PATH entry and a home (the red team of 5a0daa3); a FUSE
// mount of this user's own passes. Needs bindfs, a /dev/fuse others may
// open and user_allow_other (.ci/run sets them up); skipped without.
func TestHostileFUSEMountOfAnotherUser(t *testing.T) {
	skip := t.Skip
	if os.Getenv("BRIDGE_REQUIRE_FUSE") != "" {
		skip = t.Fatal // .ci/run, where it set them up
	}
	if os.Geteuid() != 0 {
		skip("needs root to mount as another user")
	}
	bindfs, err := exec.LookPath("bindfs")
	if err != nil {
		skip("no bindfs (apt-get install bindfs)")
	}
	conf, _ := os.ReadFile("/etc/fuse.conf")
	if fi, err := os.Stat("/dev/fuse"); err != nil || fi.Mode().Perm()&0o006 != 0o006 || !strings.Contains("\n"+string(conf), "\nuser_allow_other") {
		skip("/dev/fuse not open to others, or no user_allow_other in /etc/fuse.conf (.ci/run sets both)")
	}
	base, bin, _ := rtSetup(t)
	rtMust(t, os.Chmod(filepath.Dir(base), 0o755))
	mount := func(src, mnt string, uid uint32, opts ...string) {
		t.Helper()
		rtMust(t, os.MkdirAll(mnt, 0o755))
		rtMust(t, os.Chown(src, int(uid), int(uid)))
		rtMust(t, os.Chown(mnt, int(uid), int(uid)))
		cmd := exec.Command(bindfs, append(opts, src, mnt)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if out, err := cmd.CombinedOutput(); err != nil {
			skip(fmt.Sprintf("bindfs as uid %d: %v: %s", uid, err, out))
		}
		t.Cleanup(func() { exec.Command("fusermount", "-u", mnt).Run() })
	}
	src := filepath.Join(base, "src")
	rtMust(t, os.MkdirAll(src, 0o755))
	rtMust(t, os.WriteFile(filepath.Join(src, "tool"), []byte("#!/bin/sh\necho theirs\n"), 0o755))
	theirs := filepath.Join(base, "theirs")
	mount(src, theirs, 65534, "-o", "allow_other", "--force-user=root", "--force-group=root", "--perms=0755")
	if fi, err := os.Stat(filepath.Join(theirs, "tool")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatalf("the mount does not show the program as root's: %v", err)
	}
	if _, err := lookPath(filepath.Join(theirs, "tool"), func() string { return "" }); err == nil || !strings.Contains(err.Error(), "FUSE mount of user 65534") {
		t.Errorf("a program on nobody's FUSE mount: %v", err)
	}
	if _, err := lookPath("tool", func() string { return theirs }); err == nil {
		t.Errorf("a PATH entry on nobody's FUSE mount: found")
	}
	if _, _, why := safepath.WalkOwned(filepath.Join(theirs, "home")); !strings.Contains(why, "FUSE mount of user 65534") {
		t.Errorf("a home on nobody's FUSE mount: %q", why)
	}
	// This user's own FUSE mount is as much theirs as any directory.
	mine := filepath.Join(base, "mine")
	mount(filepath.Join(bin), mine, 0)
	if _, err := lookPath(filepath.Join(mine, "tool"), func() string { return "" }); err != nil {
		t.Errorf("a program on this user's own FUSE mount: %v", err)
	}
}
