package main

import (
	"log/slog"
	"os"
	"path/filepath"

	"github.com/syncbridge/bridge/bridge/syncthing"
	"github.com/syncbridge/bridge/bridge/trust"
)

// SyncthingFlags turn on the Syncthing nudge: after publishing a file, ask
// the local Syncthing to scan it at once instead of after its watcher's
// delay. Each setting comes from its flag, else its environment variable,
// else the home's syncthing.json (`bridge syncthing setup`); off when no
// API URL is set anywhere.
type SyncthingFlags struct {
	SyncthingAPI    string `name:"syncthing-api" env:"BRIDGE_SYNCTHING_API" placeholder:"URL" help:"Ask this local Syncthing (e.g. http://127.0.0.1:8384) to scan each file bridge publishes, so it syncs at once (default: the home's syncthing.json, from 'bridge syncthing setup')."`
	SyncthingKey    string `name:"syncthing-key" env:"BRIDGE_SYNCTHING_KEY" placeholder:"KEY" help:"The Syncthing API key (Settings > GUI)."`
	SyncthingFolder string `name:"syncthing-folder" env:"BRIDGE_SYNCTHING_FOLDER" placeholder:"ID[,PATH=ID]" help:"The Syncthing folder id of the bridge folder (whose root it must be); PATH=ID adds a folder rooted at PATH inside it, such as a host's results directory shared on its own (docs/OPERATIONS.md)."`
}

// envSyncthing is what the environment says, for commands without the
// flags: every command that writes into the folder nudges.
func envSyncthing() SyncthingFlags {
	return SyncthingFlags{SyncthingAPI: os.Getenv("BRIDGE_SYNCTHING_API"), SyncthingKey: os.Getenv("BRIDGE_SYNCTHING_KEY"),
		SyncthingFolder: os.Getenv("BRIDGE_SYNCTHING_FOLDER")}
}

// over returns s with each empty setting taken from the home's file.
func (s SyncthingFlags) over(c syncthing.Config) SyncthingFlags {
	if s.SyncthingAPI == "" {
		s.SyncthingAPI = c.API
	}
	if s.SyncthingKey == "" {
		s.SyncthingKey = c.Key
	}
	if s.SyncthingFolder == "" {
		s.SyncthingFolder = c.Folders
	}
	return s
}

// nudger returns the nudger these settings ask for, or nil; failures are
// logged on log.
func (s SyncthingFlags) nudger(log *slog.Logger) (*syncthing.Nudger, error) {
	n, err := syncthing.NewNudger(s.SyncthingAPI, s.SyncthingKey, s.SyncthingFolder, log)
	if err != nil {
		return nil, &codeError{code: exitUsage, err: withHintf(err,
			"--syncthing-api takes a URL such as http://127.0.0.1:8384, and --syncthing-folder a folder id, then any PATH=ID (docs/CLI.md); `bridge syncthing setup` finds them")}
	}
	return n, nil
}

// homeNudger sets h.Nudger from the command's flags (g.syncthing), else the
// environment, over the home's file. A bad setting given on the command
// line is a usage error; one from the environment or the file, for a
// command that has no such flags, is said once and nudging is off.
func (g *Globals) homeNudger(h *trust.Home) error {
	explicit := g.syncthing != nil
	s := envSyncthing()
	if explicit {
		s = *g.syncthing
	}
	cfg, err := syncthing.LoadConfig(h)
	if err != nil {
		if explicit {
			return err
		}
		g.note("warning: %v: the Syncthing nudge is off", err)
	}
	// No log lines on a command's stderr: a failure is said once at exit
	// (runParsed), and named by a wait that times out.
	n, err := s.over(cfg).nudger(nil)
	if err != nil {
		if explicit {
			return err
		}
		g.note("warning: %v: the Syncthing nudge is off", err)
	}
	g.nudger, g.folder = n, h.Config.Folder
	if n != nil { // never a nil pointer in the interface: h.Nudger == nil means none
		h.Nudger = n
	}
	return nil
}

// mustSyncthingConfig is the home's file, which homeNudger read already.
func mustSyncthingConfig(h *trust.Home) syncthing.Config {
	c, _ := syncthing.LoadConfig(h)
	return c
}

// noteNoNudge says, after a home was rebuilt from an agent secret, that the
// folder is Syncthing's and nothing sets a nudge: the secret does not carry
// the nudge settings (they name this machine's Syncthing, not the agent),
// and without them every hop waits for Syncthing's watcher.
func (g *Globals) noteNoNudge(h *trust.Home) {
	if fi, err := os.Stat(filepath.Join(h.Config.Folder, ".stfolder")); err != nil || !fi.IsDir() {
		return
	}
	if os.Getenv("BRIDGE_SYNCTHING_API") != "" || (g.syncthing != nil && g.syncthing.SyncthingAPI != "") {
		return
	}
	if cfg, err := syncthing.LoadConfig(h); err == nil && cfg.API != "" {
		return
	}
	g.note("warning: the folder is Syncthing's, and this rebuilt home has no Syncthing nudge (the secret does not carry it): each hop waits for Syncthing's watcher, about 20 s a round trip; " +
		"run `bridge syncthing setup` here (with --share-results if the host shares its results), or set BRIDGE_SYNCTHING_API, BRIDGE_SYNCTHING_KEY and BRIDGE_SYNCTHING_FOLDER")
}
