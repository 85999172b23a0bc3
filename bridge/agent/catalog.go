package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// The host's op catalog as this agent believes it (SPEC §10a). The folder
// may hold any catalog the host ever signed for this agent (a folder
// writer can put an old one back, with an op since removed or no longer
// idempotent), and any stamp it ever signed. The agent keeps, in its home,
// the newest catalog it has verified (catalogs/HOST.catalog) and the
// newest liveness stamp (catalogs/HOST.liveness); it uses the kept catalog
// when the folder shows an older one, and calls a catalog stale when the
// newest stamp it knows is later and names another policy, or when no
// stamp confirms it at all.

// catalogsDir holds, in the agent's home, the newest catalog and stamp of
// each host.
const catalogsDir = "catalogs"

// Ops reads and verifies a host's signed catalog: the newest of the one in
// the folder and the one this agent kept. Its Warning says why it may not
// describe what the host runs now; when Stale is set, no op is marked
// idempotent and no call should be checked against it (the host decides).
func (c *Client) Ops(host string) (*bridge.Catalog, error) {
	_, hb, err := c.host(host)
	if err != nil {
		return nil, err
	}
	data, err := c.folder.ReadFile(bridge.CatalogPath(hb.ID, c.home.Config.ID), bcrypto.KindCatalog.MaxSize())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, bridge.WithHint(errors.New("the host has not published its catalog for this agent yet"),
			"the host publishes it once it has paired this agent (`bridge pair --fingerprint %s` on the host) and `bridge serve` runs; then wait for the sync",
			c.home.Bundle().Fingerprint())
	} else if err != nil {
		return nil, err
	}
	p, _, err := c.home.Peer(hb.ID)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var hostKeys [][]byte
	for _, k := range p.KeysIn(trust.KeyValid, now) {
		hostKeys = append(hostKeys, k.SignPub)
	}
	cat, err := bridge.OpenCatalog(data, hb.ID, c.home.Config.ID, hostKeys)
	if err != nil {
		return nil, newerHost(err, p.Name)
	}
	var warnings []string
	ahead := func(ms int64) bool { return time.UnixMilli(ms).Sub(now) > futureSlack }
	if ahead(cat.Issued) {
		// A host's clock that was ahead (or a host that turned hostile)
		// must not lock out every later catalog: never kept, and the kept
		// one, if any, is used instead.
		w := fmt.Sprintf("host %q's catalog in the folder is dated %s, %s ahead of this machine's clock: a clock is wrong on one side",
			p.Name, issuedText(cat.Issued), Ago(time.UnixMilli(cat.Issued).Sub(now)))
		if kept, _ := c.keepNewestCatalog(hb.ID, nil, &bridge.Catalog{}, hostKeys, ahead); kept != nil {
			cat, w = kept, w+"; the one this agent kept is used"
		} else {
			cat.Stale, w = true, w+"; it is used, not kept"
		}
		warnings = append(warnings, w)
	} else {
		kept, _ := c.keepNewestCatalog(hb.ID, data, cat, hostKeys, ahead)
		if kept != nil && kept.Issued > cat.Issued {
			warnings = append(warnings, fmt.Sprintf("the folder holds an older catalog of host %q (signed %s) than one this agent has seen (signed %s): "+
				"someone who can write the folder put it back, or a backup was restored; the newest is used, and the host puts its own back within its stamp interval",
				p.Name, issuedText(cat.Issued), issuedText(kept.Issued)))
			cat = kept
		}
	}
	// The stamp is rewritten every interval and names the policy the host
	// runs: the newest this agent has verified (a folder writer may put an
	// older one back, or remove it) says whether the catalog is current.
	switch st := c.newestStamp(hb.ID, hostKeys, now); {
	case st == nil:
		cat.Stale = true
		warnings = append(warnings, fmt.Sprintf("no liveness stamp of host %q confirms this catalog is the one its policy gives (none has arrived yet, or the folder lost it); "+
			"the host decides each call", p.Name))
	case st.Policy != cat.Policy && st.Time >= cat.Issued/1000:
		// Not before the catalog's own second: a stamp counts in whole
		// seconds, and one of the same second may be the later.
		cat.Stale = true
		warnings = append(warnings, fmt.Sprintf("host %q's catalog predates the policy its liveness stamp of %s names: it is still syncing, or the folder holds an old one; "+
			"the host decides each call", p.Name, time.Unix(st.Time, 0).UTC().Format(time.RFC3339)))
	}
	for i, w := range warnings {
		if i == 0 {
			cat.Warning = w
		} else {
			cat.Warning += "; " + w
		}
	}
	if cat.Stale {
		for i := range cat.Ops {
			cat.Ops[i].Idempotent = false // nothing is safe to run again on an old word
		}
	}
	return cat, nil
}

// keepNewestCatalog keeps data (verified as cat) as the newest catalog of
// host when it is newer than the kept one, and returns the kept one (nil:
// none, or one no longer believed). Two processes of this agent may do
// so at once: the kept copy is replaced under a lock, once it is read
// again, only by a newer one.
func (c *Client) keepNewestCatalog(host string, data []byte, cat *bridge.Catalog, hostKeys [][]byte, ahead func(int64) bool) (*bridge.Catalog, error) {
	path := c.home.Path(catalogsDir, host+".catalog")
	// read reads the kept copy once: nil and same when it is data already
	// (the common case: nothing verified twice).
	read := func() (k *bridge.Catalog, same bool) {
		b, err := os.ReadFile(path)
		if err != nil || bytes.Equal(b, data) {
			return nil, err == nil
		}
		// One the host signed with a key no longer valid, or dated ahead
		// of this clock, is not believed (and the folder's replaces it).
		k, err = bridge.OpenCatalog(b, host, c.home.Config.ID, hostKeys)
		if err != nil || ahead(k.Issued) {
			return nil, false
		}
		return k, false
	}
	kept, same := read()
	if same {
		return nil, nil
	}
	if cat.Issued == 0 || kept != nil && kept.Issued >= cat.Issued {
		return kept, nil
	}
	if err := os.MkdirAll(c.home.Path(catalogsDir), 0o700); err != nil {
		return kept, err
	}
	lock, err := syncsafe.Lock(c.home.Path(catalogsDir, host+".lock"))
	if err != nil {
		return kept, err // another process of this agent keeps one now
	}
	defer lock.Unlock()
	if kept, _ = read(); kept != nil && kept.Issued >= cat.Issued {
		return kept, nil
	}
	// Not kept (a read-only home), it is still used: the copy only
	// guards against an older one.
	return kept, syncsafe.WriteFileAtomic(path, data)
}

// newestStamp is the newest liveness stamp of host this agent has verified:
// the folder's or the one it kept (catalogs/HOST.liveness), not one dated
// ahead of this machine's clock; the folder's is kept when it is newer.
// nil: none verifies.
func (c *Client) newestStamp(host string, hostKeys [][]byte, now time.Time) *bridge.LivenessStamp {
	open := func(b []byte) *bridge.LivenessStamp {
		st, err := bridge.OpenLiveness(b, host, c.home.Config.ID, hostKeys)
		if err != nil || time.Unix(st.Time, 0).Sub(now) > futureSlack {
			return nil
		}
		return st
	}
	path := c.home.Path(catalogsDir, host+".liveness")
	keptData, _ := os.ReadFile(path)
	data, err := c.folder.ReadFile(bridge.LivenessPath(host, c.home.Config.ID), bcrypto.KindLiveness.MaxSize())
	var st *bridge.LivenessStamp
	if err == nil {
		st = open(data)
	}
	if st != nil && bytes.Equal(data, keptData) {
		return st
	}
	var kept *bridge.LivenessStamp
	if len(keptData) > 0 {
		kept = open(keptData)
	}
	switch {
	case st == nil:
		return kept
	case kept != nil && kept.Time >= st.Time:
		return kept // of the same second, the one seen first stays: a put-back must not replace it
	}
	// Newer: kept without an fsync (a copy lost in a crash only weakens
	// the check until the next stamp), by a rename so no reader sees half,
	// under the lock, once the kept one is read again (another process of
	// this agent may have kept a newer one meanwhile).
	if os.MkdirAll(c.home.Path(catalogsDir), 0o700) != nil {
		return st
	}
	lock, err := syncsafe.Lock(c.home.Path(catalogsDir, host+".lock"))
	if err != nil {
		return st
	}
	defer lock.Unlock()
	if b, err := os.ReadFile(path); err == nil {
		if k := open(b); k != nil && k.Time >= st.Time {
			return k
		}
	}
	tmp := path + ".tmp-" + bridge.NewRequestID()[:8]
	if os.WriteFile(tmp, data, 0o600) == nil && os.Rename(tmp, path) != nil {
		os.Remove(tmp)
	}
	return st
}

// issuedText is a catalog's issue time for a message.
func issuedText(ms int64) string {
	if ms == 0 {
		return "by a release before catalogs were dated"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// newerHost adds to an unknown-version refusal of something the host wrote
// what it means: the host runs a newer bridge, whose formats this agent
// does not read (SPEC §13), and the fix.
func newerHost(err error, host string) error {
	if !errors.Is(err, bcrypto.ErrUnknownVersion) {
		return err
	}
	return bridge.WithHint(err, "host %q writes a format this agent does not read: it runs a newer bridge; upgrade this agent (`bridge version` names each side's; docs/OPERATIONS.md, \"Upgrading\")", host)
}
