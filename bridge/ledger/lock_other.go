//go:build !unix && !windows

package ledger

import (
	"errors"
	"fmt"
)

// acquireLock fails: without a lock two processes could interleave writes
// and destroy the file (buntdb has no locking of its own).
func acquireLock(dir string) (*fileLock, error) {
	return nil, fmt.Errorf("lock ledger %s: %w", dir, errors.ErrUnsupported)
}
