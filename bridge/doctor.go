package bridge

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// Doctor severities. Only SeverityProblem makes `bridge doctor` fail.
const (
	SeverityOK      = "ok"
	SeverityWarn    = "warn"
	SeverityProblem = "problem"
)

// Finding is one result of Doctor: what was checked, what was found and,
// unless all is well, how to fix it.
type Finding struct {
	Check    string `json:"check"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Fix      string `json:"fix,omitempty"`
}

// DoctorOptions tunes Doctor; zero fields take the defaults.
type DoctorOptions struct {
	Now         func() time.Time // default time.Now
	InotifyPath string           // default /proc/sys/fs/inotify/max_user_watches
	MinFree     uint64           // bytes free below which the disk is a problem; default 256 MiB
	MaxKeyAge   time.Duration    // default 365 days
	MaxSkew     time.Duration    // clock difference worth a warning; default 1m
}

// Doctor checks a home and its folder for the mistakes that make a bridge
// misbehave quietly. It only reads.
func Doctor(h *Home, opt DoctorOptions) []Finding {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.InotifyPath == "" {
		opt.InotifyPath = "/proc/sys/fs/inotify/max_user_watches"
	}
	if opt.MinFree == 0 {
		opt.MinFree = 256 << 20
	}
	if opt.MaxKeyAge == 0 {
		opt.MaxKeyAge = 365 * 24 * time.Hour
	}
	if opt.MaxSkew == 0 {
		opt.MaxSkew = time.Minute
	}
	var out []Finding
	add := func(check, sev, fix, format string, args ...any) {
		out = append(out, Finding{Check: check, Severity: sev, Message: fmt.Sprintf(format, args...), Fix: fix})
	}
	folder := h.Config.Folder

	// The folder and its marker.
	if fi, err := os.Stat(filepath.Join(folder, syncsafe.MarkerName)); err != nil || !fi.Mode().IsRegular() {
		add("marker", SeverityProblem, "check that the folder is mounted and synced; on the host, `bridge init host` wrote the marker",
			"%s has no %s: it may be unmounted or not synced yet", folder, syncsafe.MarkerName)
	} else {
		add("marker", SeverityOK, "", "%s is a bridge folder", folder)
	}

	// State outside the folder.
	if err := checkOutside(h.Dir, folder); err != nil {
		add("state-outside", SeverityProblem, "move the home out of the folder and point --home at it", "%v", err)
	} else {
		add("state-outside", SeverityOK, "", "the home %s is outside the folder", h.Dir)
	}

	// Permissions of the home.
	perm := 0
	filepath.WalkDir(h.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || perm >= 10 {
			return nil
		}
		fi, err := d.Info()
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		m := fi.Mode().Perm()
		switch {
		case m&0o022 != 0:
			perm++
			add("permissions", SeverityProblem, "chmod go-w "+p, "%s is writable by group or others (%04o): they could change what the host trusts or runs", p, m)
		case !d.IsDir() && strings.HasSuffix(p, ".secret") && m&0o077 != 0:
			perm++
			add("permissions", SeverityProblem, "chmod 600 "+p, "private key %s is readable by others (%04o)", p, m)
		}
		return nil
	})
	if perm == 0 {
		add("permissions", SeverityOK, "", "no state is writable by others; private keys are 0600")
	}

	// Sync-client leftovers in the folder.
	var litter, conflicts []string
	filepath.WalkDir(folder, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == folder {
			return nil
		}
		rel, _ := filepath.Rel(folder, p)
		switch c := syncsafe.Classify(d.Name()); c.Kind {
		case syncsafe.KindConflict:
			conflicts = append(conflicts, rel)
		case syncsafe.KindLitter, syncsafe.KindPlaceholder:
			litter = append(litter, rel)
		default:
			return nil
		}
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	if len(conflicts) > 0 {
		add("conflicts", SeverityWarn, "two parties wrote one name: check that each file has one writer (SPEC §5), then delete the copies",
			"%d conflict copies in the folder: %s", len(conflicts), listSome(conflicts))
	} else {
		add("conflicts", SeverityOK, "", "no conflict copies")
	}
	if len(litter) > 0 {
		add("litter", SeverityWarn, "set the ignore rules of docs/OPERATIONS.md in the sync client, keep files on the device, then delete these",
			"%d sync-client or OS files in the folder: %s", len(litter), listSome(litter))
	} else {
		add("litter", SeverityOK, "", "no sync-client litter")
	}

	// Free disk, for the home and the folder.
	for _, dir := range []string{h.Dir, folder} {
		free, err := freeBytes(dir)
		switch {
		case err != nil:
		case free < opt.MinFree:
			add("disk", SeverityProblem, "free some space: results, spool and the ledger need room to be written",
				"only %s free under %s", humanBytes(free), dir)
		default:
			add("disk", SeverityOK, "", "%s free under %s", humanBytes(free), dir)
		}
	}

	// inotify watches (Linux).
	if data, err := os.ReadFile(opt.InotifyPath); err == nil {
		n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		if n < 8192 {
			add("inotify", SeverityWarn, "sudo sysctl fs.inotify.max_user_watches=524288 (and in /etc/sysctl.d/ to keep it); the rescan still finds everything, later",
				"fs.inotify.max_user_watches is %d: the sync client and bridge may run out of watches", n)
		} else {
			add("inotify", SeverityOK, "", "fs.inotify.max_user_watches is %d", n)
		}
	}

	// Own keys' age.
	if b := h.Bundle(); b != nil && b.Created > 0 {
		age := opt.Now().Sub(time.Unix(b.Created, 0))
		if age > opt.MaxKeyAge {
			add("key-age", SeverityWarn, "bridge keys rotate (peers follow by themselves)", "this party's keys are %d days old", int(age.Hours()/24))
		} else {
			add("key-age", SeverityOK, "", "this party's keys are %d days old", int(age.Hours()/24))
		}
	}

	if h.Config.Role == "host" {
		out = append(out, doctorHost(h, opt)...)
	}
	return out
}

// doctorHost adds the host-only checks: the daemon and the agents' clocks.
func doctorHost(h *Home, opt DoctorOptions) []Finding {
	var out []Finding
	if pid, ok := DaemonRunning(h); ok {
		out = append(out, Finding{Check: "daemon", Severity: SeverityOK, Message: fmt.Sprintf("bridge serve is running (pid %d)", pid)})
	} else {
		out = append(out, Finding{Check: "daemon", Severity: SeverityWarn, Message: "bridge serve is not running: requests wait",
			Fix: "bridge service install (or run `bridge serve` yourself)"})
	}
	if _, err := os.Stat(h.Path(PolicyName)); err != nil {
		out = append(out, Finding{Check: "policy", Severity: SeverityProblem, Message: "no policy: nothing may run", Fix: "write " + h.Path(PolicyName) + " and check it with `bridge policy check`"})
	}

	// Clock skew: an agent's created time against the host's first sight.
	// The sync delay adds to it, so only the smallest difference of recent
	// requests says something about the clocks.
	entries, err := LedgerEntries(h)
	if err != nil {
		return out
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].FirstSeen.After(entries[j].FirstSeen) })
	peers, _ := h.Peers()
	keys := map[string][][]byte{}
	for _, p := range peers {
		for _, k := range p.Keys {
			keys[p.ID] = append(keys[p.ID], k.SignPub)
		}
	}
	best := map[string]time.Duration{}
	seen := 0
	for _, e := range entries {
		if seen == 50 {
			break
		}
		data, err := os.ReadFile(h.Path("manifests", e.Agent, e.ID+"."+ExtManifest))
		if err != nil {
			continue
		}
		var req Request
		if openBody(bcrypto.KindRequest, data, keys[e.Agent], &req) != nil {
			continue
		}
		seen++
		diff := time.Unix(req.Created, 0).Sub(e.FirstSeen.Truncate(time.Second))
		if b, ok := best[e.Agent]; !ok || absDur(diff) < absDur(b) {
			best[e.Agent] = diff
		}
	}
	names := map[string]string{}
	for _, p := range peers {
		names[p.ID] = p.Name
	}
	for _, agent := range sortedKeysOf(best) {
		diff := best[agent]
		who := names[agent]
		if who == "" {
			who = agent
		}
		switch {
		case diff > opt.MaxSkew:
			out = append(out, Finding{Check: "clock-skew", Severity: SeverityWarn,
				Message: fmt.Sprintf("agent %s's clock runs %s ahead of the host's", who, diff.Round(time.Second)),
				Fix:     "enable NTP on both machines (timedatectl set-ntp true); requests from too far ahead are refused"})
		case -diff > opt.MaxSkew+10*time.Minute:
			out = append(out, Finding{Check: "clock-skew", Severity: SeverityWarn,
				Message: fmt.Sprintf("agent %s's requests reach the host %s after they were made", who, (-diff).Round(time.Second)),
				Fix:     "a slow sync or a host clock ahead: check the sync client and NTP (timedatectl)"})
		default:
			out = append(out, Finding{Check: "clock-skew", Severity: SeverityOK, Message: fmt.Sprintf("agent %s's clock agrees with the host's", who)})
		}
	}
	return out
}

// DaemonRunning reports whether `bridge serve` runs on h, by the pid it
// wrote into its lock file; a stale file after a crash names a dead process
// (or, rarely, a reused pid).
func DaemonRunning(h *Home) (int, bool) {
	data, _ := os.ReadFile(h.Path("serve.lock"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid, err == nil && pid > 0 && processAlive(pid)
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func listSome(names []string) string {
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
