package host

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/syncsafe"
)

// TestResultChecksPauseWhileTheirDirectoryIsUnchanged drives shareToCheck
// over a real result directory: after the directory changes, a share at
// each rescan until every result was checked once; then none while the
// directory stays as it was, but for every tenth rescan; and the whole
// rotation again after any change, even one whose modification time was
// set back to hide it (the change time says), with the directory gone, or
// with the rotation's size changed.
func TestResultChecksPauseWhileTheirDirectoryIsUnchanged(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	folder, err := syncsafe.OpenFolder(root)
	if err != nil {
		t.Fatal(err)
	}
	defer folder.Close()
	const me, agent, other = "laptop", "claude", "cursor"
	dir := filepath.Join(root, filepath.FromSlash(bridge.ToAgentDir(me, agent)))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Long before now: a check beginning now may trust it (resultDirTrust).
	old := time.Now().Add(-time.Hour)
	setBack := func(at time.Time) {
		t.Helper()
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
	}
	setBack(old)
	var keys []string
	for range 30 {
		keys = append(keys, agent+"/"+bridge.NewRequestID())
	}
	// Another agent's keys after: an untrusted one is never checked.
	for range 5 {
		keys = append(keys, other+"/"+bridge.NewRequestID())
	}
	slices.Sort(keys)
	// Any check begun after the change may trust it here: the test sets
	// the times itself (and so the change time to now), and shows the
	// bound of a real one below.
	lim := defaultLimits
	lim.resultDirTrust = -1
	f := &finishedSet{base: &base{me: me, folder: folder, limits: lim}}
	trusted := func(a string) bool { return a == agent }
	const shares = 3
	next := func() []string { return f.shareToCheck(keys, shares, false, trusted) }

	rotation := func(what string) {
		t.Helper()
		seen := map[string]int{}
		for i := range shares {
			got := next()
			if len(got) == 0 {
				t.Fatalf("%s: rescan %d of the rotation checked nothing", what, i+1)
			}
			for _, k := range got {
				if k[:len(agent)] != agent {
					t.Fatalf("%s: checked %s, of an agent not trusted", what, k)
				}
				seen[k]++
			}
		}
		for _, k := range keys[:30] {
			if seen[k] != 1 {
				t.Fatalf("%s: %s checked %d times in a rotation of %d shares, want once", what, k, seen[k], shares)
			}
		}
	}
	paused := func(what string, n int) {
		t.Helper()
		for i := range n {
			if got := next(); len(got) != 0 {
				t.Fatalf("%s: rescan %d of the pause checked %d results, want none", what, i+1, len(got))
			}
		}
	}

	rotation("first look")
	paused("unchanged", maxResultSkips)
	if got := next(); len(got) == 0 {
		t.Fatalf("the rescan after %d skips checked nothing", maxResultSkips)
	}
	paused("unchanged, after the tenth", maxResultSkips)
	next()

	// A result removed: the directory's times move.
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	setBack(old.Add(time.Minute))
	rotation("after a change")
	paused("unchanged after the change", 3)

	// The same change with the modification time set back to what it was
	// seen as: only the change time tells.
	if err := os.Remove(filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	// Within the change time's tick as the check saw it, the change could
	// not show: set the times again until it does.
	for ctime := f.dirs[agent].st.ctime; ; time.Sleep(time.Millisecond) {
		setBack(old.Add(time.Minute))
		fi, err := os.Lstat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if syncsafe.ChangeTime(fi).UnixNano() != ctime {
			break
		}
	}
	rotation("after a change hidden by the modification time")
	paused("unchanged after that", 3)

	// The daemon's own writes (its liveness stamps), one after the other,
	// between two rescans: the pause goes on. The tick guard is off for
	// them here as for the rest (trust -1), so a check right after counts.
	own := func(name string) {
		t.Helper()
		must(t, f.ownWrite(agent, func() error { return os.WriteFile(filepath.Join(dir, name), nil, 0o600) }))
	}
	own("host.liveness")
	own("host.liveness.2")
	paused("after the daemon's own writes", 3)
	// A folder writer's change between two of the daemon's: a rotation.
	own("host.liveness.3")
	// Within the tick of the daemon's write it could not show (where the
	// kernel gives coarse times): write again until it does.
	for i := 0; dirStateOf(lstat(t, dir)) == f.ownDirs.m[agent].after; i++ {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("foreign.%d", i)), nil, 0o600))
		if dirStateOf(lstat(t, dir)) == f.ownDirs.m[agent].after {
			time.Sleep(time.Millisecond)
		}
	}
	own("host.liveness.4")
	rotation("after a folder writer's change among the daemon's own")
	paused("unchanged after that", 3)
	// The directory swapped for another while the daemon wrote there: not
	// the daemon's doing, though the write went to the new one.
	must(t, f.ownWrite(agent, func() error {
		must(t, os.Mkdir(dir+".restored", 0o700))
		must(t, os.Rename(dir, dir+".old"))
		must(t, os.Rename(dir+".restored", dir))
		return os.WriteFile(filepath.Join(dir, "host.liveness"), nil, 0o600)
	}))
	rotation("after the directory was swapped during the daemon's write")
	paused("unchanged after that", 3)

	// A change too recent to trust a check begun now (within an hour,
	// here): a share each rescan, each beginning the rotation again.
	f.limits.resultDirTrust = time.Hour
	if err := os.WriteFile(filepath.Join(dir, "y"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 4 * shares {
		if got := next(); len(got) == 0 {
			t.Fatalf("rescan %d after a change less than an hour old checked nothing", i+1)
		}
	}
	// Once it is old enough, the last of those checks began after it and
	// counts: the rest of a rotation, then the pause.
	f.limits.resultDirTrust = -1
	for i := range shares - 1 {
		if got := next(); len(got) == 0 {
			t.Fatalf("rescan %d after the change became old enough checked nothing", i+1)
		}
	}
	paused("unchanged after that", 3)

	// The rotation's size changed: the shares checked so far cover other keys.
	if got := f.shareToCheck(keys, shares+1, false, trusted); len(got) == 0 {
		t.Fatal("a rescan with a rotation of another size checked nothing")
	}
	for range shares + 1 {
		f.shareToCheck(keys, shares+1, false, trusted)
	}
	if got := f.shareToCheck(keys, shares+1, false, trusted); len(got) != 0 {
		t.Fatalf("unchanged after a rotation of %d: checked %d results, want none", shares+1, len(got))
	}

	// Keys found anew (the folder's names or the finished set changed: a
	// finished request delivered again, say): the rotation begins again.
	if got := f.shareToCheck(keys, shares+1, true, trusted); len(got) == 0 {
		t.Fatal("a rescan that found the keys anew checked nothing")
	}
	for i := range shares {
		if got := f.shareToCheck(keys, shares+1, false, trusted); len(got) == 0 {
			t.Fatalf("rescan %d of the rotation after the keys were found anew checked nothing", i+1)
		}
	}

	// The directory gone: every rescan checks (its results are lost).
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for i := range maxResultSkips + 2 {
		if got := next(); len(got) == 0 {
			t.Fatalf("rescan %d with the result directory gone checked nothing", i+1)
		}
	}
	// An agent with no finished request left is forgotten.
	f.shareToCheck(keys[30:], shares, true, func(string) bool { return true })
	if _, ok := f.dirs[agent]; ok || len(f.dirs) != 1 {
		t.Fatalf("directories known after the agent's keys went: %v, want only %s", f.dirs, other)
	}
}

func lstat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
