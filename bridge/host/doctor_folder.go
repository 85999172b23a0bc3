package host

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/doctor"
	"github.com/syncbridge/bridge/bridge/trust"
)

// folderFindings looks at the top of the host's requests directory: a
// directory of an agent this host does not trust holds requests that are
// never read (an agent not paired, or revoked), and the requests directory
// itself must be a directory reached without a link.
func folderFindings(h *trust.Home) []doctor.Finding {
	f, err := h.OpenFolder()
	if err != nil {
		return nil // CheckHome has said why
	}
	defer f.Close()
	root := bridge.ToHostRoot(h.Config.ID)
	fi, err := f.Lstat(root)
	if err != nil || !fi.IsDir() {
		what := "missing"
		switch {
		case err == nil && fi.Mode().Type()&fs.ModeSymlink != 0:
			what = "a link, not a directory"
		case err == nil:
			what = "a file, not a directory"
		case !errors.Is(err, fs.ErrNotExist):
			what = "behind a link (" + err.Error() + ")"
		}
		return []doctor.Finding{{Check: "folder", Severity: doctor.SeverityWarn,
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
			strangers = append(strangers, fmt.Sprintf("%s (%s)", e.Name, nOf(len(files), "file")))
		}
	}
	out := []doctor.Finding{{Check: "folder", Severity: doctor.SeverityOK, Message: "the requests directory " + root + " is in place"}}
	if len(strangers) == 0 {
		return append(out, doctor.Finding{Check: "untrusted-agents", Severity: doctor.SeverityOK,
			Message: "every agent directory in the requests directory is a trusted agent's"})
	}
	return append(out, doctor.Finding{Check: "untrusted-agents", Severity: doctor.SeverityWarn,
		Message: fmt.Sprintf("the requests of %s this host does not trust are never read: %s", nOf(len(strangers), "agent"), fewOf(strangers)),
		Fix:     "pair the agent (`bridge pair`) if you expect it; otherwise its directory is litter a folder writer may have made"})
}

// nOf is "1 file", "3 files".
func nOf(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
