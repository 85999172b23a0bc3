package syncsafe

import "strings"

// maxNameLen is the longest name ValidName accepts. Short names keep whole
// paths far below the limits of every client (OneDrive 400 characters per path,
// Syncthing's temp-name hashing above 145 bytes, rclone's 100-character
// partial names).
const maxNameLen = 64

// ValidName reports whether name is a single path component that we may write
// or accept. The rule (doc.go, "Names") is structural and deliberately narrow:
// every client syncs such a name unchanged on every OS.
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > maxNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	switch {
	case strings.HasSuffix(name, "."), // Windows strips it
		strings.HasSuffix(name, "~"),      // editor backups; Nextcloud, iCloud skip
		strings.HasSuffix(name, ".tmp"),   // OneDrive, iCloud, Dropbox skip
		strings.Contains(name, ".nosync"), // iCloud skips any name containing it
		strings.Contains(name, ".."),      // rclone's ..path1 conflicts; path confusion
		// Names Nextcloud's default exclude list or a client's own partial
		// files use: ours must never look like them.
		strings.HasSuffix(name, ".part"),
		strings.HasSuffix(name, ".filepart"),
		strings.HasSuffix(name, ".partial"),
		strings.Contains(name, ".unison"),
		strings.Contains(name, ".sync-conflict-"),
		strings.Contains(name, "_conflict-"),
		strings.Contains(name, "_vti_"): // OneDrive refuses it anywhere
		return false
	}
	switch name {
	case "desktop.ini", "thumbs.db", "ehthumbs.db":
		// Valid characters, but Dropbox, OneDrive and iCloud never sync them.
		return false
	}
	return !reservedDeviceName(name)
}

// reservedDeviceName reports Windows device names, which are reserved with any
// extension ("con", "con.txt", "con.tar.gz"): Windows, and OneDrive everywhere,
// refuse them.
func reservedDeviceName(name string) bool {
	stem, _, _ := strings.Cut(name, ".")
	switch stem {
	case "con", "prn", "aux", "nul":
		return true
	}
	if len(stem) == 4 && (strings.HasPrefix(stem, "com") || strings.HasPrefix(stem, "lpt")) {
		return stem[3] >= '0' && stem[3] <= '9'
	}
	return false
}
