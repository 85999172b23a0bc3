package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/operator"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Setting up: init, keys and pair.

// InitCmd: bridge init host|agent --folder F.
type InitCmd struct {
	Role       string `arg:"" enum:"host,agent" help:"host or agent."`
	Folder     string `required:"" placeholder:"DIR" help:"The synced folder."`
	Name       string `placeholder:"NAME" help:"A name for this party (default: the host name)."`
	FromSecret bool   `name:"from-secret" help:"Agent: rebuild this agent's home from its secret ('bridge keys export-secret') in $BRIDGE_AGENT_KEY or the file --secret-file; no pairing."`
	SecretFile string `name:"secret-file" env:"BRIDGE_AGENT_KEY_FILE" placeholder:"FILE" help:"With --from-secret: read the secret from FILE (- for standard input)."`
}

func (c *InitCmd) Run(g *Globals) error {
	var h *trust.Home
	var err error
	if c.FromSecret {
		if c.Role != "agent" {
			return &codeError{code: exitUsage, err: errors.New("--from-secret rebuilds an agent's home; a host's keys never leave it")}
		}
		secret, serr := agentSecret(g, c.SecretFile)
		if serr != nil {
			return serr
		}
		if secret == "" {
			return &codeError{code: exitUsage, err: withHintf(errors.New("--from-secret: no secret given"),
				"set BRIDGE_AGENT_KEY to the line `bridge keys export-secret` printed, or pass --secret-file FILE")}
		}
		h, err = trust.RestoreAgentHome(g.Home, c.Folder, secret)
	} else {
		h, err = trust.InitHome(g.Home, c.Role, c.Name, c.Folder)
	}
	if err != nil {
		return err
	}
	if c.FromSecret {
		g.noteNoNudge(h)
		peers, _ := h.Peers()
		var names []string
		for _, p := range peers {
			names = append(names, p.Name)
		}
		if g.JSON {
			return g.printJSON(map[string]any{"home": h.Dir, "role": h.Config.Role, "name": h.Config.Name, "id": h.Config.ID,
				"folder": h.Config.Folder, "fingerprint": h.Bundle().Fingerprint(), "hosts": append([]string{}, names...)})
		}
		g.printf("restored agent %q in %s from its secret\nid          %s\nfingerprint %s\ntrusts      %s\n",
			h.Config.Name, h.Dir, h.Config.ID, h.Bundle().Fingerprint(), strings.Join(names, ", "))
		return nil
	}
	if g.JSON {
		return g.printJSON(map[string]any{"home": h.Dir, "role": h.Config.Role, "name": h.Config.Name, "id": h.Config.ID,
			"folder": h.Config.Folder, "fingerprint": h.Bundle().Fingerprint(), "bundle": h.BundleText()})
	}
	g.printf("initialised %s %q in %s\n", c.Role, h.Config.Name, h.Dir)
	g.printf("id          %s\nfingerprint %s\n\n", h.Config.ID, h.Bundle().Fingerprint())
	g.printf("The other side pairs with it from the folder (`bridge pair`, comparing this fingerprint); or give it this line (`bridge keys trust LINE`):\n%s\n", h.BundleText())
	if c.Role == "host" {
		g.printf("\nNext: `bridge policy init --agent NAME` writes a starter policy (%s; or --preset git,go --repo DIR for a repository); run `bridge serve`;\n", h.Path(trust.PolicyName))
		g.printf("once the agent has paired, pair it here: `bridge pair --wait --fingerprint <the agent's fingerprint>`.\n")
	} else {
		g.printf("\nNext: `bridge pair --fingerprint <the host's fingerprint>`; then on the host, `bridge pair --wait --fingerprint %s`.\n", h.Bundle().Fingerprint())
		// The agent is usually an AI: tell the human how to tell it.
		g.printf("Once the host serves, tell your AI agent how to use it, from the host's catalog:\n")
		g.printf("  bridge guide --format agents-md --out AGENTS.md    (a section of AGENTS.md, replaced on each run)\n")
		g.printf("  bridge guide --skill .claude/skills/syncbridge     (a Claude Code skill)\n")
		g.printf("  bridge guide                                       (the same text on standard output)\n")
		g.printf("An MCP client can use `bridge mcp` instead.\n")
	}
	return nil
}

// KeysCmd groups key commands.
type KeysCmd struct {
	Show         KeysShowCmd         `cmd:"" help:"Show this party's keys and the trusted peers."`
	Export       KeysExportCmd       `cmd:"" help:"Print this party's public bundle as one line."`
	ExportSecret KeysExportSecretCmd `cmd:"" name:"export-secret" help:"Agent: print the secret a fresh sandbox rebuilds this agent's home from (keep it secret)."`
	Trust        KeysTrustCmd        `cmd:"" help:"Trust a peer's bundle."`
	Rotate       KeysRotateCmd       `cmd:"" help:"Replace this party's keys; peers follow by themselves."`
	Revoke       KeysRevokeCmd       `cmd:"" help:"Revoke a peer's key (local, at once)."`
	Remove       KeysRemoveCmd       `cmd:"" help:"Forget a trusted peer; its revoked keys stay revoked for ever."`
}

type KeysShowCmd struct{}

// keyView is one key generation as `keys show` reports it.
type keyView struct {
	Seq        uint64 `json:"seq"`
	SignKid    string `json:"sign_kid"`
	BoxKid     string `json:"box_kid"`
	State      string `json:"state"` // current | overlap | expired | revoked | kept (own, retired)
	ValidUntil int64  `json:"valid_until,omitempty"`
	KeepUntil  int64  `json:"keep_until,omitempty"`
}

type peerView struct {
	Name        string    `json:"name"`
	Role        string    `json:"role"`
	ID          string    `json:"id"`
	Fingerprint string    `json:"fingerprint"`
	Keys        []keyView `json:"keys"`
}

func (c *KeysShowCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	peers, err := h.Peers()
	if err != nil {
		return err
	}
	own, err := h.OwnKeys()
	if err != nil {
		return err
	}
	b := h.Bundle()
	var mine []keyView
	for _, k := range own {
		v := keyView{Seq: k.Seq, SignKid: k.Identity.SignKid(), BoxKid: k.Identity.BoxKid(), State: "current"}
		if k.ValidUntil != 0 {
			v.State, v.ValidUntil, v.KeepUntil = "retired", k.ValidUntil, k.KeepUntil
		}
		mine = append(mine, v)
	}
	now := time.Now()
	var views []peerView
	for _, p := range peers {
		pv := peerView{Name: p.Name, Role: p.Role, ID: p.ID}
		if _, cb, err := h.Peer(p.ID); err == nil {
			pv.Fingerprint = cb.Fingerprint()
		}
		for i := len(p.Keys) - 1; i >= 0; i-- {
			k := p.Keys[i]
			v := keyView{Seq: k.Seq, SignKid: k.SignKid(), BoxKid: k.BoxKid(), ValidUntil: k.ValidUntil}
			switch p.State(k, now) {
			case trust.KeyRevoked:
				v.State = "revoked"
			case trust.KeyExpired:
				v.State = "expired"
			default:
				v.State = "current"
				if k.ValidUntil != 0 {
					v.State = "overlap"
				}
			}
			pv.Keys = append(pv.Keys, v)
		}
		views = append(views, pv)
	}
	if g.JSON {
		return g.printJSON(map[string]any{"role": h.Config.Role, "name": h.Config.Name, "id": h.Config.ID, "seq": b.Seq,
			"fingerprint": b.Fingerprint(), "keys": mine, "peers": views})
	}
	g.printf("%s %q\n  id          %s\n  fingerprint %s\n", h.Config.Role, h.Config.Name, h.Config.ID, b.Fingerprint())
	printKeys := func(keys []keyView) {
		for _, k := range keys {
			g.printf("  key %-3d %-8s sign %s  box %s", k.Seq, k.State, k.SignKid, k.BoxKid)
			if k.ValidUntil != 0 {
				g.printf("  valid until %s", time.Unix(k.ValidUntil, 0).Format(time.RFC3339))
			}
			g.printf("\n")
		}
	}
	printKeys(mine)
	for _, pv := range views {
		fp := pv.Fingerprint
		if fp == "" {
			fp = "none: its current key is revoked (pair with it again once it has new keys)"
		}
		g.printf("trusted %s %q\n  id          %s\n  fingerprint %s\n", pv.Role, pv.Name, pv.ID, fp)
		printKeys(pv.Keys)
	}
	return nil
}

// KeysRotateCmd replaces this party's keys.
type KeysRotateCmd struct {
	Overlap time.Duration `default:"168h" help:"How long peers keep accepting the old key."`
}

func (c *KeysRotateCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	info, err := h.Rotate(c.Overlap)
	if err != nil {
		return err
	}
	g.audit(h, host.AuditEvent{Event: "rotate", Detail: fmt.Sprintf("to key %d (sign %s) from %s, valid for peers until %s",
		info.Seq, info.NewSignKid, info.OldSignKid, time.Unix(info.OldValidUntil, 0).UTC().Format(time.RFC3339))})
	if g.JSON {
		return g.printJSON(info)
	}
	g.printf("rotated to key %d (sign %s)\nfingerprint %s\n", info.Seq, info.NewSignKid, info.Fingerprint)
	g.printf("the old key stays valid for peers until %s; they pick up the rotation from the folder by themselves\n",
		time.Unix(info.OldValidUntil, 0).Format(time.RFC3339))
	return nil
}

// KeysRevokeCmd revokes a peer's key.
type KeysRevokeCmd struct {
	Kid string `arg:"" help:"The signing or box key id (see 'bridge keys show')."`
}

func (c *KeysRevokeCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	if !bcrypto.ValidKid(c.Kid) {
		return &codeError{code: exitUsage, err: withHintf(fmt.Errorf("keys revoke: %q is not a key id", c.Kid), "`bridge keys show` lists the key ids of every peer")}
	}
	p, err := h.Revoke(c.Kid)
	if err != nil {
		return err
	}
	g.audit(h, host.AuditEvent{Event: "revoke", Agent: p.ID, Detail: fmt.Sprintf("key %s of %s %q", c.Kid, p.Role, p.Name)})
	if g.JSON {
		return g.printJSON(map[string]any{"peer": p.Name, "id": p.ID, "revoked": c.Kid})
	}
	g.printf("revoked %s of %s %q: nothing signed by it is accepted from now on\n", c.Kid, p.Role, p.Name)
	if _, ok := p.Current(); !ok {
		g.note("hint: that was the current key of %s %q: nothing of it is accepted now. To let it back with new keys: "+
			"`bridge keys rotate` on its side, then here `bridge keys remove %s` and `bridge pair --fingerprint <its new fingerprint>`", p.Role, p.Name, p.Name)
	}
	return nil
}

type KeysRemoveCmd struct {
	Peer string `arg:"" help:"The peer's local name or id (see 'bridge keys show')."`
}

func (c *KeysRemoveCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	p, err := h.Remove(c.Peer)
	if err != nil {
		return err
	}
	g.audit(h, host.AuditEvent{Event: "remove", Agent: p.ID, Detail: fmt.Sprintf("%s %q", p.Role, p.Name)})
	if g.JSON {
		return g.printJSON(map[string]any{"peer": p.Name, "id": p.ID, "kept_revoked": append([]string{}, p.Revoked...)})
	}
	g.printf("removed %s %q (%s)\n", p.Role, p.Name, p.ID)
	if len(p.Revoked) > 0 {
		g.printf("its %d revoked key id(s) stay revoked in %s: they can never be trusted again\n", len(p.Revoked), h.Path(trust.RevokedName))
	}
	if _, ok := p.Current(); ok {
		g.note("hint: its current key was not revoked, so it can be paired again; `bridge keys revoke` it first if it was stolen")
	}
	return nil
}

// PairCmd trusts a peer whose bundle is in the folder, after the user
// confirmed its fingerprint.
type PairCmd struct {
	Peer        string      `placeholder:"ID" help:"The peer's id, when several are in the folder."`
	Name        string      `placeholder:"NAME" help:"Local name for the peer (host: the [agents.NAME] of the policy)."`
	Fingerprint string      `placeholder:"FP" help:"The fingerprint the other side shows; without it, bridge asks on the terminal."`
	Wait        optDuration `help:"Wait for the other side's bundle to arrive in the folder: 2 minutes, or --wait=DUR (the other side's init or pair has just run, and the sync client has yet to bring it)."`
}

// optDuration is a flag with an optional duration: alone it means the
// default, --flag=DUR that duration.
type optDuration struct {
	set bool
	d   time.Duration
}

const defaultPairWait = 2 * time.Minute

func (o *optDuration) Decode(ctx *kong.DecodeContext) error {
	o.set, o.d = true, defaultPairWait
	if ctx.Scan.Peek().Type != kong.FlagValueToken {
		return nil
	}
	v := fmt.Sprint(ctx.Scan.Pop().Value)
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("--wait=%s: want a duration above 0, such as 30s or 5m", v)
	}
	o.d = d
	return nil
}

func (o *optDuration) IsBool() bool { return true }

func (c *PairCmd) Run(g *Globals) error {
	if err := checkEmpty(g.args, "--fingerprint", "--name", "--peer"); err != nil {
		return err
	}
	h, err := g.openHome()
	if err != nil {
		return err
	}
	pickNew := func() ([]trust.Candidate, error) {
		cands, err := h.Candidates()
		if err != nil {
			return nil, err
		}
		var pick []trust.Candidate
		for _, cd := range cands {
			if (c.Peer == "" && (!cd.Trusted || cd.Revoked)) || cd.ID == c.Peer {
				pick = append(pick, cd)
			}
		}
		return pick, nil
	}
	pick, err := pickNew()
	if err != nil {
		return err
	}
	// What the wait waits for: a new bundle (or the --peer named), and with
	// --fingerprint one that shows it (a stale or planted bundle does not
	// end the wait early).
	want := compactFingerprint(c.Fingerprint)
	waiting := func() bool {
		if len(pick) == 0 {
			return true
		}
		if want == "" {
			return false
		}
		for _, cd := range pick {
			if compactFingerprint(cd.Fingerprint) == want {
				return false
			}
		}
		return true
	}
	// A fingerprint of a peer trusted already: nothing to wait for (a
	// script re-runs `pair --wait --fingerprint X`; without --wait it says
	// "already paired").
	trustedFP := false
	if want != "" && c.Peer == "" {
		if peers, err := h.Peers(); err == nil {
			for _, p := range peers {
				if _, b, err := h.Peer(p.ID); err == nil && compactFingerprint(b.Fingerprint()) == want {
					trustedFP = true
				}
			}
		}
		if trustedFP && !slices.ContainsFunc(pick, func(cd trust.Candidate) bool { return compactFingerprint(cd.Fingerprint) == want }) {
			pick = nil // the peer named is trusted: other bundles in the folder are not the question
		}
	}
	if c.Wait.set && !trustedFP && waiting() {
		// A second's poll of a few files: the sync client's pace anyway.
		ctx, stop := signalContext()
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, c.Wait.d)
		defer cancel()
		g.note("waiting up to %s for the other side's bundle to arrive in the folder (Ctrl-C stops)", c.Wait.d)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for waiting() && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-t.C:
				if pick, err = pickNew(); err != nil {
					return err
				}
			}
		}
		if len(pick) == 0 {
			if errors.Is(ctx.Err(), context.Canceled) {
				return &codeError{code: exitInterrupt, err: errors.New("pair: interrupted while waiting for the other side's bundle")}
			}
			other := "did the host run `bridge init host` with this very folder?"
			if h.Config.Role == "host" {
				other = "did the agent run `bridge pair` (or `bridge keys trust`) with this very folder? It publishes its bundle then"
			}
			return &codeError{code: exitWaitTime, err: withHintf(fmt.Errorf("pair: no new peer bundle arrived in the folder within %s", c.Wait.d),
				"%s `bridge doctor` on both sides checks the folder and its sync", other)}
		}
	}
	if want := strings.ToLower(strings.TrimSpace(c.Fingerprint)); len(pick) > 1 && want != "" {
		// The fingerprint the other side shows names one of them.
		var byFP []trust.Candidate
		for _, cd := range pick {
			if cd.Fingerprint == want {
				byFP = append(byFP, cd)
			}
		}
		if len(byFP) == 1 {
			pick = byFP
		}
	}
	// Whom this home trusts, from its own records: whether it is already
	// paired does not depend on the bundles in the folder, which a folder
	// writer may have replaced or garbled.
	peers, err := h.Peers()
	if err != nil {
		return err
	}
	switch {
	case len(pick) == 0 && c.Peer == "" && len(peers) > 0:
		// With the fingerprints of the keys this home holds for them (as
		// `keys show`): never the bundle in the folder, or a rotation this
		// home has not followed yet.
		type trusted struct{ Role, Name, ID, Fingerprint string }
		var names []string
		var match *trusted
		for _, p := range peers {
			names = append(names, fmt.Sprintf("%s %q", p.Role, p.Name))
			if _, b, err := h.Peer(p.ID); err == nil && c.Fingerprint != "" && compactFingerprint(b.Fingerprint()) == compactFingerprint(c.Fingerprint) {
				match = &trusted{p.Role, p.Name, p.ID, b.Fingerprint()}
			}
		}
		if c.Fingerprint != "" && match == nil {
			// A script re-running `pair --fingerprint EXPECTED` to make
			// sure whom it trusts must not hear "already paired" of
			// another peer.
			code, msg := exitRejected, "pair: no peer this home trusts shows that fingerprint"
			if n, want := len(compactFingerprint(c.Fingerprint)), len(compactFingerprint(h.Bundle().Fingerprint())); n != want {
				code, msg = exitUsage, fmt.Sprintf("pair: the fingerprint given has %d characters, a fingerprint has %d", n, want)
			}
			return &codeError{code: code, err: withHintf(errors.New(msg),
				"already paired with %s, and no other peer's bundle is in the folder; `bridge keys show` lists the trusted peers and their fingerprints", strings.Join(names, ", "))}
		}
		if g.JSON {
			out := map[string]any{"already_paired": true, "paired": names}
			if match != nil {
				out = map[string]any{"already_paired": true, "name": match.Name, "role": match.Role, "id": match.ID, "fingerprint": match.Fingerprint}
			}
			return g.printJSON(out)
		}
		if match != nil {
			g.printf("already paired with %s %q (id %s)\n", match.Role, match.Name, match.ID)
			return nil
		}
		g.printf("already paired with %s; no other peer's bundle is in the folder\n", strings.Join(names, ", "))
		return nil
	case len(pick) == 0:
		return withHintf(errors.New("pair: no new peer bundle in the folder"),
			"the other side publishes its bundle with `bridge init host` (host) or `bridge pair`/`bridge keys trust` (agent); if it just did, the sync client has yet to bring it: `bridge pair --wait` waits for it (or pass --peer ID)")
	case len(pick) > 1:
		for _, cd := range pick {
			g.printf("%s %q  id %s  fingerprint %s\n", cd.Role, cd.Name, cd.ID, cd.Fingerprint)
		}
		return &codeError{code: exitUsage, err: withHintf(errors.New("pair: several peers are in the folder"), "choose one with --peer ID, or pass the --fingerprint it shows")}
	}
	cd := pick[0]
	g.note("%s %q (id %s) shows fingerprint %s", cd.Role, cd.Name, cd.ID, cd.Fingerprint)
	fp := c.Fingerprint
	if fp == "" {
		if !isTerminal(g.stdin) {
			return &codeError{code: exitUsage, err: withHintf(errors.New("pair: no --fingerprint and no terminal to ask on"),
				"run `bridge keys export` on the other side and pass what it shows: --fingerprint %s", "xxxx-xxxx-xxxx-xxxx-xxxx-xxxx")}
		}
		fmt.Fprintf(g.stderr, "Type the fingerprint the other side shows (bridge keys export): ")
		line, _ := bufio.NewReader(g.stdin).ReadString('\n')
		fp = strings.TrimSpace(line)
		if fp == "" { // nothing typed: /dev/null, or an end of input
			fmt.Fprintln(g.stderr)
			return &codeError{code: exitUsage, err: withHintf(errors.New("pair: no fingerprint given"),
				"run `bridge keys export` on the other side and pass what it shows: --fingerprint %s", "xxxx-xxxx-xxxx-xxxx-xxxx-xxxx")}
		}
	}
	given := compactFingerprint(fp)
	if want := compactFingerprint(cd.Fingerprint); len(given) != len(want) {
		// Not a mismatch of keys but of formats: a typo, a cut-off copy,
		// or a bridge of another version (fingerprints were 16
		// characters before they became 24).
		return &codeError{code: exitUsage, err: withHintf(fmt.Errorf("pair: the fingerprint given has %d characters, a fingerprint has %d (%s)", len(given), len(want), cd.Fingerprint),
			"pass the fingerprint `bridge keys export` shows on the other side (its \"fingerprint\" line, 6 groups of 4, not the bundle line); if it has 4 groups, that side runs an older bridge: upgrade it")}
	}
	if given != compactFingerprint(cd.Fingerprint) {
		if cd.Seq > 0 {
			// A fingerprint covers the keys: one noted before a rotation
			// (the one `init` printed) no longer matches. But the
			// generation is the bundle's own claim, which a folder writer
			// makes as easily: said as a possibility, never as the cause,
			// and the fingerprint to trust comes from the host, not this
			// message.
			return &codeError{code: exitRejected, err: withHintf(fmt.Errorf("pair: fingerprint mismatch: the bundle in the folder shows another fingerprint, and says it is key generation %d of its %s: "+
				"if that %s has rotated its keys since you noted its fingerprint (`bridge keys rotate`), a fingerprint from before no longer matches; or someone else wrote this bundle", cd.Seq, cd.Role, cd.Role),
				"run `bridge keys export` on that %s now and compare what it shows there with the bundle's (`bridge pair` shows it); until they match, trust nothing", cd.Role)}
		}
		return &codeError{code: exitRejected, err: withHintf(fmt.Errorf("pair: fingerprint mismatch: the bundle in the folder shows %s", cd.Fingerprint),
			"do not trust it: someone else may have written it; check you are comparing with the right machine (`bridge keys export` there shows its fingerprint now)")}
	}
	p, err := h.Trust(cd.Bundle, c.Name)
	if err != nil {
		return err
	}
	g.audit(h, host.AuditEvent{Event: "pair", Agent: p.ID, Detail: fmt.Sprintf("%s %q, fingerprint %s", p.Role, p.Name, cd.Fingerprint)})
	if g.JSON {
		return g.printJSON(map[string]any{"name": p.Name, "role": p.Role, "id": p.ID, "fingerprint": cd.Fingerprint})
	}
	g.printf("paired with %s %q (id %s)\n", p.Role, p.Name, p.ID)
	g.notePolicyGrantsNothing(h, p.Role, p.Name)
	return nil
}

// notePolicyGrantsNothing says, on a host that just trusted an agent, when
// its policy lets that agent run no op (the agent would learn it only from
// an empty catalog).
func (g *Globals) notePolicyGrantsNothing(h *trust.Home, role, name string) {
	if h.Config.Role != "host" || role != "agent" {
		return
	}
	sum, err := operator.CheckPolicy(h.Path(trust.PolicyName))
	if err != nil {
		return // no policy yet, or one that does not load: policy check says it
	}
	if len(sum.Agents[name]) == 0 {
		g.note("warning: the policy grants agent %q no op: add [agents.%s] with its ops to %s (`bridge policy presets` for a start)", name, name, h.Path(trust.PolicyName))
	}
}

type KeysExportCmd struct{}

func (c *KeysExportCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"bundle": h.BundleText(), "fingerprint": h.Bundle().Fingerprint(), "id": h.Config.ID})
	}
	g.printf("%s\n", h.BundleText())
	g.note("fingerprint %s (compare it with what the other side shows)", h.Bundle().Fingerprint())
	return nil
}

type KeysTrustCmd struct {
	Bundle string `arg:"" help:"The line printed by 'bridge keys export' on the other side, or - to read it from stdin."`
	Name   string `placeholder:"NAME" help:"Local name for the peer (host: the [agents.NAME] of the policy)."`
}

func (c *KeysTrustCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	text := c.Bundle
	if text == "-" {
		b, err := io.ReadAll(io.LimitReader(g.stdin, 64<<10))
		if err != nil {
			return err
		}
		text = string(b)
	}
	var known bool
	if nb, _, err := bcrypto.ParseBundleText(text); err == nil {
		_, perr := h.PeerByID(nb.ID)
		known = perr == nil
	}
	p, err := h.Trust(text, c.Name)
	if err != nil {
		return err
	}
	b, _, _ := bcrypto.ParseBundleText(p.Bundle)
	if !known { // trusting a peer trusted already changes nothing: no line
		g.audit(h, host.AuditEvent{Event: "trust", Agent: p.ID, Detail: fmt.Sprintf("%s %q, fingerprint %s", p.Role, p.Name, b.Fingerprint())})
	}
	if g.JSON {
		return g.printJSON(map[string]any{"name": p.Name, "role": p.Role, "id": p.ID, "fingerprint": b.Fingerprint()})
	}
	g.printf("trusted %s %q (id %s)\nfingerprint %s — check it matches what the other side shows\n", p.Role, p.Name, p.ID, b.Fingerprint())
	g.notePolicyGrantsNothing(h, p.Role, p.Name)
	return nil
}

// compactFingerprint is a fingerprint as typed, without case, spaces or
// dashes: the groups only help the eye.
func compactFingerprint(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '-' || r == ' ' || r == '\t':
			return -1
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return r
	}, s)
}

// KeysExportSecretCmd prints the agent secret (SPEC §2.8): the private keys,
// so it goes to standard output only, never to a terminal unasked.
type KeysExportSecretCmd struct{}

func (c *KeysExportSecretCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	secret, err := h.ExportAgentSecret()
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"secret": secret, "id": h.Config.ID})
	}
	g.printf("%s\n", secret)
	g.note("warning: whoever holds this line and the folder is this agent; store it as a secret (docs/KEYS.md), and export it again after `bridge keys rotate` or a new `bridge pair`")
	return nil
}

// agentSecret reads the agent secret from file (- for standard input), or
// from $BRIDGE_AGENT_KEY; "" if neither holds one.
func agentSecret(g *Globals, file string) (string, error) {
	if file == "" {
		return os.Getenv("BRIDGE_AGENT_KEY"), nil
	}
	var r io.Reader = g.stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("read agent secret: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, 16<<10))
	if err != nil {
		return "", fmt.Errorf("read agent secret: %w", err)
	}
	return string(b), nil
}

// audit records an operator's action on a host's trust in its audit log (on
// an agent's home, nothing). A failure to record is said, not fatal: the
// action is done.
func (g *Globals) audit(h *trust.Home, e host.AuditEvent) {
	queued, err := host.AuditAction(h, e)
	switch {
	case err != nil:
		g.note("warning: the audit log did not record %s: %v", e.Event, err)
	case queued:
		g.note("note: the running bridge serve records this in the audit log (within a second)")
	}
}
