//go:build !unix

package host

import (
	"os"
	"path/filepath"
)

// unsafePathDir says why dir must not be on a service's PATH, or "".
func unsafePathDir(dir string) string {
	if !filepath.IsAbs(dir) {
		return "not absolute"
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "missing"
	}
	return ""
}
