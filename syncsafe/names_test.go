package syncsafe

import (
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef"
	good := []string{
		id + ".manifest", id + ".payload", "bridge.folder", "a", "0", "to-host", "to_agent",
		"status", "x.y-z_1", strings.Repeat("a", 64), "console", "com10", "lpt", "auxiliary.txt",
		"a.conflict1", // rclone-shaped but syncable: Classify, not ValidName, calls it foreign
	}
	bad := []string{
		"", strings.Repeat("a", 65), "A", "abc.Manifest", ".hidden", "-x", "_x", "~x", "x~", "a b",
		"a/b", "a\\b", "é", "a.", "a..b", "x.tmp", "~$x.tmp", "x.nosync", "x.nosync.y",
		"con", "con.txt", "con.tar.gz", "prn", "aux", "nul", "com0", "com9.log", "lpt1", "lpt9.x",
		"desktop.ini", "thumbs.db", "x.part", "x.filepart", "x.partial", "x.unison.tmp2",
		"a.sync-conflict-20240101-010101-abcdefg.x", "a_conflict-20240101-010101.x", "a_vti_b",
		"x\x00", "x\r",
	}
	for _, n := range good {
		if !ValidName(n) {
			t.Errorf("ValidName(%q) = false, want true", n)
		}
	}
	for _, n := range bad {
		if ValidName(n) {
			t.Errorf("ValidName(%q) = true, want false", n)
		}
	}
}
