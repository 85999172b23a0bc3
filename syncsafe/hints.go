package syncsafe

import (
	"errors"

	"github.com/rjeczalik/notify"
)

// DirHints turns changes in a few directories (not below them) into hints
// for a loop that would otherwise poll them: a value on C means "something
// there may have changed; look". Events coalesce into one pending hint.
// notify drops events silently when its buffers fill, so a hint is never
// the only way a change is seen: the caller still looks now and then.
type DirHints struct {
	C    <-chan struct{}
	in   chan notify.EventInfo
	done chan struct{}
}

// WatchDirs watches dirs for entries created, written, renamed or removed.
// A directory that cannot be watched (absent, say) is left out; the error
// names it, and the hints of the others still come.
func WatchDirs(dirs ...string) (*DirHints, error) {
	out := make(chan struct{}, 1)
	h := &DirHints{C: out, in: make(chan notify.EventInfo, 64), done: make(chan struct{})}
	var errs []error
	for _, d := range dirs {
		if err := watch(d, h.in, watchEvents...); err != nil {
			errs = append(errs, err)
		}
	}
	go func() {
		for {
			select {
			case <-h.done:
				return
			case <-h.in:
				select {
				case out <- struct{}{}:
				default: // one is pending already
				}
			}
		}
	}()
	return h, errors.Join(errs...)
}

// Close stops the watches.
func (h *DirHints) Close() {
	notify.Stop(h.in)
	close(h.done)
}
