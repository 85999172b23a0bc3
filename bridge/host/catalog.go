package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// The op catalogs (SPEC §10a): one signed file per trusted agent, the ops
// it may run. Anyone who can write the folder can put back a catalog this
// host signed before (an op since removed, or no longer idempotent, offered
// again); each catalog therefore carries an issue time above the last, the
// agent keeps the newest it has seen, and the host puts its own back when
// it finds another in its place.

// publishedCatalog is what the host last published for one agent.
type publishedCatalog struct {
	issued int64
	data   []byte
}

// publishCatalog publishes, for each trusted agent, the signed list of the
// ops that agent may run, so it can discover what to ask before it asks.
func (o *outbox) publishCatalog() error {
	pol, own := o.pol(), o.own()
	if pol == nil || own == nil || o.folder == nil {
		return nil
	}
	o.catMu.Lock()
	defer o.catMu.Unlock()
	if o.catalogs == nil {
		o.catalogs = map[string]*publishedCatalog{}
	}
	var errs []error
	var floors map[string]int64 // the home's record, read at the first publication after a start
	for agentID, keys := range o.agents() {
		rel := bridge.CatalogPath(o.me, agentID)
		last := int64(0)
		if p := o.catalogs[agentID]; p != nil {
			last = p.issued
		} else {
			if floors == nil {
				floors = o.readCatalogFloors()
			}
			// The folder's catalog only within a few minutes of this clock:
			// a folder writer could put back one signed while it was ahead.
			folder := o.folderCatalogIssued(rel, agentID, own)
			if time.UnixMilli(folder).Sub(o.opt.Now()) > 5*time.Minute {
				folder = 0
			}
			last = max(floors[agentID], folder)
			if ahead := time.UnixMilli(last).Sub(o.opt.Now()); ahead > futureFloor {
				// Dated by a clock that was ahead (or a catalog a folder
				// writer kept from then): following it would date every
				// catalog ahead, and agents would call them all stale.
				o.log.Warn("the last op catalog was dated ahead of this clock: dated by the clock again", "agent", keys.name, "ahead", ahead.Round(time.Second))
				last = 0
			}
		}
		// Above the last even if the clock stepped back: an agent that
		// saw that one would take this one for older.
		issued := max(o.opt.Now().UnixMilli(), last+1)
		signed, err := bridge.SignCatalog(bridge.Catalog{Host: o.me, Agent: agentID, Policy: pol.SHA256, Issued: issued,
			Ops: pol.AgentCatalog(keys.name)}, own.current)
		if err != nil {
			return err
		}
		if err := o.folder.PublishReplace(rel, bridge.WriteBytes(signed), syncsafe.WithMode(0o644)); err != nil {
			errs = append(errs, err)
			continue
		}
		o.catalogs[agentID] = &publishedCatalog{issued: issued, data: signed}
	}
	errs = append(errs, o.saveCatalogFloors())
	return errors.Join(errs...)
}

// futureFloor is how far ahead of this clock the last catalog's date may
// be and still be the floor of the next. Within it, a clock stepped back
// (an hour, a day) does not date a new catalog below the one agents keep;
// beyond it, the date came from a clock that was wrong, and following it
// would date every catalog so far ahead that agents (which call a catalog
// dated more than 5 minutes ahead of their clock stale) would, for as long.
const futureFloor = 24 * time.Hour

// catalogFloorsName is the host home's record of the last catalog issue
// time per agent (inbox/catalogs.json): the floor of the next after a
// start, even when the folder lost the catalog and the clock stepped back.
const catalogFloorsName = "catalogs.json"

func (o *outbox) readCatalogFloors() map[string]int64 {
	floors := map[string]int64{}
	if b, err := os.ReadFile(o.home.Path("inbox", catalogFloorsName)); err == nil {
		json.Unmarshal(b, &floors) // damaged: the folder's catalog and the clock are the floor
	}
	return floors
}

// saveCatalogFloors records what publishCatalog published (catMu held).
func (o *outbox) saveCatalogFloors() error {
	floors := o.readCatalogFloors()
	for agent, p := range o.catalogs {
		floors[agent] = max(floors[agent], p.issued)
	}
	b, _ := json.Marshal(floors)
	if err := os.MkdirAll(o.home.Path("inbox"), 0o700); err != nil {
		return err
	}
	return syncsafe.WriteFileAtomic(o.home.Path("inbox", catalogFloorsName), b)
}

// folderCatalogIssued is the issue time of the catalog this host signed
// that the folder holds for agent, 0 if none verifies: at the first
// publication after a start, the floor of the next one's.
func (o *outbox) folderCatalogIssued(rel, agent string, own *ownKeys) int64 {
	data, err := o.folder.ReadFile(rel, bcrypto.KindCatalog.MaxSize())
	if err != nil {
		return 0
	}
	var keys [][]byte
	for _, k := range own.all {
		keys = append(keys, k.Identity.SignPublic())
	}
	cat, err := bridge.OpenCatalog(data, o.me, agent, keys)
	if err != nil {
		return 0
	}
	return cat.Issued
}

// guardCatalogs puts back each agent's catalog when the folder holds
// something else in its place (an older catalog put back, a removed or
// damaged one): the agent keeps the newest it has seen, and an agent that
// never saw it should not have to wait for the next policy change. The
// bytes are compared each time (a catalog is a few KiB, read once per
// stamp interval): a copy put back with the size and time of the host's
// would pass a look at those.
func (o *outbox) guardCatalogs() {
	if o.folder == nil {
		return
	}
	o.catMu.Lock()
	defer o.catMu.Unlock()
	agents := o.agents()
	for agentID, p := range o.catalogs {
		keys := agents[agentID]
		if keys == nil {
			continue
		}
		rel := bridge.CatalogPath(o.me, agentID)
		data, err := o.folder.ReadFile(rel, bcrypto.KindCatalog.MaxSize())
		if err == nil && bytes.Equal(data, p.data) {
			continue
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syncsafe.ErrTooLarge) && !errors.Is(err, syncsafe.ErrNotRegular) {
			continue // the directory is being repaired (resultDir) or unreadable: next round
		}
		if err := o.folder.PublishReplace(rel, bridge.WriteBytes(p.data), syncsafe.WithMode(0o644)); err != nil {
			o.log.Warn("put back the op catalog", "agent", keys.name, "err", err)
			continue
		}
		o.log.Warn("the op catalog in the folder was not the one this host published: put back", "agent", keys.name)
	}
}
