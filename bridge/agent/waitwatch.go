package agent

import (
	"path/filepath"

	"github.com/rjeczalik/notify"
)

// watchDir arms an event-only watch on the directory dir: one kernel watch,
// no listing and no walk of ours. The kernel's is another matter: arming and
// releasing the watch each go over the directory's cached entries (Linux
// marks each as having a watched parent), about a millisecond of its CPU
// beside 10,000 unacked results, which is why Wait arms one only after its
// quick looks.
// Each event whose file name wake accepts pokes the returned channel (one
// poke pending at most). Events are hints: notify drops them when its
// channel is full, and the caller polls as well. stop releases the watch.
func watchDir(dir string, wake func(name string) bool) (pokes <-chan struct{}, stop func(), err error) {
	c := make(chan notify.EventInfo, 64)
	if err := notify.Watch(dir, c, waitEvents...); err != nil {
		return nil, nil, err
	}
	poke := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case ei := <-c:
				if wake(filepath.Base(ei.Path())) {
					select {
					case poke <- struct{}{}:
					default:
					}
				}
			}
		}
	}()
	return poke, func() {
		notify.Stop(c)
		close(done)
	}, nil
}
