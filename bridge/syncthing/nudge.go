package syncthing

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Nudger asks a local Syncthing to scan a file the bridge just published,
// so the change is sent at once instead of after the watcher's delay (10 s
// by default, seconds at best). It is only a hint: the POST is made in the
// background, a failure is logged and never fails the publish, and without
// a nudge the file still syncs on Syncthing's own schedule.
//
// A nil *Nudger does nothing, so callers hook it in unconditionally.
type Nudger struct {
	api     string // base URL, e.g. http://127.0.0.1:8384
	key     string
	folders []stFolder // longest path first
	log     *slog.Logger
	http    *http.Client

	// Paths nudged within coalesce of each other go in one request per
	// folder: a result's two files, a request's manifest and payload.
	mu      sync.Mutex
	pending []string
	// inflight counts the scans under way, and drained is closed when
	// the count falls back to 0 (nil while none is under way): a scan the
	// coalescing timer starts may begin while Flush waits, which a
	// WaitGroup does not allow (Add from zero during Wait).
	inflight int
	drained  chan struct{}
	badKey   atomic.Bool           // the key was refused once: said once
	failed   atomic.Pointer[error] // the last failed nudge (Failure)
}

// Failure is why the last nudge failed (Syncthing not running, a refused
// key), or nil: the command line says it once, in its own words, and a
// wait that times out names it.
func (n *Nudger) Failure() error {
	if n == nil {
		return nil
	}
	if e := n.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// fail records err as the last failure.
func (n *Nudger) fail(err error) {
	err = fmt.Errorf("the Syncthing nudge to %s failed: %w", n.api, err)
	n.failed.Store(&err)
}

// Ping asks Syncthing's API whether it answers, with the key: nil, or why
// not (not running, a refused key). For doctor.
func (n *Nudger) Ping(ctx context.Context) error {
	// First without the key: what answers on the port must answer as
	// Syncthing does before the key is sent. That screens out a server
	// that is not Syncthing by accident (another service on the port, a
	// plain 200); a local user who binds the port on purpose can answer
	// the same and get the key, as with any nudge (DESIGN).
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, n.api+"/rest/noauth/health", nil)
	if err != nil {
		return err
	}
	hresp, err := n.http.Do(hreq)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(hresp.Body, 256))
	hresp.Body.Close()
	var health struct{ Status string }
	syncthingLike := hresp.StatusCode == http.StatusOK && json.Unmarshal(body, &health) == nil && health.Status == "OK" ||
		// Releases before /rest/noauth/health was open (Debian's 1.19)
		// answer a request without a key so.
		hresp.StatusCode == http.StatusForbidden && strings.Contains(string(body), "CSRF Error")
	if !syncthingLike {
		return fmt.Errorf("what answers there is not Syncthing (its /rest/noauth/health answers %s); the key was not sent to it", hresp.Status)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.api+"/rest/system/ping", nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", n.key)
	resp, err := n.http.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("it answers %s", resp.Status)
	}
	return nil
}

// Flush sends what is pending now and waits, at most d, for the scans in
// flight: a command that exits right after its last write would otherwise
// exit before its nudge is sent.
func (n *Nudger) Flush(d time.Duration) {
	if n == nil {
		return
	}
	n.flush()
	n.mu.Lock()
	done := n.drained
	n.mu.Unlock()
	if done == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// coalesce is how long a nudge waits for others to join it.
const coalesce = 2 * time.Millisecond

// stFolder is a Syncthing folder and where it is rooted in the bridge
// folder ("" for the bridge folder's root).
type stFolder struct{ path, id string }

// nudgeTimeout bounds one scan request: a Syncthing that does not answer
// must not pile up goroutines.
const nudgeTimeout = 10 * time.Second

// NewNudger returns a Nudger for the Syncthing REST API at api (a URL such
// as http://127.0.0.1:8384) with API key key. folders names the Syncthing
// folders: the id of the one rooted at the bridge folder, or a
// comma-separated list of such an id and PATH=ID entries, each a Syncthing
// folder rooted at PATH (slash-separated, inside the bridge folder). A file
// is scanned in the folder with the longest path holding it.
//
// Why more than one: Syncthing sends at most one index update per folder
// and peer every 250 ms, and each side has just sent one (for the files it
// pulled) when the bridge answers. A host's results directory shared as a
// folder of its own sends the answer at once (docs/OPERATIONS.md).
//
// It returns nil, nil when api is empty: nudging is off. log may be nil.
func NewNudger(api, key, folders string, log *slog.Logger) (*Nudger, error) {
	if api == "" {
		return nil, nil
	}
	u, err := url.Parse(api)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("syncthing api %q: want a URL such as http://127.0.0.1:8384", api)
	}
	fs, err := parseSTFolders(folders)
	if err != nil {
		return nil, fmt.Errorf("syncthing api %s: %w", api, err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Nudger{api: strings.TrimRight(api, "/"), key: key, folders: fs, log: log,
		http: &http.Client{Timeout: nudgeTimeout, CheckRedirect: noRedirect}}, nil
}

// noRedirect: the API key goes to the address set, never where an answer
// points (a client following a redirect re-sends the header).
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// parseSTFolders reads NewNudger's folders, longest path first.
func parseSTFolders(spec string) ([]stFolder, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("a folder id is needed too (--syncthing-folder)")
	}
	var out []stFolder
	for _, item := range strings.Split(spec, ",") {
		dir, id, hasPath := strings.Cut(item, "=")
		if !hasPath {
			dir, id = "", dir
		}
		dir, id = strings.TrimSpace(dir), strings.TrimSpace(id)
		clean := path.Clean("/" + dir)[1:]
		switch {
		case id == "":
			return nil, fmt.Errorf("folder %q: want ID or PATH=ID", item)
		case hasPath && (clean == "" || clean != strings.Trim(dir, "/") || strings.Contains(dir, "\\")):
			return nil, fmt.Errorf("folder %q: want a clean path inside the bridge folder, such as hosts/<host>/to-agent", item)
		}
		for _, f := range out {
			if f.path == clean {
				return nil, fmt.Errorf("folder %q: two folders at %q", item, "/"+clean)
			}
		}
		out = append(out, stFolder{path: clean, id: id})
	}
	slices.SortFunc(out, func(a, b stFolder) int { return len(b.path) - len(a.path) })
	return out, nil
}

// folderOf returns the folder holding rel and rel's path inside it.
func (n *Nudger) folderOf(rel string) (id, sub string, ok bool) {
	for _, f := range n.folders {
		if f.path == "" {
			return f.id, rel, true
		}
		if rest, found := strings.CutPrefix(rel, f.path); found && (rest == "" || rest[0] == '/') {
			return f.id, strings.TrimPrefix(rest, "/"), true
		}
	}
	return "", "", false
}

// Nudge asks Syncthing, in the background, to scan rels (slash-separated
// paths relative to the bridge folder; a removed file's path makes the
// removal known): one request per Syncthing folder. A path in none of the
// folders is left to Syncthing's own watcher. It returns at once.
func (n *Nudger) Nudge(rels ...string) {
	if n == nil || len(rels) == 0 {
		return
	}
	n.mu.Lock()
	first := len(n.pending) == 0
	n.pending = append(n.pending, rels...)
	n.mu.Unlock()
	if first {
		time.AfterFunc(coalesce, n.flush)
	}
}

// flush sends what was nudged since the first pending nudge.
func (n *Nudger) flush() {
	n.mu.Lock()
	rels := n.pending
	n.pending = nil
	n.mu.Unlock()
	var order []string
	subs := map[string][]string{}
	for _, rel := range rels {
		id, sub, ok := n.folderOf(rel)
		if !ok {
			continue
		}
		if _, seen := subs[id]; !seen {
			order = append(order, id)
		}
		subs[id] = append(subs[id], sub)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range order {
		if n.inflight == 0 {
			n.drained = make(chan struct{})
		}
		n.inflight++
		go func() {
			defer func() {
				n.mu.Lock()
				if n.inflight--; n.inflight == 0 {
					close(n.drained)
					n.drained = nil
				}
				n.mu.Unlock()
			}()
			n.scan(id, subs[id])
		}()
	}
}

// scan makes one POST /rest/db/scan?folder=ID&sub=PATH[&sub=PATH...] and
// logs a failure.
func (n *Nudger) scan(folder string, rels []string) {
	q := url.Values{"folder": {folder}, "sub": rels}
	ctx, cancel := context.WithTimeout(context.Background(), nudgeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.api+"/rest/db/scan?"+q.Encode(), nil)
	if err != nil {
		n.fail(err)
		n.log.Warn("syncthing nudge", "files", rels, "err", err)
		return
	}
	req.Header.Set("X-API-Key", n.key)
	resp, err := n.http.Do(req)
	if err != nil {
		n.fail(err)
		n.log.Warn("syncthing nudge", "files", rels, "err", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
		n.fail(fmt.Errorf("the API key is refused (%s)", resp.Status))
		if !n.badKey.Swap(true) {
			n.log.Warn("syncthing nudge: the API key is refused; files sync on Syncthing's own schedule (seconds later)",
				"api", n.api, "status", resp.Status,
				"hint", "set the key of Syncthing's Settings > GUI > API Key: bridge syncthing setup, or --syncthing-key / BRIDGE_SYNCTHING_KEY")
		}
		return
	}
	if resp.StatusCode/100 != 2 {
		n.fail(fmt.Errorf("it answers %s", resp.Status))
		n.log.Warn("syncthing nudge", "files", rels, "status", resp.Status, "answer", strings.TrimSpace(string(body)))
		return
	}
	n.log.Debug("syncthing nudged", "files", rels)
}
