package host

import (
	"bytes"
	"errors"
	"io/fs"
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
	size   int64
	mtime  time.Time
}

// publishCatalog publishes, for each trusted agent, the signed list of the
// ops that agent may run, so it can discover what to ask before it asks.
func (d *Daemon) publishCatalog() error {
	pol, own := d.pol(), d.own()
	if pol == nil || own == nil || d.folder == nil {
		return nil
	}
	d.catMu.Lock()
	defer d.catMu.Unlock()
	if d.catalogs == nil {
		d.catalogs = map[string]*publishedCatalog{}
	}
	var errs []error
	for agentID, keys := range d.agents() {
		rel := bridge.CatalogPath(d.me, agentID)
		last := int64(0)
		if p := d.catalogs[agentID]; p != nil {
			last = p.issued
		} else {
			last = d.folderCatalogIssued(rel, agentID, own)
		}
		// Above the last even if the clock stepped back: an agent that
		// saw that one would take this one for older.
		issued := max(d.opt.Now().UnixMilli(), last+1)
		signed, err := bridge.SignCatalog(bridge.Catalog{Host: d.me, Agent: agentID, Policy: pol.SHA256, Issued: issued,
			Ops: pol.AgentCatalog(keys.name)}, own.current)
		if err != nil {
			return err
		}
		if err := d.folder.PublishReplace(rel, bridge.WriteBytes(signed), syncsafe.WithMode(0o644)); err != nil {
			errs = append(errs, err)
			continue
		}
		p := &publishedCatalog{issued: issued, data: signed}
		if fi, err := d.folder.Lstat(rel); err == nil {
			p.size, p.mtime = fi.Size(), fi.ModTime()
		}
		d.catalogs[agentID] = p
	}
	return errors.Join(errs...)
}

// folderCatalogIssued is the issue time of the catalog this host signed
// that the folder holds for agent, 0 if none verifies: at the first
// publication after a start, the floor of the next one's.
func (d *Daemon) folderCatalogIssued(rel, agent string, own *ownKeys) int64 {
	data, err := d.folder.ReadFile(rel, bcrypto.KindCatalog.MaxSize())
	if err != nil {
		return 0
	}
	var keys [][]byte
	for _, k := range own.all {
		keys = append(keys, k.Identity.SignPublic())
	}
	cat, err := bridge.OpenCatalog(data, d.me, agent, keys)
	if err != nil {
		return 0
	}
	return cat.Issued
}

// guardCatalogs puts back each agent's catalog when the folder holds
// something else in its place (an older catalog put back, a removed or
// damaged one): the agent keeps the newest it has seen, and an agent that
// never saw it should not have to wait for the next policy change. One
// Lstat per agent, once per liveness interval; the file is read only when
// its size or time changed.
func (d *Daemon) guardCatalogs() {
	if d.folder == nil {
		return
	}
	d.catMu.Lock()
	defer d.catMu.Unlock()
	agents := d.agents()
	for agentID, p := range d.catalogs {
		if agents[agentID] == nil {
			continue
		}
		rel := bridge.CatalogPath(d.me, agentID)
		fi, err := d.folder.Lstat(rel)
		if err == nil && fi.Mode().IsRegular() && fi.Size() == p.size && fi.ModTime().Equal(p.mtime) {
			continue
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			continue // the directory is being repaired (resultDir) or unreadable: next round
		}
		if err == nil && fi.Mode().IsRegular() {
			if data, rerr := d.folder.ReadFile(rel, bcrypto.KindCatalog.MaxSize()); rerr == nil && bytes.Equal(data, p.data) {
				p.size, p.mtime = fi.Size(), fi.ModTime() // the same bytes (touched, or copied back in place)
				continue
			}
		}
		if err := d.folder.PublishReplace(rel, bridge.WriteBytes(p.data), syncsafe.WithMode(0o644)); err != nil {
			d.log.Warn("put back the op catalog", "agent", agentID, "err", err)
			continue
		}
		if fi, err := d.folder.Lstat(rel); err == nil {
			p.size, p.mtime = fi.Size(), fi.ModTime()
		}
		d.log.Warn("the op catalog in the folder was not the one this host published: put back", "agent", agentID)
	}
}
