package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/syncbridge/bridge/bridge/syncthing"
	"github.com/syncbridge/bridge/bridge/trust"
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

// Options tunes CheckHome; zero fields take the defaults.
type Options struct {
	Now         func() time.Time // default time.Now
	InotifyPath string           // default /proc/sys/fs/inotify/max_user_watches
	MinFree     uint64           // bytes free below which the disk is a problem; default 256 MiB
	MaxKeyAge   time.Duration    // default 365 days
	MaxSkew     time.Duration    // clock difference worth a warning; default 1m
	// RcloneWorkdirs are where rclone bisync's listings and locks are
	// looked for; default rcloneWorkdirs().
	RcloneWorkdirs []string
}

// defaults fills in the zero fields.
func (opt *Options) Defaults() {
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
	if opt.RcloneWorkdirs == nil {
		opt.RcloneWorkdirs = rcloneWorkdirs()
	}
}

// shellQuote quotes s for a POSIX shell, in single quotes; printf reads
// the backslash sequences itself.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, "\n", `\n`), "'", `'\''`) + "'"
}

// checkMarker opens the folder and checks its marker.
func checkMarker(folder string) error {
	f, err := syncsafe.OpenFolder(folder)
	if err != nil {
		return err
	}
	defer f.Close()
	return syncsafe.CheckMarker(f)
}

// CheckHome checks a home and its folder, of either role, for the mistakes
// that make a bridge misbehave quietly. It only reads. A host's own checks
// (the daemon, the ledger, the agents' clocks) are added by the host's
// Doctor.
func CheckHome(h *trust.Home, opt Options) []Finding {
	opt.Defaults()
	var out []Finding
	add := func(check, sev, fix, format string, args ...any) {
		out = append(out, Finding{Check: check, Severity: sev, Message: fmt.Sprintf(format, args...), Fix: fix})
	}
	folder := h.Config.Folder

	// The folder and its marker.
	// As every command checks it (syncsafe.CheckMarker), not only that a
	// file is there: one cut short or not ours makes them all refuse.
	marker := filepath.Join(folder, syncsafe.MarkerName)
	if fi, err := os.Lstat(marker); errors.Is(err, fs.ErrNotExist) {
		add("marker", SeverityProblem, "check that the folder is mounted and synced; on the host, `bridge init host` wrote the marker",
			"%s has no %s: it may be unmounted or not synced yet", folder, syncsafe.MarkerName)
	} else if err := checkMarker(folder); err != nil {
		// A command to write the marker only for a regular file cut short:
		// a link planted by a folder writer would take the write out of
		// the folder, and another version's marker is not to be replaced.
		fix := "check --folder: a marker that is not a regular file or holds other content is another program's or another bridge version's folder; do not write into it"
		if errors.Is(err, syncsafe.ErrNoMarker) && fi != nil && fi.Mode().IsRegular() {
			fix = fmt.Sprintf("wait for the sync client to finish copying it; if it stays so, and this is the right folder, write it again: printf %s > %s",
				shellQuote(syncsafe.MarkerContent), shellQuote(marker))
		}
		add("marker", SeverityProblem, fix, "%v", err)
	} else {
		add("marker", SeverityOK, "", "%s is a bridge folder", folder)
	}

	// State outside the folder.
	if err := trust.CheckOutside(h.Dir, folder); err != nil {
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
			conflicts = append(conflicts, quoteName(rel))
		case syncsafe.KindLitter, syncsafe.KindPlaceholder:
			if c.Kind == syncsafe.KindLitter && c.Client != "os" {
				// The sync client's own files (.stfolder, .stignore,
				// .dropbox, a journal): it needs them, and bridge ignores
				// them anyway.
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			litter = append(litter, quoteName(rel))
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

	// A sync client that stopped for good (docs/OPERATIONS.md, rclone).
	out = append(out, rcloneFindings(folder, opt.RcloneWorkdirs)...)

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

	// The Syncthing nudge: without it every hop waits for Syncthing's
	// watcher, which people take for the bridge being slow.
	if fi, err := os.Stat(filepath.Join(folder, ".stfolder")); err == nil && fi.IsDir() {
		doctorStignore(folder, add)
		cfg, cerr := syncthing.LoadConfig(h)
		switch {
		case cerr != nil:
			add("syncthing-nudge", SeverityWarn, "bridge syncthing setup", "%v", cerr)
		case cfg.API != "" || os.Getenv("BRIDGE_SYNCTHING_API") != "":
			// Set is not enough: a Syncthing that is down makes every
			// nudge fail, and every hop wait for the other side's watcher.
			api, key, folders, from := cfg.API, cfg.Key, cfg.Folders, ""
			if api == "" {
				api, key, folders, from = os.Getenv("BRIDGE_SYNCTHING_API"), os.Getenv("BRIDGE_SYNCTHING_KEY"), os.Getenv("BRIDGE_SYNCTHING_FOLDER"), " (from the environment)"
			}
			n, nerr := syncthing.NewNudger(api, key, folders, nil)
			if nerr != nil {
				add("syncthing-nudge", SeverityProblem, "bridge syncthing setup (or set --syncthing-api, --syncthing-key and --syncthing-folder together)",
					"the nudge settings%s are wrong: %v", from, nerr)
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			nerr = n.Ping(ctx)
			cancel()
			shown := api // without a password in the URL
			if u, err := url.Parse(api); err == nil {
				shown = u.Redacted()
			}
			if nerr != nil {
				add("syncthing-nudge", SeverityProblem, "start Syncthing here (or correct `bridge syncthing setup`): until it answers, nothing syncs from or to this machine",
					"Syncthing's API at %s%s does not answer: %v", shown, from, nerr)
			} else {
				add("syncthing-nudge", SeverityOK, "", "Syncthing nudge set%s and answering: %s", from, shown)
				doctorResultsRoute(h, n, add)
			}
		default:
			add("syncthing-nudge", SeverityWarn, "bridge syncthing setup (on both sides; --share-results for the fastest)",
				"the folder is Syncthing's and no nudge is set: each hop waits for Syncthing's watcher (10 s by default), about 20 s a round trip instead of a quarter of a second")
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

	return out
}

// quoteName shows a name from the folder to a person. Whoever can write the
// folder chooses its names, and a name with terminal escape sequences would
// otherwise act on the host user's terminal (retitle it, clear it, fake
// lines): such a name, or one with quotes or backslashes that would make its
// quoted form ambiguous, is shown Go-quoted ("~$\x1b]0;…"); any other name
// stays as it is, readable.
func quoteName(name string) string {
	for _, r := range name {
		if r == utf8.RuneError || r == '"' || r == '\\' || !unicode.IsPrint(r) {
			return strconv.Quote(name)
		}
	}
	return name
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

// doctorResultsRoute says whether a host's results directory is shared as
// a Syncthing folder of its own on one side only (`syncthing setup
// --share-results` run on one side): every answer then goes where the
// agent does not read, and each wait hangs.
func doctorResultsRoute(h *trust.Home, n *syncthing.Nudger, add func(check, sev, fix, format string, args ...any)) {
	var hosts []syncthing.RouteHost
	isHost := h.Config.Role == "host"
	if isHost {
		hosts = []syncthing.RouteHost{{ID: h.Config.ID, Name: h.Config.Name}}
	} else if peers, err := h.Peers(); err == nil {
		for _, p := range peers {
			if p.Role == "host" {
				hosts = append(hosts, syncthing.RouteHost{ID: p.ID, Name: p.Name})
			}
		}
	}
	if len(hosts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	problems, err := n.ResultsRoute(ctx, h.Config.Folder, hosts, isHost)
	switch {
	case err != nil:
		add("syncthing-results", SeverityWarn, "check Syncthing's API key and address (`bridge syncthing setup`)", "could not read Syncthing's folders: %v", err)
	case len(problems) == 0:
		add("syncthing-results", SeverityOK, "", "results travel the same way on both sides, as far as this Syncthing tells")
	}
	for _, p := range problems {
		add("syncthing-results", SeverityProblem, p.Hint, "%s", p.Message)
	}
}

// doctorStignore checks that a Syncthing bridge folder leaves out the sync
// clients' temporary files (docs/OPERATIONS.md): without the lines, one
// side's partial files travel as files of the folder.
func doctorStignore(folder string, add func(check, sev, fix, format string, args ...any)) {
	data, err := os.ReadFile(filepath.Join(folder, ".stignore"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		add("syncthing-ignore", SeverityWarn, "", "cannot read the bridge folder's .stignore: %v", err)
		return
	}
	lines := map[string]bool{}
	include := false
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		include = include || strings.HasPrefix(l, "#include")
		lines[strings.TrimPrefix(l, "(?d)")] = true
	}
	var missing []string
	for _, want := range syncthing.TempIgnores() {
		if !lines[strings.TrimPrefix(want, "(?d)")] {
			missing = append(missing, want)
		}
	}
	switch {
	case len(missing) == 0:
		add("syncthing-ignore", SeverityOK, "", "the bridge folder's .stignore leaves out the sync clients' temporary files")
	case include:
		add("syncthing-ignore", SeverityOK, "", "the bridge folder's .stignore includes other files; make sure they leave out %s", strings.Join(missing, " and "))
	default:
		add("syncthing-ignore", SeverityWarn, "bridge syncthing setup adds them (or add the lines to .stignore by hand, docs/OPERATIONS.md)",
			"the bridge folder's .stignore lacks %s: the sync clients' temporary files would travel as files of the folder", strings.Join(missing, " and "))
	}
}
