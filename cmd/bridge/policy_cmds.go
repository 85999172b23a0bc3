package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
)

// The host's policy: check and explain.

// PolicyCmd groups policy commands.
type PolicyCmd struct {
	Init    PolicyInitCmd    `cmd:"" help:"Write a starter policy into the host's home: one harmless op, or reviewed ops for a repository (--preset)."`
	Presets PolicyPresetsCmd `cmd:"" help:"List the presets of 'policy init --preset' and what each op does."`
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
	sum, err := operator.CheckPolicy(file)
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
	return h.Path(trust.PolicyName), nil
}

// PolicyInitCmd writes a starter policy.
type PolicyInitCmd struct {
	Agent  string   `default:"cloud-1" placeholder:"NAME" help:"The agent's local name (as paired: 'bridge keys show')."`
	Preset []string `sep:"," placeholder:"NAME,..." help:"Reviewed ops for a repository instead of the one harmless op: git, go, node, python, rust, composed (--preset git,go); 'bridge policy presets' lists them."`
	Repo   string   `placeholder:"DIR" help:"With --preset: the repository the ops work in (required)."`
	Print  bool     `help:"Print the policy on standard output instead of writing it (to merge into a policy you have)."`
}

// PolicyPresetsCmd lists the presets.
type PolicyPresetsCmd struct{}

func (c *PolicyPresetsCmd) Run(g *Globals) error {
	ps := operator.PolicyPresets()
	if g.JSON {
		type op struct {
			Name string `json:"name"`
			Does string `json:"does"`
		}
		type preset struct {
			Name    string `json:"name"`
			Summary string `json:"summary"`
			Ops     []op   `json:"ops"`
		}
		out := []preset{}
		for _, p := range ps {
			pr := preset{Name: p.Name, Summary: p.Summary, Ops: []op{}}
			for _, o := range p.Ops {
				pr.Ops = append(pr.Ops, op{o.Name, o.Does})
			}
			out = append(out, pr)
		}
		return g.printJSON(out)
	}
	for i, p := range ps {
		if i > 0 {
			g.printf("\n")
		}
		g.printf("%s: %s\n", p.Name, p.Summary)
		for _, o := range p.Ops {
			g.printf("  %-13s %s\n", o.Name, o.Does)
		}
	}
	g.note("compose them: `bridge policy init --preset git,go --repo DIR` (git brings reading, patching, writing and committing; a stack its checks)")
	return nil
}

// starterPolicy allows one agent one harmless op, and shows, commented
// out, the shape of a real one.
const starterPolicy = `# What each agent may run on this host: named ops with typed arguments, no
# shell, a clean environment. A running ` + "`bridge serve`" + ` takes edits live; check
# them with ` + "`bridge policy check`" + `, and see an op as it would run with
# ` + "`bridge policy explain OP`" + `. Every key, with examples: docs/POLICY.md
# in the bridge source (github.com/syncbridge/bridge).

[ops.hello]
description = "a first round trip: prints a greeting"
argv = ["echo", "hello from the host"]
scope = "read"
idempotent = true
stdin = "none"

# An op that runs a repository's tests (set dir, then add it to the agent):
# [ops.test]
# description = "run the Go tests"
# argv = ["go", "test", "./..."]
# dir = "/home/me/src/project"
# scope = "execute"
# env = ["PATH", "HOME"]
# timeout = "20m"

[agents.%s]
ops = ["hello"]
`

func (c *PolicyInitCmd) Run(g *Globals) error {
	file, err := g.homePolicy("policy init")
	if err != nil {
		return err
	}
	if !bridge.ValidPeerName(c.Agent) {
		return &codeError{code: exitUsage, err: withHintf(fmt.Errorf("policy init: %q cannot be an agent name", c.Agent), "use the name the agent was paired under (`bridge keys show`)")}
	}
	text, ops := fmt.Sprintf(starterPolicy, c.Agent), []string{"hello"}
	if len(c.Preset) > 0 {
		if text, ops, err = c.presetPolicy(g); err != nil {
			return err
		}
	} else if c.Repo != "" {
		return &codeError{code: exitUsage, err: withHintf(errors.New("policy init: --repo goes with --preset"), "`bridge policy presets` lists them")}
	}
	if c.Print {
		g.printf("%s", text)
		return nil
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return withHintf(fmt.Errorf("policy init: %s exists; nothing was written", file),
			"edit it (`bridge policy check` checks it); to start again from this one, move it aside (mv %s %s.old) and run this again; --print prints the new one to merge by hand", file, file)
	} else if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"file": file, "agent": c.Agent, "ops": ops})
	}
	g.printf("wrote %s: agent %q may run %s\n", file, c.Agent, strings.Join(ops, ", "))
	if len(c.Preset) > 0 {
		if slices.ContainsFunc(c.Preset, func(p string) bool { return p != "git" }) {
			g.note("note: the test and build ops run code from the repository, which the agent writes: what it writes runs as this user (docs/POLICY.md, presets)")
		}
		g.note("check it here with `bridge policy check` (it says if a tool is missing); `bridge serve` takes edits live")
	} else {
		g.note("edit it to add the ops you want; `bridge serve` takes edits live")
	}
	return nil
}

// presetPolicy is the policy of the presets asked for, working in --repo.
func (c *PolicyInitCmd) presetPolicy(g *Globals) (string, []string, error) {
	if c.Repo == "" {
		return "", nil, &codeError{code: exitUsage, err: withHintf(errors.New("policy init --preset: which repository? --repo DIR is required"),
			"the ops work in that directory, and write-file and git-add are confined to it: `bridge policy init --preset %s --repo ~/src/app`", strings.Join(c.Preset, ","))}
	}
	repo, err := filepath.Abs(trust.ExpandTilde(c.Repo))
	if err != nil {
		return "", nil, err
	}
	fi, err := os.Stat(repo)
	if err != nil || !fi.IsDir() {
		return "", nil, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("policy init --preset: --repo %s is not a directory here", repo), "name the repository's directory on this host")}
	}
	if slices.Contains(c.Preset, "git") {
		if _, err := os.Stat(filepath.Join(repo, ".git")); err != nil {
			g.note("warning: %s has no .git: the git ops fail until it is a repository (`git init` there)", repo)
		}
	}
	text, ops, err := operator.RenderPolicyPresets(c.Preset, repo, c.Agent)
	if err != nil {
		return "", nil, &codeError{code: exitUsage, err: withHintf(fmt.Errorf("policy init: %w", err), "`bridge policy presets` lists them and what each op does")}
	}
	return text, ops, nil
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
	ex, err := operator.ExplainPolicy(file, c.Agent, c.Op, m)
	if err != nil {
		return policyError(opHint(file, c.Op, err))
	}
	if !g.JSON {
		g.printf("%s", ex.Text)
		return nil
	}
	// The catalog adds what the text says beyond the rendered command: the
	// op's input, what it does and its safety net.
	sum, err := operator.CheckPolicy(file)
	if err != nil {
		return policyError(err)
	}
	out, ok := explainJSON(ex, sum.Ops)
	if !ok {
		return withHintf(fmt.Errorf("policy explain: %s changed while it was read: op %q is gone", file, c.Op), "run it again")
	}
	return g.printJSON(out)
}

// opHint adds a "did you mean" to an explain that failed because the
// policy has no such op (a typo: `policy explain tst`).
func opHint(file, op string, err error) error {
	sum, lerr := operator.CheckPolicy(file)
	if lerr != nil {
		return err // the load error is err itself
	}
	names := make([]string, len(sum.Ops))
	for i := range sum.Ops {
		if sum.Ops[i].Name == op {
			return err
		}
		names[i] = sum.Ops[i].Name
	}
	if len(names) == 0 {
		return withHintf(err, "the policy defines no op: add an [ops.NAME] table (docs/POLICY.md)")
	}
	hint := fmt.Sprintf("the policy has no op %q; its ops: %s", op, strings.Join(names, ", "))
	if s := bridge.Suggest(op, names); s != "" {
		hint = fmt.Sprintf("did you mean %q? %s", s, hint)
	}
	return withHintf(err, "%s", hint)
}

// explainOutput is `bridge policy explain --json`: the rendered command
// and, from the catalog, the op's input, what it does and its safety net.
type explainOutput struct {
	Op          string    `json:"op"`
	Agent       string    `json:"agent"`
	Description string    `json:"description"`
	Argv        []string  `json:"argv"`
	Dir         string    `json:"dir"`
	EnvNames    []string  `json:"env_names"`
	Timeout     string    `json:"timeout"`
	MaxOutput   int64     `json:"max_output"`
	Stdin       string    `json:"stdin"` // none | optional | required, the default resolved
	StdinHint   string    `json:"stdin_hint"`
	MaxStdin    int64     `json:"max_stdin"`
	Scope       string    `json:"scope"`
	Risk        string    `json:"risk"`
	Approve     bool      `json:"approve"`
	Idempotent  bool      `json:"idempotent"`
	SafetyNet   safetyNet `json:"safety_net"`
	Text        string    `json:"text"`
}

// safetyNet: the ops that check this one first and take it back, and the
// ops this one checks or takes back ("" and [] when none).
type safetyNet struct {
	DryRun   string   `json:"dry_run"`
	Undo     string   `json:"undo"`
	DryRunOf []string `json:"dry_run_of"`
	Undoes   []string `json:"undoes"`
}

func explainJSON(ex *operator.Explanation, ops []bridge.OpInfo) (*explainOutput, bool) {
	var info *bridge.OpInfo
	net := safetyNet{DryRunOf: []string{}, Undoes: []string{}}
	for i := range ops {
		o := &ops[i]
		if o.Name == ex.Op {
			info = o
		}
		if o.DryRun == ex.Op {
			net.DryRunOf = append(net.DryRunOf, o.Name)
		}
		if o.Undo == ex.Op {
			net.Undoes = append(net.Undoes, o.Name)
		}
	}
	if info == nil {
		return nil, false
	}
	net.DryRun, net.Undo = info.DryRun, info.Undo
	env := ex.Env
	if env == nil {
		env = []string{}
	}
	argv := ex.Argv
	if argv == nil {
		argv = []string{}
	}
	return &explainOutput{
		Op: ex.Op, Agent: ex.Agent, Description: info.Description, Argv: argv, Dir: ex.Dir, EnvNames: env,
		Timeout: info.Timeout, MaxOutput: info.MaxOutput,
		Stdin: info.StdinMode(), StdinHint: info.StdinHint, MaxStdin: info.MaxStdin,
		Scope: info.Scope, Risk: info.Risk, Approve: info.Approve, Idempotent: info.Idempotent,
		SafetyNet: net, Text: ex.Text,
	}, true
}
