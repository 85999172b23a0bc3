package syncthing

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
	"github.com/syncbridge/bridge/syncsafe"
)

// SetupOptions say where the local Syncthing is; empty fields are
// found in its config.xml.
type SetupOptions struct {
	API, Key string
	// ConfigXML is Syncthing's config.xml; "" looks in the places
	// Syncthing keeps it (ConfigPaths).
	ConfigXML string
	// ShareResults shares each results directory this side reads or
	// writes (hosts/<host>/to-agent) as a Syncthing folder of its own, with
	// the devices of the bridge folder, and leaves it out of the bridge
	// folder: a result then goes out at once instead of waiting for the
	// bridge folder's next index update (docs/OPERATIONS.md). Both sides
	// run it; the folder id is derived from the host's id, so the two
	// folders meet.
	ShareResults bool
	DryRun       bool
}

// SetupReport is what Setup found and did.
type SetupReport struct {
	API        string   `json:"api"`
	ConfigXML  string   `json:"config_xml,omitempty"` // where the key was read, if it was
	Folder     string   `json:"folder_id"`            // the Syncthing folder whose root is the bridge folder
	Results    []string `json:"results_folders"`      // PATH=ID of folders inside it
	Created    []string `json:"created"`              // folders this run added to Syncthing
	Folders    string   `json:"folders"`              // what the nudge is given (--syncthing-folder)
	SavedTo    string   `json:"saved_to,omitempty"`
	Unshared   []string `json:"unshared_devices,omitempty"`
	DryRun     bool     `json:"dry_run"`
	IgnoreLine []string `json:"ignore_lines_added"`
}

// ConfigPaths are where Syncthing keeps config.xml, most likely
// first: its state directory since 1.27, its config directory before.
func ConfigPaths() []string {
	var out []string
	if d := os.Getenv("STHOMEDIR"); d != "" {
		out = append(out, filepath.Join(d, "config.xml"))
	}
	home, _ := os.UserHomeDir()
	switch runtime.GOOS {
	case "darwin":
		out = append(out, filepath.Join(home, "Library", "Application Support", "Syncthing", "config.xml"))
	case "windows":
		out = append(out, filepath.Join(os.Getenv("LOCALAPPDATA"), "Syncthing", "config.xml"))
	default:
		state := os.Getenv("XDG_STATE_HOME")
		if state == "" {
			state = filepath.Join(home, ".local", "state")
		}
		cfg := os.Getenv("XDG_CONFIG_HOME")
		if cfg == "" {
			cfg = filepath.Join(home, ".config")
		}
		out = append(out, filepath.Join(state, "syncthing", "config.xml"), filepath.Join(cfg, "syncthing", "config.xml"))
	}
	return out
}

// readSyncthingGUI reads the GUI address and API key from config.xml.
func readSyncthingGUI(file string) (api, key string, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", "", err
	}
	var cfg struct {
		GUI struct {
			TLS     bool   `xml:"tls,attr"`
			Address string `xml:"address"`
			APIKey  string `xml:"apikey"`
		} `xml:"gui"`
	}
	if err := xml.Unmarshal(data, &cfg); err != nil {
		return "", "", fmt.Errorf("read %s: %w", file, err)
	}
	addr := cfg.GUI.Address
	if addr == "" || cfg.GUI.APIKey == "" {
		return "", "", fmt.Errorf("read %s: no GUI address or API key in it", file)
	}
	if strings.HasPrefix(addr, "0.0.0.0:") {
		addr = "127.0.0.1:" + strings.TrimPrefix(addr, "0.0.0.0:")
	}
	scheme := "http"
	if cfg.GUI.TLS {
		scheme = "https"
	}
	if strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, "unix") {
		return "", "", fmt.Errorf("read %s: the GUI listens on a unix socket (%s); pass --syncthing-api and --syncthing-key", file, addr)
	}
	return scheme + "://" + addr, cfg.GUI.APIKey, nil
}

// stFolderConfig is the part of Syncthing's folder configuration setup
// reads; a new folder is created from the defaults with these fields.
type stFolderConfig struct {
	ID      string           `json:"id"`
	Label   string           `json:"label,omitempty"`
	Path    string           `json:"path"`
	Type    string           `json:"type,omitempty"`
	Devices []map[string]any `json:"devices"`
	Watch   *bool            `json:"fsWatcherEnabled,omitempty"`
}

// stClient is a tiny client of Syncthing's REST API.
type stClient struct {
	api, key string
	http     *http.Client
}

var errSyncthingKey = errors.New("the API key is refused")

func (c *stClient) call(method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.callCtx(ctx, method, path, in, out)
}

// callCtx is call within ctx.
func (c *stClient) callCtx(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.api+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", c.key)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("syncthing %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	switch {
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("syncthing %s %s: %w (%s)", method, path, errSyncthingKey, resp.Status)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("syncthing %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(data)))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// samePath reports whether two paths name the same directory.
func samePath(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(fa, fb)
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

// plainDirIn returns rel (slash-separated) inside base, refusing any
// component that is a link or not a directory, and creating missing ones
// if create. A folder writer can plant a link where the results directory
// belongs (the bridge folder carries it); sharing the link's target as a
// Syncthing folder would hand the folder's devices a directory anywhere on
// this machine.
func plainDirIn(base, rel string, create bool) (string, error) {
	cur := base
	for _, c := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist) && create:
			if err := os.Mkdir(cur, 0o700); err != nil {
				return "", fmt.Errorf("syncthing setup: %w", err)
			}
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return "", fmt.Errorf("syncthing setup: %w", err)
		case !fi.IsDir():
			return "", bridge.WithHint(fmt.Errorf("syncthing setup: %s is not a plain directory (%s): refusing to share it", cur, fi.Mode().Type()),
				"something in the folder put it there, maybe on purpose: remove it (`bridge doctor` checks the folder), then run this again")
		}
	}
	if !create {
		return cur, nil
	}
	realBase, err1 := filepath.EvalSymlinks(base)
	real, err2 := filepath.EvalSymlinks(cur)
	if err1 != nil || err2 != nil || real != filepath.Join(realBase, filepath.FromSlash(rel)) {
		return "", fmt.Errorf("syncthing setup: %s does not stay inside the bridge folder; refusing to share it", cur)
	}
	return cur, nil
}

// tempIgnores are the ignore lines of the sync clients' temporary files
// (docs/OPERATIONS.md), which `syncthing setup` puts in the bridge
// folder's rules when they are missing.
var tempIgnores = []string{"(?d)~$*", "(?d)*.tmp"}

// TempIgnores returns the ignore lines every bridge folder's .stignore
// needs (the doctor checks them).
func TempIgnores() []string { return slices.Clone(tempIgnores) }

// resultsFolderID is the Syncthing folder id of a host's results directory
// shared on its own: derived from the host's id, so the host's and the
// agent's setup make the same one.
func resultsFolderID(hostID string) string { return "bridge-results-" + hostID[:16] }

// Setup finds the local Syncthing, the folder that holds the
// bridge folder and any folder inside it, optionally shares the results
// directories as folders of their own, checks that a nudge is accepted,
// and saves the nudge settings in the home (ConfigName).
func Setup(h *trust.Home, o SetupOptions) (*SetupReport, error) {
	rep := &SetupReport{DryRun: o.DryRun, Results: []string{}, Created: []string{}, IgnoreLine: []string{}}
	api, key := o.API, o.Key
	if api == "" || key == "" {
		paths := ConfigPaths()
		if o.ConfigXML != "" {
			paths = []string{o.ConfigXML}
		}
		var errs []error
		for _, p := range paths {
			a, k, err := readSyncthingGUI(p)
			if err != nil {
				if !errors.Is(err, fs.ErrNotExist) || o.ConfigXML != "" {
					errs = append(errs, err)
				}
				continue
			}
			if api == "" {
				api = a
			}
			if key == "" {
				key = k
			}
			rep.ConfigXML = p
			break
		}
		if api == "" || key == "" {
			missing := "no Syncthing config.xml found (looked in " + strings.Join(paths, ", ") + ")"
			if err := errors.Join(errs...); err != nil {
				missing += ": " + err.Error()
			}
			if o.API != "" {
				return nil, bridge.WithHint(fmt.Errorf("syncthing setup: --api without --key, and %s", missing),
					"pass --key KEY too: Syncthing's Settings > GUI > API Key")
			}
			return nil, bridge.WithHint(fmt.Errorf("syncthing setup: %s", missing),
				"pass --config FILE, or --api URL and --key KEY (Syncthing's Settings > GUI shows both)")
		}
	}
	u, err := url.Parse(api)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, bridge.WithHint(fmt.Errorf("syncthing setup: API %q is not a URL", api), "pass the GUI address as a URL, such as --api http://127.0.0.1:8384")
	}
	rep.API = strings.TrimRight(api, "/")
	c := &stClient{api: rep.API, key: key, http: &http.Client{Timeout: 30 * time.Second, CheckRedirect: noRedirect}}
	var folders []stFolderConfig
	if err := c.call("GET", "/rest/config/folders", nil, &folders); err != nil {
		if errors.Is(err, errSyncthingKey) {
			return nil, bridge.WithHint(fmt.Errorf("syncthing setup: %w", err), "the key is Settings > GUI > API Key in Syncthing; pass it with --key")
		}
		hint := fmt.Sprintf("is Syncthing running on this machine, with its GUI at %s?", rep.API)
		if rep.ConfigXML != "" {
			// Syncthing started with --gui-address listens elsewhere than
			// its config.xml says.
			hint += fmt.Sprintf(" (read from %s; a Syncthing started with --gui-address listens elsewhere: pass --api URL)", rep.ConfigXML)
		}
		return nil, bridge.WithHint(fmt.Errorf("syncthing setup: %w", err), "%s", hint)
	}
	bridgeDir := h.Config.Folder
	var root *stFolderConfig
	for i := range folders {
		if samePath(trust.ExpandTilde(folders[i].Path), bridgeDir) {
			root = &folders[i]
		}
	}
	if root == nil {
		return nil, bridge.WithHint(fmt.Errorf("syncthing setup: no Syncthing folder has its root at the bridge folder %s", bridgeDir),
			"share that very directory in Syncthing (Add Folder, its path), with the other side's device, then run this again")
	}
	rep.Folder = root.ID
	inside := map[string]string{} // rel path → folder id
	for _, f := range folders {
		p := trust.ExpandTilde(f.Path)
		if rel, err := filepath.Rel(bridgeDir, p); err == nil && rel != "." && !strings.HasPrefix(rel, "..") && !filepath.IsAbs(rel) {
			inside[filepath.ToSlash(rel)] = f.ID
		}
	}
	// The bridge folder's ignore rules: the temporary files of the sync
	// clients (OPERATIONS.md), and with --share-results each results
	// directory, which travels as a folder of its own.
	var ignores struct {
		Ignore []string `json:"ignore"`
	}
	if err := c.call("GET", "/rest/db/ignores?folder="+url.QueryEscape(root.ID), nil, &ignores); err != nil {
		return nil, fmt.Errorf("syncthing setup: %w", err)
	}
	newIgnores := slices.Clone(ignores.Ignore)
	for _, line := range tempIgnores {
		if !slices.ContainsFunc(newIgnores, func(l string) bool { return strings.TrimPrefix(l, "(?d)") == strings.TrimPrefix(line, "(?d)") }) {
			newIgnores = append(newIgnores, line)
			rep.IgnoreLine = append(rep.IgnoreLine, line)
		}
	}
	if o.ShareResults {
		var hosts []string
		if h.Config.Role == "host" {
			hosts = []string{h.Config.ID}
		} else {
			peers, err := h.Peers()
			if err != nil {
				return nil, err
			}
			for _, p := range peers {
				if p.Role == "host" {
					hosts = append(hosts, p.ID)
				}
			}
			if len(hosts) == 0 {
				return nil, bridge.WithHint(errors.New("syncthing setup: --share-results: this agent trusts no host yet"), "pair first (`bridge pair`), then run this again")
			}
		}
		for _, host := range hosts {
			rel := bridge.ToAgentRoot(host)
			line := "/" + rel
			if !slices.Contains(newIgnores, line) {
				newIgnores = append(newIgnores, line)
				rep.IgnoreLine = append(rep.IgnoreLine, line)
			}
			if _, ok := inside[rel]; ok {
				continue
			}
			id := resultsFolderID(host)
			inside[rel] = id
			rep.Created = append(rep.Created, id)
			dir, err := plainDirIn(bridgeDir, rel, !o.DryRun)
			if err != nil {
				return nil, err
			}
			if o.DryRun {
				continue
			}
			watch := true
			nf := stFolderConfig{ID: id, Label: "bridge results " + host[:8], Path: dir,
				Type: "sendreceive", Devices: root.Devices, Watch: &watch}
			if err := c.call("PUT", "/rest/config/folders/"+url.PathEscape(id), nf, nil); err != nil {
				return nil, fmt.Errorf("syncthing setup: add the results folder: %w", err)
			}
			if err := c.call("POST", "/rest/db/ignores?folder="+url.QueryEscape(id), map[string]any{"ignore": tempIgnores}, nil); err != nil {
				return nil, fmt.Errorf("syncthing setup: ignore rules of the results folder: %w", err)
			}
		}
	}
	if len(rep.IgnoreLine) > 0 && !o.DryRun {
		if err := c.call("POST", "/rest/db/ignores?folder="+url.QueryEscape(root.ID), map[string]any{"ignore": newIgnores}, nil); err != nil {
			return nil, fmt.Errorf("syncthing setup: the bridge folder's ignore rules: %w", err)
		}
	}
	spec := []string{root.ID}
	for _, rel := range slices.Sorted(maps.Keys(inside)) {
		spec = append(spec, rel+"="+inside[rel])
		rep.Results = append(rep.Results, rel+"="+inside[rel])
	}
	rep.Folders = strings.Join(spec, ",")
	if _, err := NewNudger(rep.API, key, rep.Folders, nil); err != nil {
		return nil, fmt.Errorf("syncthing setup: %w", err)
	}
	if o.DryRun {
		return rep, nil
	}
	// A scan of the marker: the key works and the folder is Syncthing's.
	if err := c.call("POST", "/rest/db/scan?folder="+url.QueryEscape(root.ID)+"&sub="+url.QueryEscape(syncsafe.MarkerName), nil, nil); err != nil {
		return nil, fmt.Errorf("syncthing setup: a test nudge: %w", err)
	}
	if err := SaveConfig(h, Config{API: rep.API, Key: key, Folders: rep.Folders}); err != nil {
		return nil, err
	}
	rep.SavedTo = h.Path(ConfigName)
	return rep, nil
}
