package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/syncbridge/bridge/bridge"
	"github.com/syncbridge/bridge/bridge/trust"
)

// checkPrivilege refuses to serve with more rights than needed, or with
// state others could read or change (issue: least privilege): not as root
// unless allowed; the home owned by this user and closed to group and
// world; private keys closed to group and world. Each refusal names the fix.
func checkPrivilege(home *trust.Home, allowRoot bool) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	if os.Geteuid() == 0 && !allowRoot {
		return bridge.WithHint(errors.New("serve: refusing to run as root"),
			"run `bridge serve` as the user whose tools the ops use; if you really mean root, pass --allow-root")
	}
	check := func(p string, maxPerm os.FileMode, fix string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
			// Not "chown it": what another user's directory holds may
			// be theirs (a planted key or policy), and would be adopted.
			return bridge.WithHint(fmt.Errorf("serve: %s belongs to uid %d, not to this user (%d)", p, uid, os.Geteuid()), "make a new home of your own with `bridge init`, and pair again; do not take over another user's")
		}
		if fi.Mode().Perm()&^maxPerm != 0 {
			return bridge.WithHint(fmt.Errorf("serve: %s is open to others (mode %o)", p, fi.Mode().Perm()), fix, p)
		}
		return nil
	}
	if err := check(home.Dir, 0o700, "chmod 700 %s"); err != nil {
		return err
	}
	secrets, _ := filepath.Glob(home.Path(trust.OwnKeysDir, "*.secret"))
	for _, p := range append([]string{home.Path(trust.IdentityName)}, secrets...) {
		if err := check(p, 0o600, "chmod 600 %s"); err != nil {
			return err
		}
	}
	return nil
}
