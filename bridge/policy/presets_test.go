package policy

import (
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
