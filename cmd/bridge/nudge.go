package main

import (
	"log/slog"

	"github.com/syncbridge/bridge/bridge"
)

// SyncthingFlags turn on the Syncthing nudge: after publishing a file, ask
// the local Syncthing to scan it at once instead of after its watcher's
// delay. Off unless --syncthing-api is given.
type SyncthingFlags struct {
	SyncthingAPI    string `name:"syncthing-api" env:"BRIDGE_SYNCTHING_API" placeholder:"URL" help:"Ask this local Syncthing (e.g. http://127.0.0.1:8384) to scan each file bridge publishes, so it syncs at once."`
	SyncthingKey    string `name:"syncthing-key" env:"BRIDGE_SYNCTHING_KEY" placeholder:"KEY" help:"The Syncthing API key (Settings > GUI)."`
	SyncthingFolder string `name:"syncthing-folder" env:"BRIDGE_SYNCTHING_FOLDER" placeholder:"ID[,PATH=ID]" help:"The Syncthing folder id of the bridge folder (whose root it must be); PATH=ID adds a folder rooted at PATH inside it, such as a host's results directory shared on its own (docs/OPERATIONS.md)."`
}

// nudger returns the nudger these flags ask for, or nil; failures are
// logged on log.
func (s SyncthingFlags) nudger(log *slog.Logger) (*bridge.Nudger, error) {
	n, err := bridge.NewNudger(s.SyncthingAPI, s.SyncthingKey, s.SyncthingFolder, log)
	if err != nil {
		return nil, &codeError{code: exitUsage, err: withHintf(err,
			"--syncthing-api takes a URL such as http://127.0.0.1:8384, and --syncthing-folder a folder id, then any PATH=ID (docs/CLI.md)")}
	}
	return n, nil
}
