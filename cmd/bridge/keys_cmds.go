package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Setting up: init, keys and pair.

// InitCmd: bridge init host|agent --folder F.
type InitCmd struct {
	Role   string `arg:"" enum:"host,agent" help:"host or agent."`
	Folder string `required:"" placeholder:"DIR" help:"The synced folder."`
	Name   string `placeholder:"NAME" help:"A name for this party (default: the host name)."`
}

func (c *InitCmd) Run(g *Globals) error {
	h, err := bridge.InitHome(g.Home, c.Role, c.Name, c.Folder)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"home": h.Dir, "role": h.Config.Role, "name": h.Config.Name, "id": h.Config.ID,
			"folder": h.Config.Folder, "fingerprint": h.Bundle().Fingerprint(), "bundle": h.BundleText()})
	}
	g.printf("initialised %s %q in %s\n", c.Role, h.Config.Name, h.Dir)
	g.printf("id          %s\nfingerprint %s\n\n", h.Config.ID, h.Bundle().Fingerprint())
	g.printf("Give this line to the other side (`bridge keys trust LINE`):\n%s\n", h.BundleText())
	if c.Role == "host" {
		g.printf("\nNext: write %s, then run `bridge serve`.\n", h.Path(bridge.PolicyName))
	} else {
		// The agent is usually an AI: tell the human how to tell it.
		g.printf("\nOnce the host serves, tell your AI agent how to use it, from the host's catalog:\n")
		g.printf("  bridge guide --format agents-md --out AGENTS.md    (a section of AGENTS.md, replaced on each run)\n")
		g.printf("  bridge guide --skill .claude/skills/syncbridge     (a Claude Code skill)\n")
		g.printf("  bridge guide                                       (the same text on standard output)\n")
		g.printf("An MCP client can use `bridge mcp` instead.\n")
	}
	return nil
}

// KeysCmd groups key commands.
type KeysCmd struct {
	Show   KeysShowCmd   `cmd:"" help:"Show this party's keys and the trusted peers."`
	Export KeysExportCmd `cmd:"" help:"Print this party's public bundle as one line."`
	Trust  KeysTrustCmd  `cmd:"" help:"Trust a peer's bundle."`
	Rotate KeysRotateCmd `cmd:"" help:"Replace this party's keys; peers follow by themselves."`
	Revoke KeysRevokeCmd `cmd:"" help:"Revoke a peer's key (local, at once)."`
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
			case bridge.KeyRevoked:
				v.State = "revoked"
			case bridge.KeyExpired:
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
	if g.JSON {
		return g.printJSON(map[string]any{"peer": p.Name, "id": p.ID, "revoked": c.Kid})
	}
	g.printf("revoked %s of %s %q: nothing signed by it is accepted from now on\n", c.Kid, p.Role, p.Name)
	if _, ok := p.Current(); !ok {
		g.note("hint: that was the current key of %s %q; pair with it again when it has new keys", p.Role, p.Name)
	}
	return nil
}

// PairCmd trusts a peer whose bundle is in the folder, after the user
// confirmed its fingerprint.
type PairCmd struct {
	Peer        string `placeholder:"ID" help:"The peer's id, when several are in the folder."`
	Name        string `placeholder:"NAME" help:"Local name for the peer (host: the [agents.NAME] of the policy)."`
	Fingerprint string `placeholder:"FP" help:"The fingerprint the other side shows; without it, bridge asks on the terminal."`
}

func (c *PairCmd) Run(g *Globals) error {
	h, err := g.openHome()
	if err != nil {
		return err
	}
	cands, err := h.Candidates()
	if err != nil {
		return err
	}
	var pick []bridge.Candidate
	for _, cd := range cands {
		if (c.Peer == "" && !cd.Trusted) || cd.ID == c.Peer {
			pick = append(pick, cd)
		}
	}
	if want := strings.ToLower(strings.TrimSpace(c.Fingerprint)); len(pick) > 1 && want != "" {
		// The fingerprint the other side shows names one of them.
		var byFP []bridge.Candidate
		for _, cd := range pick {
			if cd.Fingerprint == want {
				byFP = append(byFP, cd)
			}
		}
		if len(byFP) == 1 {
			pick = byFP
		}
	}
	switch {
	case len(pick) == 0:
		return withHintf(errors.New("pair: no new peer bundle in the folder"),
			"the other side publishes its bundle with `bridge init host` (host) or `bridge keys trust` (agent); wait for the sync, or pass --peer ID")
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
	}
	given := compactFingerprint(fp)
	if want := compactFingerprint(cd.Fingerprint); len(given) != len(want) {
		// Not a mismatch of keys but of formats: a typo, a cut-off copy,
		// or a bridge of another version (fingerprints were 16
		// characters before they became 24).
		return &codeError{code: exitUsage, err: withHintf(fmt.Errorf("pair: the fingerprint given has %d characters, a fingerprint has %d (%s)", len(given), len(want), cd.Fingerprint),
			"copy the whole line `bridge keys export` prints on the other side; if it has 4 groups, that side runs an older bridge: upgrade it")}
	}
	if given != compactFingerprint(cd.Fingerprint) {
		return &codeError{code: exitRejected, err: withHintf(fmt.Errorf("pair: fingerprint mismatch: the bundle in the folder shows %s", cd.Fingerprint),
			"do not trust it: someone else may have written it; check you are comparing with the right machine")}
	}
	p, err := h.Trust(cd.Bundle, c.Name)
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(map[string]any{"name": p.Name, "role": p.Role, "id": p.ID, "fingerprint": cd.Fingerprint})
	}
	g.printf("paired with %s %q (id %s)\n", p.Role, p.Name, p.ID)
	return nil
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
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
	p, err := h.Trust(text, c.Name)
	if err != nil {
		return err
	}
	b, _, _ := bcrypto.ParseBundleText(p.Bundle)
	if g.JSON {
		return g.printJSON(map[string]any{"name": p.Name, "role": p.Role, "id": p.ID, "fingerprint": b.Fingerprint()})
	}
	g.printf("trusted %s %q (id %s)\nfingerprint %s — check it matches what the other side shows\n", p.Role, p.Name, p.ID, b.Fingerprint())
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
