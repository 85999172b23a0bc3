package main

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/host"
)

// The host's policy: check and explain.

// PolicyCmd groups policy commands.
type PolicyCmd struct {
	Check   PolicyCheckCmd   `cmd:"" help:"Check the policy file and list what each agent may run."`
	Explain PolicyExplainCmd `cmd:"" help:"Render an op's argv for given arguments, without running it."`
}

type PolicyCheckCmd struct {
	File string `arg:"" optional:"" help:"Policy file (default: policy.toml in the home)."`
}

func (c *PolicyCheckCmd) Run(g *Globals) (err error) {
	file := c.File
	if file == "" {
		if file, err = g.homePolicy("policy check"); err != nil {
			return err
		}
	}
	sum, err := host.CheckPolicy(file)
	if err != nil {
		return policyError(err)
	}
	for _, w := range sum.Warnings {
		g.note("warning: %s", w)
	}
	if g.JSON {
		return g.printJSON(sum)
	}
	g.printf("%s: ok (sha256 %s)\n", file, sum.SHA256)
	agents := make([]string, 0, len(sum.Agents))
	for a := range sum.Agents {
		agents = append(agents, a)
	}
	sort.Strings(agents)
	for _, a := range agents {
		g.printf("  agent %s may run: %s\n", a, strings.Join(sum.Agents[a], ", "))
	}
	return nil
}

// homePolicy is the policy file of the host's home; an agent's home has
// none, and is told so rather than that a file is missing.
func (g *Globals) homePolicy(what string) (string, error) {
	h, err := g.openHome()
	if err != nil {
		return "", err
	}
	if h.Config.Role != "host" {
		return "", withHintf(fmt.Errorf("%s: this home belongs to an agent; the policy is the host's", what),
			"run it with the host's --home, or name a policy file: bridge policy check FILE")
	}
	return h.Path(bridge.PolicyName), nil
}

// policyError: a policy that does not load or does not allow the call is
// "rejected" (66), as serve would reject it; a file that cannot be read is
// bridge's own failure (65).
func policyError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return err
	}
	return &codeError{code: exitRejected, err: err}
}

type PolicyExplainCmd struct {
	Op    string   `arg:"" help:"The op."`
	Args  []string `arg:"" optional:"" help:"Arguments as NAME=VALUE."`
	Agent string   `placeholder:"NAME" help:"Check as this agent (default: any agent that may run the op)."`
	File  string   `placeholder:"FILE" help:"Policy file (default: policy.toml in the home)."`
}

func (c *PolicyExplainCmd) Run(g *Globals) error {
	m, err := parseArgs(c.Args)
	if err != nil {
		return err
	}
	file := c.File
	if file == "" {
		if file, err = g.homePolicy("policy explain"); err != nil {
			return err
		}
	}
	ex, err := host.ExplainPolicy(file, c.Agent, c.Op, m)
	if err != nil {
		return policyError(err)
	}
	if g.JSON {
		return g.printJSON(ex)
	}
	g.printf("%s", ex.Text)
	return nil
}
