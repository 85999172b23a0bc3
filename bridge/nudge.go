package bridge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
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
	api    string // base URL, e.g. http://127.0.0.1:8384
	key    string
	folder string
	log    *slog.Logger
	http   *http.Client
}

// nudgeTimeout bounds one scan request: a Syncthing that does not answer
// must not pile up goroutines.
const nudgeTimeout = 10 * time.Second

// NewNudger returns a Nudger for the Syncthing REST API at api (a URL such
// as http://127.0.0.1:8384) with API key key and folder id folder. It
// returns nil, nil when api is empty: nudging is off. log may be nil.
func NewNudger(api, key, folder string, log *slog.Logger) (*Nudger, error) {
	if api == "" {
		return nil, nil
	}
	u, err := url.Parse(api)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("syncthing api %q: want a URL such as http://127.0.0.1:8384", api)
	}
	if folder == "" {
		return nil, fmt.Errorf("syncthing api %s: a folder id is needed too (--syncthing-folder)", api)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Nudger{api: strings.TrimRight(api, "/"), key: key, folder: folder, log: log,
		http: &http.Client{Timeout: nudgeTimeout}}, nil
}

// Nudge asks Syncthing, in the background, to scan rels (slash-separated
// paths relative to the bridge folder, which must be the root of the
// Syncthing folder; a removed file's path makes the removal known). It
// returns at once.
func (n *Nudger) Nudge(rels ...string) {
	if n == nil || len(rels) == 0 {
		return
	}
	go n.scan(rels)
}

// scan makes one POST /rest/db/scan?folder=ID&sub=PATH[&sub=PATH...] and
// logs a failure.
func (n *Nudger) scan(rels []string) {
	q := url.Values{"folder": {n.folder}, "sub": rels}
	ctx, cancel := context.WithTimeout(context.Background(), nudgeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.api+"/rest/db/scan?"+q.Encode(), nil)
	if err != nil {
		n.log.Warn("syncthing nudge", "files", rels, "err", err)
		return
	}
	req.Header.Set("X-API-Key", n.key)
	resp, err := n.http.Do(req)
	if err != nil {
		n.log.Warn("syncthing nudge", "files", rels, "err", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		n.log.Warn("syncthing nudge", "files", rels, "status", resp.Status, "answer", strings.TrimSpace(string(body)))
		return
	}
	n.log.Debug("syncthing nudged", "files", rels)
}
