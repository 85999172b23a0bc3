package syncsafe

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// A directory without write permission at one of our names (a folder writer
// planted it, or a sync client copied its mode) is still removed: modes do
// not stop the owner. Root ignores modes, so as root the test runs itself
// again as nobody.
func TestRemoveAllReadOnlyDirs(t *testing.T) {
	if os.Geteuid() == 0 && os.Getenv("SYNCSAFE_TEST_UNPRIVILEGED") == "" {
		runAsNobody(t, "^TestRemoveAllReadOnlyDirs$")
		return
	}
	f, dir := newFolder(t)
	must(t, os.MkdirAll(filepath.Join(dir, "hosts/abc/id.result/deep"), 0o755))
	writeFile(t, filepath.Join(dir, "hosts/abc/id.result/deep/f"), "x")
	must(t, os.Chmod(filepath.Join(dir, "hosts/abc/id.result/deep"), 0o500))
	must(t, os.Chmod(filepath.Join(dir, "hosts/abc/id.result"), 0o000))
	t.Cleanup(func() {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error { os.Chmod(p, 0o700); return nil })
	})
	// A link to a read-only directory elsewhere in the folder is removed,
	// and what it points to keeps its mode.
	must(t, os.MkdirAll(filepath.Join(dir, "other/ro"), 0o755))
	must(t, os.Chmod(filepath.Join(dir, "other/ro"), 0o500))
	must(t, os.Symlink(filepath.Join(dir, "other/ro"), filepath.Join(dir, "hosts/abc/link.result")))
	must(t, f.RemoveAll("hosts/abc/id.result"))
	must(t, f.RemoveAll("hosts/abc/link.result"))
	for _, p := range []string{"hosts/abc/id.result", "hosts/abc/link.result"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("RemoveAll left %s: %v", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "other/ro")); err != nil || fi.Mode().Perm() != 0o500 {
		t.Errorf("the link's target changed: %v %v", fi, err)
	}
}

// runAsNobody runs the named test of this binary again as uid and gid
// 65534, from copies of the binary nobody can execute.
func runAsNobody(t *testing.T, run string) {
	t.Helper()
	bin := filepath.Join(os.TempDir(), "syncsafe-test-"+filepath.Base(t.TempDir()))
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(bin) })
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	cmd := exec.Command(bin, "-test.run="+run, "-test.v")
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "SYNCSAFE_TEST_UNPRIVILEGED=1", "GOCOVERDIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	t.Logf("as nobody:\n%s", out)
}
