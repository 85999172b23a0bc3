package syncsafe

import (
	"os"
	"sync"
)

// Directory fsyncs are shared: when several publishes into one directory
// want its fsync at once (many requests in flight), one fsync that starts
// after all of their renames makes every one of them durable. A caller
// takes a ticket after its rename; it returns once an fsync that started
// after its ticket completed, its own or another caller's. A failed fsync
// is returned to the caller that ran it; the others retry with their own.

type dirSync struct {
	mu      sync.Mutex
	cond    *sync.Cond
	ticket  uint64 // tickets handed out
	done    uint64 // every ticket up to this one is durable
	running bool
}

func (f *Folder) syncDir(h dirH) error {
	id, ok := h.syncID()
	if !ok {
		return h.sync()
	}
	v, _ := f.dirSyncs.LoadOrStore(id, &dirSync{})
	return v.(*dirSync).do(h.sync)
}

// do returns once a call of fsync that started after this call of do began
// has completed without error (or with the error of its own call).
func (s *dirSync) do(fsync func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cond == nil {
		s.cond = sync.NewCond(&s.mu)
	}
	s.ticket++
	mine := s.ticket
	for s.done < mine {
		if s.running {
			s.cond.Wait()
			continue
		}
		s.running = true
		covers := s.ticket // every rename so far happened before its ticket
		s.mu.Unlock()
		err := fsync()
		s.mu.Lock()
		s.running = false
		if err == nil && covers > s.done {
			s.done = covers
		}
		s.cond.Broadcast()
		if err != nil {
			return err
		}
	}
	return nil
}

// pathSyncs shares the fsyncs of directories named by path (SyncDir).
var pathSyncs sync.Map // cleaned path → *dirSync

// SyncDir fsyncs the directory dir so that renames into it are durable,
// sharing one fsync among concurrent callers as Publish does. It is for
// private directories (a home's), which nobody replaces while in use: the
// directory is known by its path.
func SyncDir(dir string) error {
	v, _ := pathSyncs.LoadOrStore(dir, &dirSync{})
	return v.(*dirSync).do(func() error {
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	})
}
