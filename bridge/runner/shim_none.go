//go:build !linux && !darwin

package runner

import (
	"os"
	"runtime"
)

// shimExecutable: no resource-limit shim on this platform; limits are
// reported as not applied in Outcome.Notes.
func shimExecutable() (string, string) {
	return "", "resource limits not supported on " + runtime.GOOS + ": not applied"
}

func shimMain([]string) { os.Exit(127) }
