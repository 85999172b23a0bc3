package syncsafe

import (
	"regexp"
	"strings"
	"sync"
)

// Kind says what a name in the synced folder is. The zero value is
// KindUnknown, so a forgotten check never reads as "ours".
type Kind int

const (
	KindUnknown     Kind = iota // fails ValidName and matches no known pattern
	KindOurs                    // passes ValidName and matches no foreign pattern
	KindTemp                    // a client's in-flight or partial file (or our staging temp)
	KindConflict                // a client's conflict or duplicate copy
	KindPlaceholder             // an online-only stub or pointer file
	KindLitter                  // OS or client metadata, never ours
)

var kindNames = [...]string{"unknown", "ours", "temp", "conflict", "placeholder", "litter"}

// String returns the lower-case kind name used in fixtures and logs.
func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "kind(?)"
	}
	return kindNames[k]
}

// Class is the result of Classify.
type Class struct {
	Kind   Kind
	Client string // "syncthing", "dropbox", "onedrive", "gdrive", "icloud", "nextcloud", "rclone", "unison", "os", "bridge"; "" for ours/unknown
	Of     string // the original name of a temp, conflict or placeholder, when the pattern reveals it
}

// litterExact maps exact names (compared case-insensitively, as the OSes that
// create them do) to the client that creates them.
var litterExact = map[string]string{
	".ds_store":                 "os",
	"desktop.ini":               "os",
	"thumbs.db":                 "os",
	"ehthumbs.db":               "os",
	"icon\r":                    "os",
	".directory":                "os",
	".spotlight-v100":           "os",
	".trashes":                  "os",
	".fseventsd":                "os",
	".temporaryitems":           "os",
	".documentrevisions-v100":   "os",
	"$recycle.bin":              "os",
	"system volume information": "os",
	".dropbox":                  "dropbox",
	".dropbox.attr":             "dropbox",
	".dropbox.cache":            "dropbox",
	"rules.dropboxignore":       "dropbox",
	".stfolder":                 "syncthing",
	".stignore":                 "syncthing",
	".stversions":               "syncthing",
	".owncloudsync.log":         "nextcloud",
	".nextcloudsync.log":        "nextcloud",
	".sync-exclude.lst":         "nextcloud",
	".csync_journal.db":         "nextcloud",
}

// A pattern recognises one client naming scheme. of builds the original name
// from the submatches ("" when it cannot be derived).
type pattern struct {
	re     *regexp.Regexp
	kind   Kind
	client string
	of     func(m []string) string
}

func group(i int) func([]string) string { return func(m []string) string { return m[i] } }

// joinGroups rebuilds "stem + ext" from two submatches: clients insert their
// conflict marker before the last extension.
func joinGroups(i, j int) func([]string) string {
	return func(m []string) string { return m[i] + m[j] }
}

func noOf([]string) string { return "" }

// datePart is a calendar date as Dropbox, Unison and Nextcloud print it.
const datePart = `\d{4}-\d{2}-\d{2}`

// patterns are tried in order; the first match wins. Specific schemes come
// before the generic ones that would also match them (Nextcloud's and
// Unison's dated markers before Dropbox's "any parenthesised date"). They
// are compiled on first use: a CLI command that never classifies a name
// (most agent commands) should not pay for thirty regexps at start.
var patterns = sync.OnceValue(func() []pattern {
	return []pattern{
		// Our own staging temp (publish.go): ~$<valid name>.tmp.
		{regexp.MustCompile(`^~\$([a-z0-9][a-z0-9._-]*)\.tmp$`), KindTemp, "bridge", group(1)},

		// Syncthing temps: hashed form first (64 hex chars of SHA-256; older
		// releases used 32), then the plain forms with either prefix.
		{regexp.MustCompile(`^(?:\.syncthing\.|~syncthing~)(?:[0-9a-f]{64}|[0-9a-f]{32})\.tmp$`), KindTemp, "syncthing", noOf},
		{regexp.MustCompile(`^(?:\.syncthing\.|~syncthing~)(.+)\.tmp$`), KindTemp, "syncthing", group(1)},
		// Syncthing conflict: BASE.sync-conflict-YYYYMMDD-HHMMSS-XXXXXXX.EXT.
		{regexp.MustCompile(`^(.*)\.sync-conflict-\d{8}-\d{6}-[A-Za-z0-9]{7}(\.[^.]*)?$`), KindConflict, "syncthing", joinGroups(1, 2)},

		// Unison temp: .unison.NAME.<32 hex>.unison.tmp (older: without the hash).
		{regexp.MustCompile(`^\.unison\.(.+)\.[0-9a-f]{32}\.unison\.tmp$`), KindTemp, "unison", group(1)},
		{regexp.MustCompile(`^\.unison\..*\.unison\.tmp$`), KindTemp, "unison", noOf},
		// Unison 2.52 copyonconflict (seen running it; docs/OPERATIONS.md, Unison): NAME (conflict_on_DATE).EXT,
		// a second one the same day NAME (conflict #N_on_DATE).EXT, and a
		// delete-versus-change copy NAME (conflict_on_DATE_was_deleted).EXT,
		// where Unison also removes the original on both sides.
		{regexp.MustCompile(`^(.+?) \(conflict(?: #\d+)?_on_` + datePart + `(?:_was_deleted)?\)(\.[^.]*)?$`), KindConflict, "unison", joinGroups(1, 2)},
		// Unison backup kept beside the file (backuplocation = local): the default
		// backupprefix ".bak.$VERSION." before the name.
		{regexp.MustCompile(`^\.bak\.\d+\.(.+)$`), KindConflict, "unison", group(1)},

		// Nextcloud: download temp .NAME.~<hex>, journal .sync_<hash>.db[-wal|-shm]
		// (._sync_ in older ownCloud clients), conflict copies (current and legacy),
		// virtual-file placeholders.
		{regexp.MustCompile(`^\.(.+)\.~[0-9a-f]+$`), KindTemp, "nextcloud", group(1)},
		{regexp.MustCompile(`^\._?sync_[0-9a-f]+\.db(?:-wal|-shm|-journal)?$`), KindLitter, "nextcloud", noOf},
		{regexp.MustCompile(`^(.+?) \(conflicted copy (?:[^()]* )?` + datePart + ` \d{6}\)(\.[^.]*)?$`), KindConflict, "nextcloud", joinGroups(1, 2)},
		{regexp.MustCompile(`^(.+)_conflict-\d{8}-\d{6}(\.[^.]*)?$`), KindConflict, "nextcloud", joinGroups(1, 2)},
		{regexp.MustCompile(`^(.+)\.(?:nextcloud|owncloud)$`), KindPlaceholder, "nextcloud", group(1)},

		// rclone: NAME.XXXXXX.partial (>= 1.63), NAME..path1/..path2 (1.60 bisync),
		// NAME.conflictN (>= 1.66 bisync).
		{regexp.MustCompile(`^(.+)\.[0-9A-Za-z]+\.partial$`), KindTemp, "rclone", group(1)},
		{regexp.MustCompile(`^(.+)\.partial$`), KindTemp, "rclone", group(1)},
		{regexp.MustCompile(`^(.+)\.\.path[12]$`), KindConflict, "rclone", group(1)},
		{regexp.MustCompile(`^(.+)\.conflict\d+$`), KindConflict, "rclone", group(1)},

		// iCloud: evicted stub .NAME.icloud.
		{regexp.MustCompile(`^\.(.+)\.icloud$`), KindPlaceholder, "icloud", group(1)},

		// Dropbox named conflicts: "(Case Conflict)", "(Unicode Encoding
		// Conflict)", "(Selective Sync Conflict)", "(shared folder conflict)",
		// optionally numbered; then any parenthesised suffix holding a date, which
		// covers "(X's conflicted copy YYYY-MM-DD)" in every language.
		{regexp.MustCompile(`^(.+?) \((?i:[^()]*conflict[^()]*)\)(\.[^.]*)?$`), KindConflict, "dropbox", joinGroups(1, 2)},
		{regexp.MustCompile(`^(.+?) \([^()]*` + datePart + `[^()]*(?:\(\d+\))?\)(\.[^.]*)?$`), KindConflict, "dropbox", joinGroups(1, 2)},

		// Google Drive duplicates NAME (1).EXT; iCloud conflicts NAME 2.EXT.
		{regexp.MustCompile(`^(.+?) \(\d+\)(\.[^.]*)?$`), KindConflict, "gdrive", joinGroups(1, 2)},
		{regexp.MustCompile(`^(.+?) \d+(\.[^.]*)?$`), KindConflict, "icloud", joinGroups(1, 2)},
		// Google Docs pointer files.
		{regexp.MustCompile(`^(.+)\.g(?:doc|sheet|slides|draw|form|map|site|table|jam)$`), KindPlaceholder, "gdrive", group(1)},

		// OS and application litter with a recognisable shape.
		{regexp.MustCompile(`^\.~lock\..*#$`), KindLitter, "os", noOf},       // LibreOffice lock
		{regexp.MustCompile(`^~\$`), KindLitter, "os", noOf},                 // Office owner file
		{regexp.MustCompile(`^\._`), KindLitter, "os", noOf},                 // AppleDouble
		{regexp.MustCompile(`^\.Trash-\d+$`), KindLitter, "os", noOf},        // freedesktop trash
		{regexp.MustCompile(`\.nosync(?:\.|$)`), KindLitter, "icloud", noOf}, // iCloud never syncs these
		{regexp.MustCompile(`^\..+\.sw[a-p]$`), KindTemp, "os", noOf},        // vim swap
		{regexp.MustCompile(`~$`), KindTemp, "os", noOf},                     // editor backup
		{regexp.MustCompile(`^\.~`), KindTemp, "os", noOf},
		{regexp.MustCompile(`\.(?:tmp|part|filepart|crdownload)$`), KindTemp, "os", noOf},
	}
})

// Classify says what a single name (no slashes) found in the synced folder
// is. It looks at the name only; see ConflictOf for OneDrive's "-HOST" copies,
// which look like ordinary names.
//
// Classification decides what to ignore and what to log, never what to trust:
// anything not KindOurs must not be parsed, and KindOurs files are verified
// like any other input.
func Classify(name string) Class {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return Class{Kind: KindUnknown}
	}
	if client, ok := litterExact[strings.ToLower(name)]; ok {
		return Class{Kind: KindLitter, Client: client}
	}
	for _, p := range patterns() {
		if m := p.re.FindStringSubmatch(name); m != nil {
			return Class{Kind: p.kind, Client: p.client, Of: p.of(m)}
		}
	}
	if ValidName(name) {
		return Class{Kind: KindOurs}
	}
	return Class{Kind: KindUnknown}
}

// ConflictOf reports the name that name is a conflict copy of. A conflict
// that Classify recognises and whose original it can derive is returned as
// is. Otherwise name is tried as OneDrive's "NAME-COMPUTERNAME.EXT" copy (also
// "NAME-COMPUTERNAME-N.EXT"): every "-" in the stem is a candidate cut, and
// the candidate is reported only if isKnown accepts it.
//
// With a lower-case computer name such a copy passes ValidName, so it cannot
// be told apart by its shape alone. The real defence is the caller's
// structural allowlist (e.g. "^[0-9a-f]{32}\.manifest$" with the stem equal
// to the signed request id), which a "-host" suffix never satisfies.
func ConflictOf(name string, isKnown func(string) bool) (orig string, ok bool) {
	c := Classify(name)
	if c.Kind == KindConflict && c.Of != "" {
		return c.Of, true
	}
	if isKnown == nil {
		return "", false
	}
	stem, ext := name, ""
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		stem, ext = name[:i], name[i:]
	}
	for i := strings.IndexByte(stem, '-'); i > 0; {
		if cand := stem[:i] + ext; isKnown(cand) {
			return cand, true
		}
		j := strings.IndexByte(stem[i+1:], '-')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return "", false
}
