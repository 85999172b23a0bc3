package host

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/syncbridge/bridge/bridge"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// spool is the host's private scratch copy of a payload, or of the stdin an
// op gets from it: in memory when small, else a file in the home's spool/
// directory. Close releases it (and removes the file).
//
// Why memory for small ones: creating a file is the single most expensive
// step of a small request on a busy file system (ext4 scans for a free inode
// past the recently deleted ones), and a request whose payload is only its
// arguments would pay it twice.
type spool interface {
	io.ReadWriteSeeker
	Close() error
}

// memSpoolMax is the largest payload kept in memory: the evaluation queue
// and the runs in flight bound how many exist at once.
const memSpoolMax = 256 << 10

// payloadBound refuses, before anything is copied into a spool, a payload
// longer than any call this agent may make: a header at its largest and the
// most standard input any of its ops takes (max_stdin). Which op a request
// asks for is sealed inside it; admit holds the stdin to that op's own bound
// once the header is open, still before copying it.
func payloadBound(j *job) error {
	most := 4 + bridge.MaxHeader + j.rules.p.MaxStdin(j.keys.name, "")
	if size := bcrypto.OpenedSize(j.req.Payload.Len); size > most {
		return fmt.Errorf("%w: the payload holds %d bytes; this agent may send at most %d (a call header and the largest max_stdin of its ops)",
			bridge.ErrTooLarge, size, most)
	}
	return nil
}

func newSpool(dir, id, ext string, size int64) (spool, error) {
	if size >= 0 && size <= memSpoolMax {
		return &memSpool{}, nil
	}
	f, err := os.CreateTemp(dir, id+"-*."+ext)
	if err != nil {
		return nil, err
	}
	return fileSpool{f}, nil
}

type fileSpool struct{ *os.File }

func (f fileSpool) Close() error {
	err := f.File.Close()
	if rerr := os.Remove(f.Name()); err == nil {
		err = rerr
	}
	return err
}

// memSpool is a growable byte slice with a file's read, write and seek.
// Like a file it may be closed while another goroutine still reads it (the
// runner's stdin copy can outlive the op): hence the lock.
type memSpool struct {
	mu     sync.Mutex
	b      []byte
	off    int64
	closed bool
}

func (m *memSpool) Read(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, os.ErrClosed
	}
	if m.off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[m.off:])
	m.off += int64(n)
	return n, nil
}

func (m *memSpool) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, os.ErrClosed
	}
	if end := m.off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	n := copy(m.b[m.off:], p)
	m.off += int64(n)
	return n, nil
}

func (m *memSpool) Seek(offset int64, whence int) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, os.ErrClosed
	}
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += m.off
	case io.SeekEnd:
		offset += int64(len(m.b))
	default:
		return 0, errors.New("spool: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("spool: negative position")
	}
	m.off = offset
	return offset, nil
}

func (m *memSpool) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.b, m.off, m.closed = nil, 0, true
	return nil
}
