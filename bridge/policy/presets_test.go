package policy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every preset, alone, with git and all together, makes a policy that
// loads, whose ops each say what they do, and that draws no warning but a
// missing program (which depends on this machine: presets.txt checks the
// presets where their tools are). Unknown names are refused; repeats are
// taken once.
func TestPresetsLoadWithoutWarnings(t *testing.T) {
	repo := t.TempDir()
	sets := [][]string{{"git", "go", "node", "python", "rust"}, {"git", "git"}}
	for _, p := range Presets() {
		sets = append(sets, []string{p.Name}, []string{"git", p.Name})
	}
	for _, set := range sets {
		text, ops, err := RenderPresets(set, repo, "cloud-1")
		if err != nil {
			t.Fatalf("%v: %v", set, err)
		}
		p, err := Parse("p.toml", []byte(text))
		if err != nil {
			t.Fatalf("%v: %v\n%s", set, err, text)
		}
		if got := p.AgentOps("cloud-1"); len(got) != len(ops) {
			t.Errorf("%v: the agent may run %v, want %v", set, got, ops)
		}
		for _, w := range p.Warnings() {
			if !strings.Contains(w, "argv[0]") {
				t.Errorf("%v: %s", set, w)
			}
		}
	}
	for _, pr := range Presets() {
		for _, op := range pr.Ops {
			if op.Does == "" {
				t.Errorf("%s: op %s says nothing of what it does", pr.Name, op.Name)
			}
		}
	}
	if _, _, err := RenderPresets([]string{"git", "java"}, repo, "cloud-1"); err == nil || !strings.Contains(err.Error(), `no preset "java"`) {
		t.Errorf("an unknown preset: %v", err)
	}
}

// The file ops check the tree again where they write, so a directory
// turned into a link after the daemon confined the path (a patch applied
// at the same moment: red team of the presets) is refused there: a link
// to .git, a link out of the repository, a link at the file's own name.
// The scripts run as the ops run them: sh -c SCRIPT NAME PATH [DRY_RUN],
// in the repository.
func TestFileOpsCheckTheTreeWhereTheyWrite(t *testing.T) {
	repo, outside := t.TempDir(), t.TempDir()
	for _, d := range []string{".git", "src"} {
		if err := os.Mkdir(filepath.Join(repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(repo, ".git", "config"), []byte("[core]\n"), 0o644)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644)
	os.Symlink(".git", filepath.Join(repo, "togit"))
	os.Symlink(outside, filepath.Join(repo, "out"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(repo, "src", "link"))
	run := func(script, name string, args ...string) (string, int) {
		cmd := exec.Command("sh", append([]string{"-c", script, name}, args...)...)
		cmd.Dir = repo
		cmd.Stdin = strings.NewReader("[core]\n\tfsmonitor = echo owned\n")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	for _, c := range []struct {
		script, name, path, dry, want string
	}{
		{writeFileScript, "write-file", "togit/config", "false", "is inside .git"},
		{writeFileScript, "write-file", "togit/config", "true", "is inside .git"},
		{writeFileScript, "write-file", "out/secret", "false", "is not inside the repository"},
		{writeFileScript, "write-file", "out/secret", "true", "is not inside the repository"},
		{writeFileScript, "write-file", "src/link", "false", "is a symbolic link"},
		{writeFileScript, "write-file", ".GIT/config", "false", "is inside .git"},
		{readFileScript, "read-file", "togit/config", "", "is inside .git"},
		{readFileScript, "read-file", "out/secret", "", "is not inside the repository"},
		{readFileScript, "read-file", "src/link", "", "is a symbolic link"},
	} {
		args := []string{filepath.Join(repo, c.path)}
		if c.dry != "" {
			args = append(args, c.dry)
		}
		out, code := run(strings.ReplaceAll(strings.ReplaceAll(c.script, "{{", "{"), "}}", "}"), c.name, args...)
		if code != 2 || !strings.Contains(out, c.name+": refused: "+c.path+" "+c.want) {
			t.Errorf("%s %s (dry run %q): exit %d, %q; want refused: %s", c.name, c.path, c.dry, code, out, c.want)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(repo, ".git", "config")); string(data) != "[core]\n" {
		t.Errorf(".git/config was written: %q", data)
	}
	if data, _ := os.ReadFile(filepath.Join(outside, "secret")); string(data) != "secret\n" {
		t.Errorf("the file outside was written: %q", data)
	}
	// And a plain write keeps an executable file executable.
	os.WriteFile(filepath.Join(repo, "src", "run.sh"), []byte("old\n"), 0o755)
	if out, code := run(strings.ReplaceAll(strings.ReplaceAll(writeFileScript, "{{", "{"), "}}", "}"), "write-file", filepath.Join(repo, "src", "run.sh"), "false"); code != 0 || !strings.Contains(out, "wrote src/run.sh (") {
		t.Fatalf("a plain write: exit %d, %q", code, out)
	}
	if fi, err := os.Stat(filepath.Join(repo, "src", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the executable bit was lost: %v %v", fi.Mode(), err)
	}
	// A new file is 0644, and no temporary file is left beside it.
	if _, code := run(strings.ReplaceAll(strings.ReplaceAll(writeFileScript, "{{", "{"), "}}", "}"), "write-file", filepath.Join(repo, "src", "new.txt"), "false"); code != 0 {
		t.Fatalf("a new file: exit %d", code)
	}
	if fi, err := os.Stat(filepath.Join(repo, "src", "new.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("a new file's mode: %v %v", fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(repo, "src", ".write-file.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	text, _, _ := RenderPresets([]string{"git"}, repo, "cloud-1")
	if !strings.Contains(text, "max_concurrent = 1") {
		t.Error("the preset's agent may run ops at once")
	}
}
