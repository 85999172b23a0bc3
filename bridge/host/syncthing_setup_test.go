package host

import (
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
)

// TestSyncthingSetup runs `bridge syncthing setup --share-results` against
// two real Syncthings, as docs/OPERATIONS.md describes by hand: each side
// finds its Syncthing from config.xml and the bridge folder's id from the
// REST API, adds the results directory as a folder of its own under the
// same id, leaves it out of the bridge folder, and saves the nudge
// settings; round trips then go through the two folders with only the
// product's nudges (the harness scans nothing itself). A wrong key is
// refused with a hint.
func TestSyncthingSetup(t *testing.T) {
	st := startSyncthingPairWith(t, false)
	p := syncthingHomes(t, st)
	rel := bridge.HostDir(p.host.Config.ID) + "/to-agent"
	var saved []bridge.SyncthingConfig
	for _, side := range []struct {
		home *bridge.Home
		in   *stInstance
	}{{p.host, st.A}, {p.agent, st.B}} {
		rep, err := bridge.SyncthingSetup(side.home, bridge.SyncthingSetupOptions{ConfigXML: filepath.Join(side.in.home, "config.xml"), ShareResults: true})
		if err != nil {
			t.Fatalf("setup on %s: %v", side.in.name, err)
		}
		if rep.Folder != stFolderID || len(rep.Created) != 1 || !slices.Contains(rep.IgnoreLine, "/"+rel) {
			t.Fatalf("setup on %s: %+v", side.in.name, rep)
		}
		want := stFolderID + "," + rel + "=" + rep.Created[0]
		cfg, err := side.home.SyncthingConfig()
		if err != nil || cfg.Folders != want || cfg.Key != side.in.key || !strings.HasSuffix(cfg.API, ":"+strconv.Itoa(side.in.gui)) {
			t.Fatalf("saved settings on %s: %+v, %v; want folders %s", side.in.name, cfg, err, want)
		}
		saved = append(saved, cfg)
		var folder struct {
			Path    string           `json:"path"`
			Devices []map[string]any `json:"devices"`
		}
		if err := st.api(side.in, "GET", "/rest/config/folders/"+rep.Created[0], nil, &folder); err != nil {
			t.Fatal(err)
		}
		if folder.Path != side.in.folderPath(rel) || len(folder.Devices) != 2 {
			t.Fatalf("results folder on %s: %+v", side.in.name, folder)
		}
		// Run again: nothing more to add.
		again, err := bridge.SyncthingSetup(side.home, bridge.SyncthingSetupOptions{ConfigXML: filepath.Join(side.in.home, "config.xml"), ShareResults: true})
		if err != nil || len(again.Created) != 0 || len(again.IgnoreLine) != 0 || again.Folders != want {
			t.Fatalf("setup again on %s: %+v, %v", side.in.name, again, err)
		}
	}
	if saved[0].Folders[len(stFolderID):] != saved[1].Folders[len(stFolderID):] {
		t.Fatalf("the two sides' results folders differ: %s, %s", saved[0].Folders, saved[1].Folders)
	}
	var err error
	if p.host.Nudger, err = bridge.NewNudger(saved[0].API, saved[0].Key, saved[0].Folders, nil); err != nil {
		t.Fatal(err)
	}
	if p.agent.Nudger, err = bridge.NewNudger(saved[1].API, saved[1].Key, saved[1].Folders, nil); err != nil {
		t.Fatal(err)
	}
	runDaemon(t, p.host, DaemonOptions{})
	for i := 0; i < 3; i++ {
		if out := p.run(t, agent.SubmitOptions{Op: bridge.PingOp}); out.Receipt.Status != bridge.StatusDone {
			t.Fatalf("ping %d through the split folders: %s", i, out.Receipt.Status)
		}
	}
	_, err = bridge.SyncthingSetup(p.agent, bridge.SyncthingSetupOptions{API: "http://127.0.0.1:" + strconv.Itoa(st.B.gui), Key: "wrong"})
	var he *bridge.HintError
	if err == nil || !strings.Contains(err.Error(), "API key is refused") || !errors.As(err, &he) || !strings.Contains(he.Hint, "API Key") {
		t.Fatalf("a wrong key: %v", err)
	}
}
