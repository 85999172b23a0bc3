package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// processGone reports whether no process has this pid (one of another user
// counts as there).
func processGone(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// rcloneWorkdirs are where rclone bisync keeps its listings and lock unless
// told otherwise: the loop's RCLONE_BISYNC_WORKDIR (fixtures/clients/
// rclone-loop.sh), RCLONE_CACHE_DIR/bisync, and the user's cache directory
// ($XDG_CACHE_HOME or ~/.cache) + rclone/bisync.
func rcloneWorkdirs() []string {
	var out []string
	if d := os.Getenv("RCLONE_BISYNC_WORKDIR"); d != "" {
		out = append(out, d)
	}
	if d := os.Getenv("RCLONE_CACHE_DIR"); d != "" {
		out = append(out, filepath.Join(d, "bisync"))
	}
	if d, err := os.UserCacheDir(); err == nil {
		out = append(out, filepath.Join(d, "rclone", "bisync"))
	}
	return out
}

// rcloneSessionName is how rclone bisync names a local path in its session
// files (bilib.SanitizeName): separators and colons become "_", leading ones
// dropped ("/home/me/bridge" -> "home_me_bridge").
func rcloneSessionName(path string) string {
	r := strings.NewReplacer("/", "_", `\`, "_", ":", "_")
	return strings.TrimLeft(r.Replace(path), "_")
}

// rcloneFindings looks for rclone bisync sessions of folder that are stuck
// for good: bisync before 1.66 renames its listings to *.lst-err after a
// critical error (a file changed while it ran, for one) and refuses every
// later run until --resync; and a lock file naming a process that is gone
// (a bisync killed outright) makes every later run fail with "prior lock
// file found". Sessions are files named PATH1..PATH2.<suffix>; a session of
// folder names it as either path.
func rcloneFindings(folder string, workdirs []string) []Finding {
	names := map[string]bool{rcloneSessionName(folder): true}
	if real, err := filepath.EvalSymlinks(folder); err == nil {
		names[rcloneSessionName(real)] = true
	}
	mine := func(session string) bool {
		p1, p2, ok := strings.Cut(session, "..")
		return ok && (names[p1] || names[p2])
	}
	var out []Finding
	sessions := 0
	seen := map[string]bool{}
	for _, dir := range workdirs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		real, _ := filepath.EvalSymlinks(dir)
		if seen[real] {
			continue
		}
		seen[real] = true
		have := map[string]bool{}
		for _, e := range ents {
			have[e.Name()] = true
		}
		for _, e := range ents {
			name := e.Name()
			switch {
			case strings.HasSuffix(name, ".path1.lst"):
				if mine(strings.TrimSuffix(name, ".path1.lst")) {
					sessions++
				}
			case strings.HasSuffix(name, ".lst-err"):
				s, ok := strings.CutSuffix(name, ".path1.lst-err")
				if !ok {
					// Only when path1's is not there: one finding a session.
					if s, ok = strings.CutSuffix(name, ".path2.lst-err"); !ok || have[s+".path1.lst-err"] {
						continue
					}
				}
				if mine(s) && !have[s+".path1.lst"] && !have[s+".path2.lst"] {
					sessions++
					out = append(out, Finding{Check: "rclone", Severity: SeverityProblem,
						Message: fmt.Sprintf("rclone bisync of this folder is locked out (%s): every run fails with \"Must run --resync\", so nothing syncs",
							quoteName(filepath.Join(dir, name))),
						Fix: "run the same bisync once with --resync (fixtures/clients/rclone-loop.sh does it by itself); it brings back files deleted since the last good run and keeps PATH1's version of a file changed on both sides; rclone 1.66+ with --resilient --recover avoids it (docs/OPERATIONS.md)"})
				}
			case strings.HasSuffix(name, ".lck"):
				s := strings.TrimSuffix(name, ".lck")
				if !mine(s) {
					continue
				}
				b, _ := os.ReadFile(filepath.Join(dir, name))
				// Before 1.66 the lock holds the pid alone; later ones
				// expire by themselves (--max-lock).
				pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil || pid <= 0 || !processGone(pid) {
					continue
				}
				out = append(out, Finding{Check: "rclone", Severity: SeverityProblem,
					Message: fmt.Sprintf("rclone bisync of this folder has a stale lock %s (process %d is gone): every run fails with \"prior lock file found\"",
						quoteName(filepath.Join(dir, name)), pid),
					Fix: "remove the lock file when no rclone bisync of this folder runs (fixtures/clients/rclone-loop.sh does it by itself)"})
			}
		}
	}
	if len(out) == 0 && sessions > 0 {
		out = append(out, Finding{Check: "rclone", Severity: SeverityOK, Message: "rclone bisync of this folder is not locked out"})
	}
	return out
}
