//go:build !linux

package runner

import (
	"runtime"
	"syscall"
	"time"
)

// Without cgroups or a child subreaper, a run is held by its process group
// alone (and on Windows by nothing beyond the program itself).

type hold struct{ cpu time.Duration }

func newHold(*State) (*hold, []string) { return &hold{}, nil }

func (*hold) start(_ *syscall.SysProcAttr, launch func() (int, error)) error {
	_, err := launch()
	return err
}

func (*hold) notes() []string               { return nil }
func (*hold) signal(int, syscall.Signal)    {}
func (*hold) kill()                         {}
func (*hold) await(_, _ time.Duration) bool { return true }
func (*hold) release()                      {}
func (*hold) reaped(int)                    {}
func (*hold) contained() bool               { return false }

// Containment says how [Run] holds every process of an op in process pid
// (0: this one): here the process group alone, or on Windows the program
// alone.
func Containment(int) string { return containmentNow() }

func containmentNow() string {
	if runtime.GOOS == "windows" {
		return "the program only (no process groups on windows)"
	}
	return "process group only (no cgroups or child subreaper on " + runtime.GOOS + ")"
}

// keeperArg is Linux's; no process is started as a keeper here.
const keeperArg = "__bridge_keep__"

func keeperMain() {}

// CgroupRoot is where the cgroup v2 hierarchy is mounted: nowhere here.
func CgroupRoot() string { return "" }
