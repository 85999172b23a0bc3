package syncthing

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
)

// RouteHost is a host whose results a results-route check looks at.
type RouteHost struct{ ID, Name string }

// RouteProblem says that a host's results do not travel the way one side
// expects: `bridge syncthing setup --share-results` ran on one side only,
// so the host writes its answers where the agent no longer reads them, or
// the other way round. Nothing is lost (the host keeps every result), but
// every wait on the agent hangs until the two sides agree.
type RouteProblem struct {
	Host    string `json:"host"`   // the host's id
	Folder  string `json:"folder"` // the results folder's Syncthing id
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

// ResultsRoute asks the local Syncthing whether each host's results
// directory is shared as a folder of its own on one side only. isHost
// says which side this is (the host writes the results, an agent reads
// them). It reads, never changes, Syncthing's settings: the folders, the
// folders other devices offer and this one has not added, and, where
// Syncthing says so (1.20 and later), whether a device does not share a
// folder this one does.
func (n *Nudger) ResultsRoute(ctx context.Context, bridgeDir string, hosts []RouteHost, isHost bool) ([]RouteProblem, error) {
	if n == nil {
		return nil, nil
	}
	c := &stClient{api: n.api, key: n.key, http: n.http}
	var folders []stFolderConfig
	if err := c.callCtx(ctx, "GET", "/rest/config/folders", nil, &folders); err != nil {
		return nil, err
	}
	// Folders offered to this device and not added here. An error leaves
	// it empty: a Syncthing older than 1.13 has no such list.
	var offered map[string]struct {
		OfferedBy map[string]json.RawMessage `json:"offeredBy"`
	}
	_ = c.callCtx(ctx, "GET", "/rest/cluster/pending/folders", nil, &offered)
	var me struct {
		MyID string `json:"myID"`
	}
	_ = c.callCtx(ctx, "GET", "/rest/system/status", nil, &me)

	var out []RouteProblem
	for _, h := range hosts {
		id, rel := resultsFolderID(h.ID), bridge.ToAgentRoot(h.ID)
		whose := fmt.Sprintf("host %q's", h.Name)
		if isHost {
			whose = "this host's"
		}
		i := slices.IndexFunc(folders, func(f stFolderConfig) bool { return f.ID == id })
		if i < 0 {
			o, ok := offered[id]
			if !ok || len(o.OfferedBy) == 0 {
				continue
			}
			devs := slices.Sorted(maps.Keys(o.OfferedBy))
			p := RouteProblem{Host: h.ID, Folder: id, Hint: "run `bridge syncthing setup --share-results` here: it adds that folder at " + rel + " and leaves the directory out of the bridge folder"}
			if isHost {
				p.Message = fmt.Sprintf("device %s shares this host's results as Syncthing folder %s, which this Syncthing does not: "+
					"that agent reads results only from it, so no answer of this host reaches it", shortDevice(devs[0]), id)
			} else {
				// Any device that shares the bridge folder can offer a
				// folder under this id (it is derived from the host's):
				// the device is named, and the host as the likely one.
				p.Message = fmt.Sprintf("Syncthing device %s offers %s results as folder %s, which this machine's Syncthing does not have: "+
					"if that is the host's device, no result, liveness stamp or catalog of that host arrives here", shortDevice(devs[0]), whose, id)
			}
			out = append(out, p)
			continue
		}
		f := folders[i]
		if want := filepath.Join(bridgeDir, filepath.FromSlash(rel)); !samePath(trust.ExpandTilde(f.Path), want) {
			out = append(out, RouteProblem{Host: h.ID, Folder: id,
				Message: fmt.Sprintf("%s results folder %s is at %s, not at %s, where the bridge reads and writes them", whose, id, f.Path, want),
				Hint:    "change that folder's path in Syncthing (remove it and run `bridge syncthing setup --share-results` again)"})
			continue
		}
		if isHost {
			if got, _, ok := n.folderOf(rel + "/x"); !ok || got != id {
				out = append(out, RouteProblem{Host: h.ID, Folder: id,
					Message: fmt.Sprintf("this host's results are Syncthing folder %s, but the nudge settings do not name it: each answer waits for that folder's watcher", id),
					Hint:    "run `bridge syncthing setup --share-results` again here"})
			}
		}
		for _, d := range f.Devices {
			dev, _ := d["deviceID"].(string)
			if dev == "" || dev == me.MyID {
				continue
			}
			var comp struct {
				RemoteState string `json:"remoteState"`
			}
			q := url.Values{"folder": {id}, "device": {dev}}
			if err := c.callCtx(ctx, "GET", "/rest/db/completion?"+q.Encode(), nil, &comp); err != nil || comp.RemoteState != "notSharing" {
				continue
			}
			p := RouteProblem{Host: h.ID, Folder: id, Hint: "run `bridge syncthing setup --share-results` on the other side too"}
			if isHost {
				p.Message = fmt.Sprintf("this host's results go out as Syncthing folder %s, which device %s does not share: no answer of this host reaches it", id, shortDevice(dev))
			} else {
				p.Message = fmt.Sprintf("this machine reads %s results only from Syncthing folder %s, which device %s does not share: none arrives", whose, id, shortDevice(dev))
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// shortDevice is a Syncthing device id as its GUI shows it in short.
func shortDevice(id string) string {
	if len(id) > 7 {
		return id[:7]
	}
	return id
}
