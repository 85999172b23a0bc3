//go:build unix

package syncsafe

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const lockHelperEnv = "SYNCSAFE_LOCK_HELPER"

// TestLockHelper is the child process of TestLockCrossProcess: it takes the
// lock named in the environment, says so, and waits to be killed; or, with
// mode "try", reports whether it could take it.
func TestLockHelper(t *testing.T) {
	path := os.Getenv(lockHelperEnv)
	if path == "" {
		t.Skip("helper process only")
	}
	l, err := Lock(path)
	if os.Getenv(lockHelperEnv+"_MODE") == "try" {
		switch {
		case err == nil:
			fmt.Println("acquired")
			l.Unlock()
		case errors.Is(err, ErrLocked):
			fmt.Println("locked:", err)
		default:
			fmt.Println("error:", err)
		}
		os.Exit(0)
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("holding")
	time.Sleep(time.Minute)
	os.Exit(3)
}

func helperCmd(path, mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+path, lockHelperEnv+"_MODE="+mode)
	return cmd
}

func TestLockSameProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.lock")
	l, err := Lock(path)
	must(t, err)
	fi, err := os.Stat(path)
	must(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode %v, want 0600", fi.Mode().Perm())
	}
	_, err = Lock(path)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Lock = %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	must(t, l.Unlock())
	l2, err := Lock(path)
	must(t, err)
	must(t, l2.Unlock())
	must(t, l2.Unlock()) // idempotent
}

func TestLockCrossProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.lock")

	// The child holds the lock: we must be refused, and told its pid.
	child := helperCmd(path, "hold")
	out, err := child.StdoutPipe()
	must(t, err)
	must(t, child.Start())
	defer child.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "holding" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	_, err = Lock(path)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(child.Process.Pid)) {
		t.Fatalf("Lock while child holds it = %v, want ErrLocked naming pid %d", err, child.Process.Pid)
	}

	// SIGKILL releases it: no cleanup code runs, the kernel drops the lock.
	must(t, child.Process.Signal(syscall.SIGKILL))
	child.Wait()
	l, err := Lock(path)
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}

	// And the other way round: while we hold it, a child is refused.
	got, err := helperCmd(path, "try").Output()
	must(t, err)
	if !strings.HasPrefix(string(got), "locked:") || !strings.Contains(string(got), strconv.Itoa(os.Getpid())) {
		t.Errorf("child while we hold the lock: %q", got)
	}
	must(t, l.Unlock())
	got, err = helperCmd(path, "try").Output()
	must(t, err)
	if strings.TrimSpace(string(got)) != "acquired" {
		t.Errorf("child after Unlock: %q", got)
	}
}
