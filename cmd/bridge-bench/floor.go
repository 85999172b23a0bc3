//go:build linux

package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/syncbridge/bridge/syncsafe"
)

// floor measures the primitives a round trip is made of, each alone: the
// cost nothing built on this machine can go below.
type floor struct {
	fsync, publish, forkExec, inotify, verify time.Duration
}

// measureFloor takes the median of n repetitions of each primitive in dir.
func measureFloor(dir string, n int) (floor, error) {
	var fl floor
	var err error
	small := make([]byte, 600) // about a request manifest
	if fl.fsync, err = median(n, func(i int) error {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("fsync-%d", i)))
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Write(small); err != nil {
			return err
		}
		return f.Sync()
	}); err != nil {
		return fl, fmt.Errorf("fsync: %w", err)
	}

	pubDir := filepath.Join(dir, "publish")
	if err := os.Mkdir(pubDir, 0o755); err != nil {
		return fl, err
	}
	folder, err := syncsafe.OpenFolder(pubDir)
	if err != nil {
		return fl, err
	}
	defer folder.Close()
	if fl.publish, err = median(n, func(i int) error {
		return folder.Publish(fmt.Sprintf("f-%d.manifest", i), func(w io.Writer) error { _, err := w.Write(small); return err })
	}); err != nil {
		return fl, fmt.Errorf("publish: %w", err)
	}

	truePath, err := exec.LookPath("true")
	if err != nil {
		return fl, err
	}
	if fl.forkExec, err = median(n, func(int) error { return exec.Command(truePath).Run() }); err != nil {
		return fl, fmt.Errorf("fork/exec: %w", err)
	}

	if fl.inotify, err = inotifyLatency(dir, n); err != nil {
		return fl, fmt.Errorf("inotify: %w", err)
	}

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fl, err
	}
	msg := make([]byte, 600)
	sig := ed25519.Sign(priv, msg)
	// One verify is ~50 µs: time batches of 100 so the clock's resolution
	// does not count.
	batch, err := median(n, func(int) error {
		for range 100 {
			if !ed25519.Verify(pub, msg, sig) {
				return fmt.Errorf("signature did not verify")
			}
		}
		return nil
	})
	fl.verify = batch / 100
	return fl, err
}

// inotifyLatency renames a file into a watched directory and times the
// arrival of IN_MOVED_TO, read with a blocking read on the raw descriptor.
func inotifyLatency(dir string, n int) (time.Duration, error) {
	watched := filepath.Join(dir, "watched")
	if err := os.Mkdir(watched, 0o755); err != nil {
		return 0, err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, watched, unix.IN_MOVED_TO); err != nil {
		return 0, err
	}
	buf := make([]byte, 4096)
	ds := make([]time.Duration, 0, n)
	for i := range n {
		src := filepath.Join(dir, fmt.Sprintf("in-%d", i))
		if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
			return 0, err
		}
		// The rename is part of what is timed: it is what makes the event.
		start := time.Now()
		if err := os.Rename(src, filepath.Join(watched, fmt.Sprintf("in-%d", i))); err != nil {
			return 0, err
		}
		if _, err := unix.Read(fd, buf); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	return pct(ds, 50), nil
}

// median runs f n times and returns the median duration.
func median(n int, f func(i int) error) (time.Duration, error) {
	ds := make([]time.Duration, 0, n)
	for i := range n {
		t := time.Now()
		if err := f(i); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(t))
	}
	return pct(ds, 50), nil
}
