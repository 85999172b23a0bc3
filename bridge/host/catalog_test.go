package host

import (
	"bytes"
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
)

// readCatalog reads and verifies the catalog in the folder for the pair's
// agent, with its bytes.
func (p *pair) readCatalog(t *testing.T) (*bridge.Catalog, []byte) {
	t.Helper()
	data, err := os.ReadFile(p.folder + "/" + bridge.CatalogPath(p.host.Config.ID, p.agent.Config.ID))
	if err != nil {
		t.Fatal(err)
	}
	cat, err := bridge.OpenCatalog(data, p.host.Config.ID, p.agent.Config.ID, [][]byte{p.host.Identity().SignPublic()})
	if err != nil {
		t.Fatal(err)
	}
	return cat, data
}

// Each catalog the host signs for an agent is dated above the last, even
// when the host's clock steps back between two starts; a catalog put back
// over the host's own (an older one it signed, as a folder writer would)
// is replaced by the host's at its next stamp round (issue 26, item 1).
func TestHostDatesAndPutsBackItsCatalog(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	d := runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond, Now: now, LivenessInterval: time.Minute})
	first, firstData := p.readCatalog(t)
	if first.V != bridge.CatalogVersion || first.Issued <= 0 {
		t.Fatalf("catalog not dated: %+v", first)
	}
	// An older catalog the host signed: another policy, an extra op.
	older := *first
	older.Issued = first.Issued - 3_600_000
	older.Ops = append(older.Ops[:len(older.Ops):len(older.Ops)], bridge.OpInfo{Name: "drop-db", Scope: "write", Timeout: "1m0s", Args: []bridge.ArgInfo{}})
	oldData, err := bridge.SignCatalog(older, p.host.Identity())
	if err != nil {
		t.Fatal(err)
	}
	path := p.folder + "/" + bridge.CatalogPath(p.host.Config.ID, p.agent.Config.ID)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, oldData, 0o644); err != nil {
		t.Fatal(err)
	}
	// With the time of the host's own, as a sync client would set it.
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(70 * time.Second)) // past the stamp interval
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if got, _ := os.ReadFile(path); bytes.Equal(got, firstData) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host never put its catalog back")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopDaemon(d, ctx)

	// The clock an hour behind at the next start, and the folder's
	// catalog gone meanwhile: still dated above (the home keeps the last).
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(-time.Hour))
	runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond, Now: now, LivenessInterval: time.Minute})
	if next, _ := p.readCatalog(t); next.Issued <= first.Issued {
		t.Fatalf("catalog after a start with the clock back: issued %d, the last was %d", next.Issued, first.Issued)
	}
}

// A catalog dated by a clock that was a year ahead is not the floor of the
// next once the clock is right (the red team of 5da3cff: every catalog
// after it was dated a year ahead, and every agent called it stale).
func TestCatalogFloorFromAClockAheadIsDropped(t *testing.T) {
	t.Parallel()
	p := newPair(t, testPolicy)
	var offset atomic.Int64
	offset.Store(int64(365 * 24 * time.Hour))
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	d := runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond, Now: now})
	ahead, _ := p.readCatalog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stopDaemon(d, ctx)
	offset.Store(0)
	runDaemon(t, p.host, DaemonOptions{Rescan: 500 * time.Millisecond, Now: now})
	if next, _ := p.readCatalog(t); next.Issued >= ahead.Issued || time.UnixMilli(next.Issued).After(time.Now().Add(time.Minute)) {
		t.Fatalf("after a start with the clock right: issued %s (the one from the clock ahead: %s)", time.UnixMilli(next.Issued), time.UnixMilli(ahead.Issued))
	}
}
