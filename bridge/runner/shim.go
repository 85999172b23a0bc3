package runner

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// The resource-limit shim. Go's os/exec has no hook between fork and exec,
// so limits cannot be set in the child from the parent: setrlimit in the
// daemon would limit the daemon (and every other child), and prlimit after
// Start leaves a window in which the program runs unlimited. Instead the
// daemon starts its own executable as
//
//	<self> __bridge_exec__ <cpu>,<as>,<nofile>,<nproc>,<fsize> <path> <argv...>
//
// with the child's exact environment; [Main] recognises that, applies the
// limits to itself and execve's path with argv. The limits survive the
// execve, the pid stays the same, and no moment passes in which the program
// runs without them.
//
// The shim reports through fd 3, a pipe marked close-on-exec: "R" just before
// execve, then "E<errno> <what>" if something failed, so the runner can tell
// a started program ("R", then EOF at execve) from a failure and from a
// binary that never called Main (EOF with nothing written).
const (
	shimArg      = "__bridge_exec__"
	shimStatusFD = 3
)

// Main must be the first statement of main() in every binary that imports
// this package (and of TestMain in its tests): when the process was started
// as the resource-limit shim it applies the limits and execs the real program,
// never returning; otherwise it returns at once.
func Main() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case shimArg:
		shimMain(os.Args[2:])
		os.Exit(127) // not reached: shimMain execs or exits
	case keeperArg:
		keeperMain() // Linux: a run's keeper (keeper_linux.go); never returns
		os.Exit(127)
	}
}

func shimArgv(self string, l Limits, path string, argv []string) []string {
	enc := fmt.Sprintf("%d,%d,%d,%d,%d", l.CPUSeconds, l.AddressSpace, l.OpenFiles, l.Processes, l.FileSize)
	return append([]string{self, shimArg, enc, path}, argv...)
}

// parseShimStatus interprets what the shim wrote to its status pipe.
func parseShimStatus(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("resource-limit shim did not run: the binary must call runner.Main first thing in main")
	}
	rest := bytes.TrimPrefix(b, []byte("R"))
	if len(rest) == 0 && len(b) == 1 {
		return nil
	}
	msg, ok := bytes.CutPrefix(rest, []byte("E"))
	if ok {
		num, what, ok := strings.Cut(string(msg), " ")
		if n, err := strconv.ParseUint(num, 10, 32); ok && err == nil {
			return fmt.Errorf("resource-limit shim: %s: %w", what, syscall.Errno(n))
		}
	}
	return fmt.Errorf("resource-limit shim: unexpected status %q", b)
}
