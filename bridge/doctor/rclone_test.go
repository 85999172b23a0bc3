package doctor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRcloneFindings: the state rclone bisync 1.60 leaves in its workdir
// (names seen running it; TestRcloneBisyncEndToEnd makes a real lockout),
// for this folder's session only.
func TestRcloneFindings(t *testing.T) {
	folder := "/home/me/bridge"
	session := "home_me_bridge..gdrive_bridge"
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip("no `true` to make a dead pid")
	}
	tests := []struct {
		files map[string]string
		want  string // "" none, else severity + a word of the message
	}{
		{map[string]string{}, ""},
		{map[string]string{session + ".path1.lst": "", session + ".path2.lst": ""}, "ok"},
		{map[string]string{session + ".path1.lst-err": "", session + ".path2.lst-err": ""}, "problem locked out"},
		// After a --resync the old -err files stay beside the new listings.
		{map[string]string{session + ".path1.lst-err": "", session + ".path1.lst": ""}, "ok"},
		{map[string]string{"other_dir..gdrive_bridge.path1.lst-err": ""}, ""},
		{map[string]string{"gdrive_bridge..home_me_bridge.path2.lst-err": ""}, "problem locked out"},
		{map[string]string{session + ".lck": strconv.Itoa(dead.Process.Pid), session + ".path1.lst": ""}, "problem stale lock"},
		{map[string]string{session + ".lck": strconv.Itoa(os.Getpid()), session + ".path1.lst": ""}, "ok"},
	}
	for i, tc := range tests {
		dir := t.TempDir()
		for name, content := range tc.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		got := rcloneFindings(folder, []string{dir, filepath.Join(dir, "missing")})
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("case %d: %+v, want no finding", i, got)
		case tc.want != "" && len(got) != 1:
			t.Errorf("case %d: %+v, want one %q", i, got, tc.want)
		case tc.want != "":
			sev, word, _ := strings.Cut(tc.want, " ")
			if got[0].Severity != sev || !strings.Contains(got[0].Message, word) || (sev == SeverityProblem && got[0].Fix == "") {
				t.Errorf("case %d: %+v, want %q", i, got[0], tc.want)
			}
		}
	}
}
