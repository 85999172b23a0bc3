package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/syncbridge/bridge/bridge"
)

// dirReads counts the listings of a directory as the kernel sees them:
// inotify reports each getdents on a watched directory as IN_ACCESS on the
// directory itself (no name), and nothing for a file opened by its name.
type dirReads struct{ fd int }

func watchDirReads(t *testing.T, dir string) *dirReads {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_ACCESS); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &dirReads{fd: fd}
}

// count drains the events so far and returns the directory's listings.
func (d *dirReads) count() int {
	n := 0
	buf := make([]byte, 64<<10)
	for {
		k, err := unix.Read(d.fd, buf)
		if k <= 0 || err != nil {
			return n
		}
		for off := 0; off+unix.SizeofInotifyEvent <= k; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Mask&unix.IN_ACCESS != 0 && ev.Mask&unix.IN_ISDIR != 0 && ev.Len == 0 {
				n++
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// Waiting for a result reads the request's own files by name and never
// lists the result directory, whose size (unacked results of other
// requests) must not count: not Wait, not the progress chunks `bridge run`
// streams from its tick, not Result or Status once the answer is there.
func TestWaitNeverListsResultDirectory(t *testing.T) {
	h := newHomes(t)
	s, err := h.client.Submit(SubmitOptions{Op: "echo", Args: map[string]string{"msg": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.folder, filepath.FromSlash(bridge.ToAgentDir(s.Host, h.agent.Config.ID)))
	for i := 0; i < 200; i++ {
		other := bridge.NewRequestID()
		os.WriteFile(filepath.Join(dir, other+".result"), []byte("someone else's"), 0o644)
		os.WriteFile(filepath.Join(dir, other+".output"), []byte("someone else's"), 0o644)
	}
	reads := watchDirReads(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ticks := make(chan struct{}, 100)
	type waited struct {
		out *Outcome
		err error
	}
	done := make(chan waited, 1)
	go func() {
		out, err := h.client.Wait(ctx, s.ID, func(time.Duration) {
			h.client.Progress(s.ID, 1, "")
			select {
			case ticks <- struct{}{}:
			default:
			}
		})
		done <- waited{out, err}
	}()
	for i := 0; i < 2; i++ {
		select {
		case <-ticks:
		case <-ctx.Done():
			t.Fatal("the wait never looked")
		}
	}
	h.publishResult(t, s, bridge.StatusDone)
	w := <-done
	if w.err != nil {
		t.Fatalf("wait: %v", w.err)
	}
	w.out.Close()
	if _, err := h.client.Status(s.ID); err != nil {
		t.Fatal(err)
	}
	if n := reads.count(); n != 0 {
		t.Fatalf("the result directory was listed %d times while waiting; want none", n)
	}
	// The check itself works: a listing is seen.
	os.ReadDir(dir)
	if reads.count() == 0 {
		t.Fatal("a listing of the directory was not seen")
	}
}
