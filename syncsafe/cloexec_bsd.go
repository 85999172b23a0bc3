//go:build unix && !linux

package syncsafe

import "golang.org/x/sys/unix"

func closeRangeCloexec() error { return unix.ENOSYS }
