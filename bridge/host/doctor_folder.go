package host

import (
	"fmt"
	"strings"

	"github.com/syncbridge/bridge/bridge"
)

// folderFindings looks at the top of the host's requests directory: a
// directory of an agent this host does not trust holds requests that are
// never read (an agent not paired, or revoked), and the requests directory
// itself must be a directory reached without a link.
func folderFindings(h *bridge.Home) []bridge.Finding {
	f, err := h.OpenFolder()
	if err != nil {
		return nil // CheckHome has said why
	}
	defer f.Close()
	root := bridge.ToHostRoot(h.Config.ID)
	fi, err := f.Lstat(root)
	if err != nil || !fi.IsDir() {
		what := "missing"
		if err == nil {
			what = "a " + fi.Mode().Type().String() + ", not a directory"
		} else if !strings.Contains(err.Error(), "no such file") {
			what = "not reached without a link (" + err.Error() + ")"
		}
		return []bridge.Finding{{Check: "folder", Severity: bridge.SeverityWarn,
			Message: fmt.Sprintf("the requests directory %s is %s: no request can arrive", root, what),
			Fix:     "`bridge serve` makes it at its start; if a sync client is applying a rename or a restore, wait for it"}}
	}
	ents, err := f.List(root)
	if err != nil {
		return nil
	}
	peers, _ := h.Peers()
	trusted := map[string]bool{}
	for _, p := range peers {
		if p.Role == "agent" {
			trusted[p.ID] = true
		}
	}
	var strangers []string
	for _, e := range ents {
		if e.Type.IsDir() && bridge.ValidID(e.Name) && !trusted[e.Name] {
			files, _ := f.List(root + "/" + e.Name)
			strangers = append(strangers, fmt.Sprintf("%s (%s)", e.Name, plural(len(files), "file")))
		}
	}
	if len(strangers) == 0 {
		return nil
	}
	return []bridge.Finding{{Check: "untrusted-agents", Severity: bridge.SeverityWarn,
		Message: fmt.Sprintf("requests of %s this host does not trust are never read: %s", plural(len(strangers), "agent"), fewOf(strangers)),
		Fix:     "pair the agent (`bridge pair`) if you expect it; otherwise its directory is litter a folder writer may have made"}}
}
