package safepath

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// fuseSuperMagic is the f_type statfs gives for a FUSE file system.
const fuseSuperMagic = 0x65735546

// foreignMount says why the mount point dir, reached on a program's path,
// cannot be trusted, or "": a FUSE file system another user mounted shows
// whatever owners and modes its program likes (root, 0755), so the checks
// of owner and mode prove nothing there. Only where /etc/fuse.conf allows
// user_allow_other can such a mount be reached by this user at all; it is
// refused whatever the setting. Called only where the device changes on
// the way, so a walk pays for it once per mount it crosses.
func foreignMount(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "not resolvable"
	}
	if uint32(st.Type) != fuseSuperMagic {
		return ""
	}
	uid, err := fuseMounter(dir)
	if err != nil {
		return fmt.Sprintf("a FUSE mount whose owner cannot be told (%v)", err)
	}
	if uid != 0 && uid != os.Geteuid() {
		return fmt.Sprintf("a FUSE mount of user %d, which may show any owner and mode it likes (%s)", uid, dir)
	}
	return ""
}

// fuseMounter is the user_id a FUSE mount at dir was mounted with, from
// /proc/self/mountinfo (the last mount at that point: mounts stack).
func fuseMounter(dir string) (int, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	uid := -1
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, super := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(super) < 3 || unescapeMount(fields[4]) != dir {
			continue
		}
		uid = -1
		for _, o := range strings.Split(super[2], ",") {
			if v, ok := strings.CutPrefix(o, "user_id="); ok {
				if n, err := strconv.Atoi(v); err == nil {
					uid = n
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if uid < 0 {
		return 0, fmt.Errorf("no user_id for %s in /proc/self/mountinfo", dir)
	}
	return uid, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
