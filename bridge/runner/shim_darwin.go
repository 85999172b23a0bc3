package runner

import (
	"os"
	"syscall"
)

func shimExecutable() (string, string) {
	exe, err := os.Executable()
	if err != nil {
		return "", "resource limits not applied: cannot find the bridge executable: " + err.Error()
	}
	return exe, ""
}

// preparedExec: darwin enters the kernel through libc, so the shim uses
// syscall.Exec, which allocates after the limits are set. RLIMIT_AS is not
// enforced by darwin, so that allocation cannot fail for lack of address space.
type preparedExec struct {
	path       string
	argv, envv []string
}

func prepareExec(path string, argv, env []string) (*preparedExec, error) {
	return &preparedExec{path, argv, env}, nil
}

func (x *preparedExec) exec() error { return syscall.Exec(x.path, x.argv, x.envv) }

// writeStatus writes the shim's report to its status pipe. darwin enters
// the kernel through libc (see preparedExec), and neither counts threads
// under RLIMIT_NPROC nor enforces RLIMIT_AS: a plain write does.
func writeStatus(b []byte) { _, _ = syscall.Write(shimStatusFD, b) }
