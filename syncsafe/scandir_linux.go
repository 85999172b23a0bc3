package syncsafe

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// scanDir calls fn for each entry of the open directory d but "." and
// "..", in the order the file system gives them, with its name (valid only
// during the call) and kind; its errors name d by shown. It reads the entries with getdents into buf
// (grown to direntBuf if smaller), not through os.ReadDir, which makes a
// DirEntry and a string per entry: beside 10,000 finished requests a
// directory holds 20,000 names, and a fresh listing of it spent more time
// in those allocations and the collections they brought than in the kernel
// (issue 25). An entry whose type the file system does not give is looked
// up with fstatat relative to d; one gone by then is left out, as
// os.ReadDir leaves it out.
func scanDir(d *os.File, shown string, buf *[]byte, fn func(name []byte, kind entryKind)) error {
	if len(*buf) < direntBuf {
		*buf = make([]byte, direntBuf)
	}
	fd := int(d.Fd())
	for {
		n, err := unix.Getdents(fd, *buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "getdents", Path: shown, Err: err}
		}
		if n <= 0 {
			return nil
		}
		for b := (*buf)[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			if len(b) < 19 {
				return fmt.Errorf("getdents %s: short record", shown)
			}
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return fmt.Errorf("getdents %s: bad record length %d", shown, reclen)
			}
			typ, name := b[18], b[19:reclen]
			b = b[reclen:]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			if len(name) == 0 || string(name) == "." || string(name) == ".." {
				continue
			}
			if typesUnknown {
				typ = unix.DT_UNKNOWN
			}
			var kind entryKind
			switch typ {
			case unix.DT_REG:
				kind = entryFile
			case unix.DT_DIR:
				kind = entryDir
			case unix.DT_UNKNOWN:
				var st unix.Stat_t
				err := unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW)
				for err == unix.EINTR {
					err = unix.Fstatat(fd, string(name), &st, unix.AT_SYMLINK_NOFOLLOW)
				}
				switch {
				case err == unix.ENOENT:
					continue
				case err != nil:
					return &os.PathError{Op: "lstat", Path: filepath.Join(shown, string(name)), Err: err}
				}
				kind = kindOfMode(st.Mode)
			default:
				kind = entryOther
			}
			fn(name, kind)
		}
	}
}

// kindOfMode is the kind of an entry whose stat mode is m.
func kindOfMode(m uint32) entryKind {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return entryFile
	case unix.S_IFDIR:
		return entryDir
	}
	return entryOther
}
