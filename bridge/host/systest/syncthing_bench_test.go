package systest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/syncthing"
)

// TestSyncthingRoundTripBench measures ping round trips through two real
// Syncthings on loopback (the harness of syncthing_harness_test.go, without
// its background nudger): with Syncthing's default watcher delay (10 s),
// with a 1 s watcher, and with the default delay plus the bridge's own
// nudge (Nudger on both sides), back to back and one at a time, with the
// host's results in the shared folder and in a folder of their own. It is a measurement, not a check, so it
// runs only when BRIDGE_BENCH_SYNCTHING=1 (cmd/bridge-bench runs it);
// BRIDGE_BENCH_SYNCTHING_N multiplies the sample counts.
//
//	BRIDGE_BENCH_SYNCTHING=1 go test -run TestSyncthingRoundTripBench -v ./bridge
func TestSyncthingRoundTripBench(t *testing.T) {
	t.Parallel()
	if os.Getenv("BRIDGE_BENCH_SYNCTHING") != "1" {
		t.Skip("a benchmark: set BRIDGE_BENCH_SYNCTHING=1 to run it")
	}
	k := 1
	if s := os.Getenv("BRIDGE_BENCH_SYNCTHING_N"); s != "" {
		var err error
		if k, err = strconv.Atoi(s); err != nil || k < 1 {
			t.Fatalf("BRIDGE_BENCH_SYNCTHING_N=%q: want a positive integer", s)
		}
	}
	st := startSyncthingPair(t)
	// Stop the harness's nudger: each mode sets its own conditions.
	st.cancel()
	st.nudged.Wait()

	p := syncthingHomes(t, st)
	var err error

	// Modes run in this order: the last ones move the host's results
	// directory into a Syncthing folder of its own.
	resultsDir := "hosts/" + p.host.Config.ID + "/to-agent"
	modes := []struct {
		name           string
		delayS, rescan int
		nudge          bool
		gap            time.Duration // idle time before each request
		split          bool          // results in a folder of their own
		n              int
	}{
		{"nudge (default 10 s watcher + bridge nudge)", 10, 3600, true, 0, false, 30 * k},
		{"nudge, one request at a time (300 ms apart)", 10, 3600, true, 300 * time.Millisecond, false, 30 * k},
		{"1 s watcher", 1, 3600, false, 0, false, 10 * k},
		{"default 10 s watcher", 10, 3600, false, 0, false, 4 * k},
		{"nudge, results folder of their own", 10, 3600, true, 0, true, 30 * k},
		{"nudge, results folder of their own, one request at a time (300 ms apart)", 10, 3600, true, 300 * time.Millisecond, true, 30 * k},
	}
	split := false
	for _, m := range modes {
		if m.split && !split {
			split = true
			splitResultsFolder(t, st, resultsDir)
		}
		folders := []string{stFolderID}
		if split {
			folders = append(folders, stResultsFolderID)
		}
		for _, in := range st.sides() {
			for _, id := range folders {
				patch := map[string]any{"fsWatcherDelayS": m.delayS, "rescanIntervalS": m.rescan}
				if err := st.api(in, "PATCH", "/rest/config/folders/"+id, patch, nil); err != nil {
					t.Fatalf("configure %s: %v", in.name, err)
				}
			}
		}
		st.WaitInSync(60 * time.Second)
		var hostN, agentN *syncthing.Nudger
		if m.nudge {
			spec := stFolderID
			if split {
				spec += "," + resultsDir + "=" + stResultsFolderID
			}
			if hostN, err = syncthing.NewNudger(fmt.Sprintf("http://127.0.0.1:%d", st.A.gui), st.A.key, spec, nil); err != nil {
				t.Fatal(err)
			}
			if agentN, err = syncthing.NewNudger(fmt.Sprintf("http://127.0.0.1:%d", st.B.gui), st.B.key, spec, nil); err != nil {
				t.Fatal(err)
			}
		}
		p.agent.Nudger, p.host.Nudger = agentN, hostN
		d, err := host.NewDaemon(p.host, host.DaemonOptions{AllowRoot: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Open(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		// The daemon's start publishes its catalog and notices: let them
		// settle before timing.
		st.WaitInSync(60 * time.Second)
		var ds []time.Duration
		for range m.n {
			time.Sleep(m.gap)
			start := time.Now()
			s, err := p.client.Submit(agent.SubmitOptions{Op: bridge.PingOp, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Minute)
			out, err := p.client.Wait(wctx, s.ID, nil)
			wcancel()
			if err != nil {
				t.Fatalf("%s: wait %s: %v", m.name, s.ID, err)
			}
			ds = append(ds, time.Since(start))
			if out.Receipt.Status != bridge.StatusDone {
				t.Fatalf("%s: ping %s: %s", m.name, s.ID, out.Receipt.Status)
			}
		}
		cancel()
		<-done
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		d.Close(cctx)
		ccancel()
		slices.Sort(ds)
		at := func(p float64) time.Duration { return ds[max(0, min(len(ds)-1, int(float64(len(ds))*p/100+0.5)-1))] }
		t.Logf("syncthing ping round trip, %s: n=%d p50 %s p90 %s p99 %s max %s", m.name, len(ds),
			at(50).Round(time.Millisecond), at(90).Round(time.Millisecond), at(99).Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
		// For cmd/bridge-bench, which runs this test and reads these lines.
		fmt.Printf("BENCH-SYNCTHING\t%s\t%d\t%d\t%d\t%d\n", m.name, len(ds), at(50), at(90), at(99))
	}
}

// stResultsFolderID is the Syncthing folder splitResultsFolder makes.
const stResultsFolderID = "bridge-results"

// splitResultsFolder makes dir (the host's results directory, relative to
// the shared folder) a Syncthing folder of its own on both sides, ignored
// by the shared one, as docs/OPERATIONS.md describes.
func splitResultsFolder(t *testing.T, st *stPair, dir string) {
	t.Helper()
	for _, in := range st.sides() {
		// The patterns docs/OPERATIONS.md asks for in both folders, and the
		// results directory left to its own folder.
		const patterns = "(?d)~$*\n(?d)*.tmp\n"
		if err := os.WriteFile(in.folderPath(".stignore"), []byte(patterns+"/"+dir+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(in.folderPath(dir+"/.stignore"), []byte(patterns), 0o644); err != nil {
			t.Fatal(err)
		}
		folder := map[string]any{
			"id": stResultsFolderID, "label": stResultsFolderID, "path": in.folderPath(dir), "type": "sendreceive",
			"fsWatcherEnabled": true, "fsWatcherDelayS": 10, "rescanIntervalS": 3600,
			"devices": []map[string]any{{"deviceID": st.A.id}, {"deviceID": st.B.id}},
		}
		if err := st.api(in, "PUT", "/rest/config/folders/"+stResultsFolderID, folder, nil); err != nil {
			t.Fatalf("share %s on %s: %v", dir, in.name, err)
		}
		st.Scan(in, "")
	}
	testkit.WaitFor(t, 60*time.Second, "the results folder to be in sync on both sides", func() bool {
		for _, in := range st.sides() {
			var fs stStatus
			if st.api(in, "GET", "/rest/db/status?folder="+stResultsFolderID, nil, &fs) != nil || fs.State != "idle" || fs.Need != 0 {
				return false
			}
			q := url.Values{"folder": {stResultsFolderID}, "device": {st.peer(in).id}}
			if st.api(in, "GET", "/rest/db/completion?"+q.Encode(), nil, &fs.peer) != nil || fs.peer.Completion < 100 {
				return false
			}
		}
		return true
	})
}
