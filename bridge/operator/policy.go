package operator

import (
	"fmt"
	"os"
	"strings"

	"github.com/syncbridge/bridge/bridge/policy"
)

// PolicySummary is what `bridge policy check` reports.
type PolicySummary struct {
	File   string              `json:"file"`
	SHA256 string              `json:"sha256"`
	Agents map[string][]string `json:"agents"`
	Ops    []policy.OpInfo     `json:"ops"`
	// Warnings: the policy loads but may not say what its author means
	// (policy.Policy.Warnings).
	Warnings []string `json:"warnings"`
}

// CheckPolicy loads a policy file strictly and summarises it.
func CheckPolicy(file string) (*PolicySummary, error) {
	p, err := policy.Load(file)
	if err != nil {
		return nil, err
	}
	s := &PolicySummary{File: file, SHA256: p.SHA256, Agents: map[string][]string{}, Ops: p.Catalog(), Warnings: append([]string{}, p.Warnings()...)}
	for _, a := range p.Agents() {
		s.Agents[a] = p.AgentOps(a)
	}
	return s, nil
}

// Explanation is what `bridge policy explain` reports.
type Explanation struct {
	Op    string   `json:"op"`
	Agent string   `json:"agent"`
	Argv  []string `json:"argv"`
	Dir   string   `json:"dir"`
	Env   []string `json:"env_names"`
	Text  string   `json:"text"`
}

// ExplainPolicy renders an op for the given arguments without running it.
func ExplainPolicy(file, agent, op string, args map[string]string) (*Explanation, error) {
	p, err := policy.Load(file)
	if err != nil {
		return nil, err
	}
	if agent == "" {
		for _, a := range p.Agents() {
			if p.Allowed(a, op) == nil {
				agent = a
				break
			}
		}
		if agent == "" {
			return nil, fmt.Errorf("explain: %w: no agent may run %q", policy.ErrNotAllowed, op)
		}
	}
	zero := strings.Repeat("0", 32)
	inv, err := p.Render(agent, op, args, policy.RenderContext{Env: os.LookupEnv, Vars: map[string]string{"request_id": zero}})
	if err != nil {
		return nil, err
	}
	inv.SetRequestEnv(zero) // as serve adds them
	desc, err := p.Explain(op)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, kv := range inv.Env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	text := desc + "\nas agent " + agent + " it would run:\n" + indent(inv.String(), "  ")
	return &Explanation{Op: op, Agent: agent, Argv: inv.Argv, Dir: inv.Dir, Env: names, Text: text}, nil
}

// indent puts prefix before every line of text.
func indent(text, prefix string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(text, "\n"), "\n")
	return prefix + strings.Join(lines, prefix) + "\n"
}

// PolicyPresets are the presets of `bridge policy init --preset`
// (policy.Presets), for the command line, which reaches the policy
// package only through this one.
func PolicyPresets() []policy.Preset { return policy.Presets() }

// RenderPolicyPresets is policy.RenderPresets.
func RenderPolicyPresets(names []string, repo, agent string) (string, []string, error) {
	return policy.RenderPresets(names, repo, agent)
}
