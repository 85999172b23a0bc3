package syncsafe

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestReadFileDevice(t *testing.T) {
	f, dir := newFolder(t)
	dev, err := os.Lstat("/dev/null")
	if err != nil || dev.Mode()&fs.ModeDevice == 0 {
		t.Skip("no /dev/null device")
	}
	rdev := dev.Sys().(*syscall.Stat_t).Rdev
	if err := syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o600, int(rdev)); err != nil {
		t.Skipf("cannot mknod (not root?): %v", err)
	}
	if _, err := f.ReadFile("null", 10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadFile(device) = %v, want ErrNotRegular", err)
	}
}
