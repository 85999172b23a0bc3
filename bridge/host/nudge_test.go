package host

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/agent"
	"github.com/syncbridge/bridge/bridge/host/internal/testkit"
	"github.com/syncbridge/bridge/bridge/syncthing"
)

// scanRecorder is a real HTTP server standing in for Syncthing's REST API:
// it records every scan request it is sent.
type scanRecorder struct {
	mu     sync.Mutex
	subs   []string
	groups [][]string // the paths of each scan request
	bad    []string
	srv    *httptest.Server
	fail   bool
	posts  chan struct{}
}

func newScanRecorder(t *testing.T, key string) *scanRecorder {
	r := &scanRecorder{posts: make(chan struct{}, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		q := req.URL.Query()
		switch {
		case req.Method != http.MethodPost || req.URL.Path != "/rest/db/scan":
			r.bad = append(r.bad, req.Method+" "+req.URL.Path)
		case req.Header.Get("X-API-Key") != key:
			r.bad = append(r.bad, "key "+req.Header.Get("X-API-Key"))
		case q.Get("folder") == "fid":
			r.subs = append(r.subs, q["sub"]...)
			r.groups = append(r.groups, q["sub"])
		case q.Get("folder") == "res": // TestNudgerFolders' second folder
			for _, sub := range q["sub"] {
				r.subs = append(r.subs, "res:"+sub)
			}
		default:
			r.bad = append(r.bad, "folder "+q.Get("folder"))
		}
		if r.fail {
			http.Error(w, "boom", http.StatusInternalServerError)
		}
		select {
		case r.posts <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// waitSubs waits until every path in want was asked to be scanned.
func (r *scanRecorder) waitSubs(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(r.subs, w) })
		bad := slices.Clone(r.bad)
		seen := slices.Clone(r.subs)
		r.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("malformed scan requests: %v", bad)
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scan asked for %v; asked: %v", missing, seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewNudger(t *testing.T) {
	t.Parallel()
	n, err := syncthing.NewNudger("", "k", "fid", nil)
	if n != nil || err != nil {
		t.Fatalf("no URL: got %v, %v; want nudging off", n, err)
	}
	n.Nudge("a/b") // a nil Nudger does nothing
	for _, bad := range []string{"localhost:8384", "ftp://x/", "http://"} {
		if _, err := syncthing.NewNudger(bad, "k", "fid", nil); err == nil {
			t.Errorf("NewNudger(%q) accepted a bad URL", bad)
		}
	}
	for _, bad := range []string{"", " ", "fid,", "=fid", "a/../b=fid", "../b=fid", "a//b=fid", "a/./b=fid", "fid,x=res,x/=res2", "fid,=res"} {
		if _, err := syncthing.NewNudger("http://127.0.0.1:8384", "k", bad, nil); err == nil {
			t.Errorf("NewNudger accepted folders %q", bad)
		}
	}
}

// TestNudgerFolders: with a results directory shared as a Syncthing folder
// of its own, a file there is scanned in that folder, by its path inside
// it, and anything else in the folder rooted at the bridge folder; one
// nudge makes one request per folder.
func TestNudgerFolders(t *testing.T) {
	t.Parallel()
	r := newScanRecorder(t, "k")
	n, err := syncthing.NewNudger(r.srv.URL, "k", " hosts/h1/to-agent = res , fid", nil)
	if err != nil {
		t.Fatal(err)
	}
	n.Nudge("hosts/h1/to-agent/a1/x.output", "hosts/h1/to-agent/a1/x.result", "hosts/h1/to-host/a1/x.ack", "hosts/h1/to-agentx/y")
	r.waitSubs(t, "res:a1/x.output", "res:a1/x.result", "hosts/h1/to-host/a1/x.ack", "hosts/h1/to-agentx/y")
	// Without a folder at the root, a path outside the others is left alone.
	only, err := syncthing.NewNudger(r.srv.URL, "k", "hosts/h1/to-agent=res", nil)
	if err != nil {
		t.Fatal(err)
	}
	only.Nudge("hosts/h1/to-host/a1/z.ack", "hosts/h1/to-agent/a1/z.result")
	// Flush sends the batch at once and waits for every scan it made, so a
	// scan of the path left alone would be in by now (not a pause that a
	// slow machine outruns).
	only.Flush(time.Minute)
	r.waitSubs(t, "res:a1/z.result")
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Contains(r.subs, "hosts/h1/to-host/a1/z.ack") || len(r.bad) > 0 {
		t.Fatalf("a path in no folder was nudged: %v %v", r.subs, r.bad)
	}
}

// TestNudgerPosts: a nudge is a POST /rest/db/scan with the key, the folder
// id and every path; a failing Syncthing costs a log line, nothing else.
func TestNudgerPosts(t *testing.T) {
	t.Parallel()
	r := newScanRecorder(t, "secret")
	n, err := syncthing.NewNudger(r.srv.URL+"/", "secret", "fid", nil)
	if err != nil {
		t.Fatal(err)
	}
	n.Nudge("x/one.manifest", "x/one.payload")
	r.waitSubs(t, "x/one.manifest", "x/one.payload")
	r.mu.Lock()
	r.fail = true
	r.mu.Unlock()
	n.Nudge("x/two.ack")
	r.waitSubs(t, "x/two.ack")
}

// TestNudgeHooks: with nudgers on both sides, every file either side
// writes into the folder is nudged: the request the agent published, the
// result the daemon published (its two files in one scan), the ack, a
// cancel, a rotation statement, the catalog.
func TestNudgeHooks(t *testing.T) {
	t.Parallel()
	r := newScanRecorder(t, "k")
	p := newPair(t, testPolicy)
	var err error
	if p.agent.Nudger, err = syncthing.NewNudger(r.srv.URL, "k", "fid", nil); err != nil {
		t.Fatal(err)
	}
	if p.host.Nudger, err = syncthing.NewNudger(r.srv.URL, "k", "fid", nil); err != nil {
		t.Fatal(err)
	}
	d, err := NewDaemon(p.host, DaemonOptions{AllowRoot: true, Rescan: 500 * time.Millisecond, Env: envWith(map[string]string{"COUNT_FILE": filepath.Join(t.TempDir(), "count")})})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(); err != nil {
		t.Fatal(err)
	}
	serveOpened(t, d)
	out := p.run(t, agent.SubmitOptions{Op: bridge.PingOp})
	if err := p.client.Ack(out); err != nil {
		t.Fatal(err)
	}
	h, a, id := p.host.Config.ID, p.agent.Config.ID, out.Receipt.ID
	r.waitSubs(t, bridge.RequestPath(h, a, id, bridge.ExtPayload), bridge.RequestPath(h, a, id, bridge.ExtManifest),
		bridge.ResultPath(h, a, id, bridge.ExtOutput), bridge.ResultPath(h, a, id, bridge.ExtResult), bridge.RequestPath(h, a, id, bridge.ExtAck),
		bridge.CatalogPath(h, a))
	together := func(x, y string) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.ContainsFunc(r.groups, func(g []string) bool { return slices.Contains(g, x) && slices.Contains(g, y) })
	}
	if !together(bridge.ResultPath(h, a, id, bridge.ExtOutput), bridge.ResultPath(h, a, id, bridge.ExtResult)) {
		t.Errorf("a result's output and manifest were not nudged in one scan: %v", r.groups)
	}
	if !together(bridge.RequestPath(h, a, id, bridge.ExtPayload), bridge.RequestPath(h, a, id, bridge.ExtManifest)) {
		t.Errorf("a request's payload and manifest were not nudged in one scan: %v", r.groups)
	}
	slow, err := p.client.Submit(agent.SubmitOptions{Op: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.client.Cancel(slow.ID); err != nil {
		t.Fatal(err)
	}
	r.waitSubs(t, bridge.RequestPath(h, a, slow.ID, bridge.ExtCancel))
	r.mu.Lock()
	n := len(r.subs)
	r.mu.Unlock()
	if _, err := p.agent.Rotate(time.Hour); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "a scan of the rotation statement", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.ContainsFunc(r.subs[n:], func(s string) bool { return strings.HasSuffix(s, ".rotation") })
	})
}
