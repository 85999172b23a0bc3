package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
	"github.com/syncbridge/bridge/syncsafe"
)

// The host's op catalog as this agent believes it (SPEC §10a). The folder
// may hold any catalog the host ever signed for this agent (a folder
// writer can put an old one back, with an op since removed or no longer
// idempotent): the agent keeps the newest it has seen in its home
// (catalogs/HOST.catalog) and uses it when the folder shows an older one,
// and checks the catalog's policy against the host's fresher liveness
// stamp.

// catalogsDir holds, in the agent's home, the newest catalog of each host.
const catalogsDir = "catalogs"

// Ops reads and verifies a host's signed catalog: the newest of the one in
// the folder and the one this agent kept. Its Warning says when it may not
// describe what the host runs now; every op is then marked not idempotent.
func (c *Client) Ops(host string) (*bridge.Catalog, error) {
	cat, _, err := c.ops(host)
	return cat, err
}

// ops is Ops, and whether the catalog predates the policy the host's
// liveness stamp names (a call should then go unchecked: the host decides).
func (c *Client) ops(host string) (cat *bridge.Catalog, stale bool, err error) {
	_, hb, err := c.host(host)
	if err != nil {
		return nil, false, err
	}
	data, err := c.folder.ReadFile(bridge.CatalogPath(hb.ID, c.home.Config.ID), bcrypto.KindCatalog.MaxSize())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, bridge.WithHint(errors.New("the host has not published its catalog for this agent yet"),
			"the host publishes it once it has paired this agent (`bridge pair --fingerprint %s` on the host) and `bridge serve` runs; then wait for the sync",
			c.home.Bundle().Fingerprint())
	} else if err != nil {
		return nil, false, err
	}
	p, _, err := c.home.Peer(hb.ID)
	if err != nil {
		return nil, false, err
	}
	var hostKeys [][]byte
	for _, k := range p.KeysIn(bridge.KeyValid, time.Now()) {
		hostKeys = append(hostKeys, k.SignPub)
	}
	cat, err = bridge.OpenCatalog(data, hb.ID, c.home.Config.ID, hostKeys)
	if err != nil {
		return nil, false, err
	}
	keptPath := c.home.Path(catalogsDir, hb.ID+".catalog")
	keptData, _ := os.ReadFile(keptPath)
	var kept *bridge.Catalog
	if len(keptData) > 0 && !bytes.Equal(keptData, data) {
		// One the host signed with a key no longer valid is not believed
		// (and the folder's replaces it).
		kept, _ = bridge.OpenCatalog(keptData, hb.ID, c.home.Config.ID, hostKeys)
	}
	switch {
	case kept != nil && kept.Issued > cat.Issued:
		kept.Warning = fmt.Sprintf("the folder holds an older catalog of host %q (signed %s) than one this agent has seen (signed %s): "+
			"someone who can write the folder put it back, or a backup was restored; the newest is used, and the host puts its own back "+
			"at its next liveness stamp", p.Name, issuedText(cat.Issued), issuedText(kept.Issued))
		cat = kept
	case cat.Issued > 0 && !bytes.Equal(keptData, data):
		// Newer than the kept one, or the first. Not kept (a read-only
		// home), it is still used: the copy only guards against older.
		_ = c.keepCatalog(keptPath, data)
	}
	// The stamp is rewritten every interval and names the policy the host
	// runs: a catalog signed before it under another policy is out of date
	// (still syncing, or an old one in a folder this agent never saw the
	// newer one of).
	if lv, err := c.hostLiveness(hb.ID); err == nil && lv.LastSeen != nil && lv.Verdict != LivenessNoStamp &&
		lv.Verdict != LivenessClockAhead && lv.PolicySHA256 != cat.Policy && lv.LastSeen.UnixMilli() > cat.Issued {
		stale = true
		w := fmt.Sprintf("host %q's catalog predates the policy its liveness stamp of %s names: it is still syncing, or the folder holds an old one; "+
			"ops are shown as the host described them then, and the host decides each call", p.Name, lv.LastSeen.UTC().Format(time.RFC3339))
		if cat.Warning != "" {
			w = cat.Warning + "; " + w
		}
		cat.Warning = w
	}
	if cat.Warning != "" {
		for i := range cat.Ops {
			cat.Ops[i].Idempotent = false // nothing is safe to run again on an old word
		}
	}
	return cat, stale, nil
}

// keepCatalog keeps data as the newest catalog seen of its host.
func (c *Client) keepCatalog(path string, data []byte) error {
	if err := os.MkdirAll(c.home.Path(catalogsDir), 0o700); err != nil {
		return err
	}
	return syncsafe.WriteFileAtomic(path, data)
}

// issuedText is a catalog's issue time for a message.
func issuedText(ms int64) string {
	if ms == 0 {
		return "by a release before catalogs were dated"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}
