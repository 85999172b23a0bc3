package main

import (
	"github.com/syncbridge/bridge/bridge/syncthing"
	"strings"
)

// SyncthingCmd groups the Syncthing helpers.
type SyncthingCmd struct {
	Setup SyncthingSetupCmd `cmd:"" help:"Find the local Syncthing and its folder ids, check a nudge, and save the nudge settings in the home."`
}

// SyncthingSetupCmd does by itself what docs/OPERATIONS.md describes by hand.
type SyncthingSetupCmd struct {
	API          string `name:"api" placeholder:"URL" help:"Syncthing's GUI/REST address (default: from its config.xml)."`
	Key          string `name:"key" placeholder:"KEY" help:"Syncthing's API key (default: from its config.xml)."`
	Config       string `name:"config" placeholder:"FILE" help:"Syncthing's config.xml (default: where Syncthing keeps it)."`
	ShareResults bool   `name:"share-results" help:"Share each results directory as a Syncthing folder of its own (run it on both sides): a result goes out at once."`
	DryRun       bool   `name:"dry-run" help:"Say what would be done; change nothing in Syncthing or the home."`
}

func (c *SyncthingSetupCmd) Run(g *Globals) error {
	h, err := g.openHomeOnly()
	if err != nil {
		return err
	}
	rep, err := syncthing.Setup(h, syncthing.SetupOptions{API: c.API, Key: c.Key, ConfigXML: c.Config, ShareResults: c.ShareResults, DryRun: c.DryRun})
	if err != nil {
		return err
	}
	if g.JSON {
		return g.printJSON(rep)
	}
	from := ""
	if rep.ConfigXML != "" {
		from = " (API key from " + rep.ConfigXML + ")"
	}
	g.printf("Syncthing at %s%s\n", rep.API, from)
	g.printf("bridge folder: Syncthing folder %q\n", rep.Folder)
	for _, r := range rep.Results {
		rel, id, _ := strings.Cut(r, "=")
		g.printf("folder inside it: %s = %q\n", rel, id)
	}
	would := ""
	if rep.DryRun {
		would = "would be "
	}
	for _, id := range rep.Created {
		g.printf("%sadded: Syncthing folder %q, shared with the bridge folder's devices\n", would, id)
	}
	for _, line := range rep.IgnoreLine {
		g.printf("%sadded to the bridge folder's ignore rules: %s\n", would, line)
	}
	if rep.DryRun {
		g.printf("nudge settings (not saved): --syncthing-api %s --syncthing-folder %s\n", rep.API, rep.Folders)
		return nil
	}
	g.printf("saved the nudge settings to %s: every bridge command now asks Syncthing to send what it writes at once\n", rep.SavedTo)
	if h.Config.Role == "host" {
		g.note("restart a running `bridge serve` (or its service) for it to nudge too")
	}
	if len(rep.Created) > 0 {
		g.note("run `bridge syncthing setup --share-results` on the other side too: the two folders meet under the same id")
	}
	return nil
}
