package syncsafe

import (
	"bufio"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

const testID = "0123456789abcdef0123456789abcdef"

func TestClassify(t *testing.T) {
	id := testID
	h64 := strings.Repeat("ab", 32)
	tests := []struct {
		name   string
		kind   Kind
		client string
		of     string
	}{
		{id + ".manifest", KindOurs, "", ""},
		{"bridge.folder", KindOurs, "", ""},
		{"Bad Name", KindUnknown, "", ""},
		{"", KindUnknown, "", ""},
		{"a/b", KindUnknown, "", ""},

		// Ours.
		{"~$" + id + ".payload.tmp", KindTemp, "bridge", id + ".payload"},

		// Syncthing.
		{".syncthing." + id + ".payload.tmp", KindTemp, "syncthing", id + ".payload"},
		{"~syncthing~" + id + ".payload.tmp", KindTemp, "syncthing", id + ".payload"},
		{".syncthing." + h64 + ".tmp", KindTemp, "syncthing", ""},
		{id + ".sync-conflict-20240315-101112-ABCDEF7.manifest", KindConflict, "syncthing", id + ".manifest"},
		{"noext.sync-conflict-20240315-101112-ABCDEF7", KindConflict, "syncthing", "noext"},
		{"a.tar.sync-conflict-20240315-101112-ABCDEF7.gz", KindConflict, "syncthing", "a.tar.gz"},
		{".stfolder", KindLitter, "syncthing", ""},
		{".stignore", KindLitter, "syncthing", ""},
		{".stversions", KindLitter, "syncthing", ""},

		// Dropbox.
		{id + " (Bob's conflicted copy 2024-03-15).manifest", KindConflict, "dropbox", id + ".manifest"},
		{id + " (Bob's conflicted copy 2024-03-15 (1)).manifest", KindConflict, "dropbox", id + ".manifest"},
		{id + " (In Konflikt stehende Kopie von Bob 2024-03-15).payload", KindConflict, "dropbox", id + ".payload"},
		{id + " (Copia in conflitto di Bob 2024-03-15)", KindConflict, "dropbox", id},
		{id + " (Case Conflict).manifest", KindConflict, "dropbox", id + ".manifest"},
		{id + " (Case Conflict 1).manifest", KindConflict, "dropbox", id + ".manifest"},
		{id + " (Unicode Encoding Conflict).payload", KindConflict, "dropbox", id + ".payload"},
		{id + " (Selective Sync Conflict).manifest", KindConflict, "dropbox", id + ".manifest"},
		{".dropbox", KindLitter, "dropbox", ""},
		{".dropbox.attr", KindLitter, "dropbox", ""},
		{".dropbox.cache", KindLitter, "dropbox", ""},

		// OneDrive: an upper-case host fails ValidName; a lower-case one looks
		// like ours (see TestConflictOf).
		{id + "-DESKTOP-7F3K2Q.manifest", KindUnknown, "", ""},
		{id + "-laptop.manifest", KindOurs, "", ""},

		// Google Drive.
		{id + " (1).manifest", KindConflict, "gdrive", id + ".manifest"},
		{"notes.gdoc", KindPlaceholder, "gdrive", "notes"},

		// iCloud.
		{"." + id + ".payload.icloud", KindPlaceholder, "icloud", id + ".payload"},
		{id + " 2.manifest", KindConflict, "icloud", id + ".manifest"},
		{"scratch.nosync", KindLitter, "icloud", ""},

		// Nextcloud.
		{"." + id + ".payload.~1a2b3c4d", KindTemp, "nextcloud", id + ".payload"},
		{id + " (conflicted copy 2024-03-15 101112).manifest", KindConflict, "nextcloud", id + ".manifest"},
		{id + " (conflicted copy alice smith 2024-03-15 101112).payload", KindConflict, "nextcloud", id + ".payload"},
		{id + "_conflict-20240315-101112.manifest", KindConflict, "nextcloud", id + ".manifest"},
		{".sync_0a1b2c3d4e5f.db", KindLitter, "nextcloud", ""},
		{".sync_0a1b2c3d4e5f.db-wal", KindLitter, "nextcloud", ""},
		{".sync_0a1b2c3d4e5f.db-shm", KindLitter, "nextcloud", ""},
		{"._sync_0a1b2c3d4e5f.db", KindLitter, "nextcloud", ""},
		{".owncloudsync.log", KindLitter, "nextcloud", ""},
		{".nextcloudsync.log", KindLitter, "nextcloud", ""},

		// rclone.
		{id + ".payload.a1b2c3.partial", KindTemp, "rclone", id + ".payload"},
		{id + ".manifest..path1", KindConflict, "rclone", id + ".manifest"},
		{id + ".manifest..path2", KindConflict, "rclone", id + ".manifest"},
		{id + ".manifest.conflict1", KindConflict, "rclone", id + ".manifest"},
		{id + ".manifest.conflict2", KindConflict, "rclone", id + ".manifest"},

		// Unison.
		{".unison." + id + ".payload." + strings.Repeat("0f", 16) + ".unison.tmp", KindTemp, "unison", id + ".payload"},
		{id + " (conflict_on_2024-03-15).manifest", KindConflict, "unison", id + ".manifest"},
		// Names Unison 2.52.1 made in a real run (docs/OPERATIONS.md, Unison).
		{id + " (conflict #1_on_2024-03-15).manifest", KindConflict, "unison", id + ".manifest"},
		{id + " (conflict_on_2024-03-15_was_deleted).payload", KindConflict, "unison", id + ".payload"},
		{id + " (conflict #2_on_2024-03-15_was_deleted).payload", KindConflict, "unison", id + ".payload"},
		{"status (conflict_on_2024-03-15_was_deleted)", KindConflict, "unison", "status"},
		{".bak.0." + id + ".result", KindConflict, "unison", id + ".result"},
		{".bak.12." + id + ".manifest", KindConflict, "unison", id + ".manifest"},

		// OS litter.
		{".DS_Store", KindLitter, "os", ""},
		{".ds_store", KindLitter, "os", ""},
		{"desktop.ini", KindLitter, "os", ""},
		{"Desktop.ini", KindLitter, "os", ""},
		{"thumbs.db", KindLitter, "os", ""},
		{"Thumbs.db", KindLitter, "os", ""},
		{"Icon\r", KindLitter, "os", ""},
		{"~$report.docx", KindLitter, "os", ""},
		{".~lock.report.odt#", KindLitter, "os", ""},
		{"._" + id + ".manifest", KindLitter, "os", ""},
		{"notes.txt~", KindTemp, "os", ""},
		{"setup.tmp", KindTemp, "os", ""},
	}
	for _, tc := range tests {
		got := Classify(tc.name)
		want := Class{Kind: tc.kind, Client: tc.client, Of: tc.of}
		if got != want {
			t.Errorf("Classify(%q) = %+v, want %+v", tc.name, got, want)
		}
		// Nothing foreign may pass as ours, and nothing ours may fail ValidName.
		if got.Kind == KindOurs && !ValidName(tc.name) {
			t.Errorf("Classify(%q) = ours but ValidName is false", tc.name)
		}
	}
}

func TestConflictOf(t *testing.T) {
	known := map[string]bool{testID + ".manifest": true, "status": true}
	isKnown := func(s string) bool { return known[s] }
	tests := []struct {
		name string
		want string
		ok   bool
	}{
		{testID + "-laptop.manifest", testID + ".manifest", true},
		{testID + "-DESKTOP-7F3K2Q.manifest", testID + ".manifest", true},
		{testID + "-DESKTOP-7F3K2Q-2.manifest", testID + ".manifest", true},
		{"status-myhost", "status", true},
		{testID + " (1).manifest", testID + ".manifest", true}, // any derivable conflict
		{testID + ".manifest", "", false},
		{"other-laptop.manifest", "", false},
		{testID + "-laptop.payload", "", false},
	}
	for _, tc := range tests {
		got, ok := ConflictOf(tc.name, isKnown)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ConflictOf(%q) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := ConflictOf(testID+"-laptop.manifest", nil); ok {
		t.Error("ConflictOf with nil isKnown reported a OneDrive copy")
	}
}

// TestFixtureFolders walks each client's tree in fixtures/folders and checks
// every entry against the fixture's expect.txt, both ways. Directories that
// are not ours are classified themselves and not descended into.
func TestFixtureFolders(t *testing.T) {
	base := filepath.Join("..", "fixtures", "folders")
	clients, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	seenClients := map[string]bool{}
	for _, c := range clients {
		if !c.IsDir() {
			continue
		}
		seenClients[c.Name()] = true
		t.Run(c.Name(), func(t *testing.T) {
			dir := filepath.Join(base, c.Name())
			want := readExpect(t, filepath.Join(dir, "expect.txt"))
			if c.Name() == "icloud" || c.Name() == "dropbox" {
				// "Icon\r" cannot live in git portably: make it here.
				icon := filepath.Join(dir, "Icon\r")
				if err := os.WriteFile(icon, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Remove(icon) })
				want["Icon\r"] = "litter\tos"
			}
			got := map[string]string{}
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				rel = filepath.ToSlash(rel)
				if rel == "." || rel == "expect.txt" {
					return nil
				}
				cl := Classify(path.Base(rel))
				client := cl.Client
				if client == "" {
					client = "-"
				}
				got[rel] = cl.Kind.String() + "\t" + client
				if d.IsDir() && cl.Kind != KindOurs {
					return fs.SkipDir
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for rel, w := range want {
				if g, ok := got[rel]; !ok {
					t.Errorf("%q listed in expect.txt but missing from the tree", rel)
				} else if g != w {
					t.Errorf("%q: got %q, want %q", rel, g, w)
				}
			}
			for rel, g := range got {
				if _, ok := want[rel]; !ok && !isOursDir(dir, rel) {
					t.Errorf("%q (%s) is in the tree but not in expect.txt", rel, g)
				}
			}
		})
	}
	for _, c := range []string{"syncthing", "dropbox", "onedrive", "gdrive", "icloud", "nextcloud", "rclone", "unison", "os"} {
		if !seenClients[c] {
			t.Errorf("no fixture folder for client %s", c)
		}
	}
}

// isOursDir: our own directories (to-host/) need no expect.txt line.
func isOursDir(dir, rel string) bool {
	fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
	return err == nil && fi.IsDir()
}

func readExpect(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "\t")
		if len(parts) != 3 {
			t.Fatalf("%s: bad line %q", file, line)
		}
		out[parts[0]] = parts[1] + "\t" + parts[2]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no entries", file)
	}
	return out
}
