package syncsafe

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// ErrUnsettled: the file is not (yet) the content the caller expects. For a
// payload pinned by a verified manifest this means "pending arrival": look
// again on the next event or rescan.
var ErrUnsettled = errors.New("file not settled")

// ErrReplaced: the file at the name changed between the look at it and its
// open (a sync client's or a host's rename, or a link swapped in): nothing
// was read, and a look a moment later sees what replaced it.
var ErrReplaced = errors.New("file replaced while opening")

// Settle is the only way a payload is judged complete. rel must be a regular
// file of exactly wantLen bytes; exactly wantLen bytes are copied into spool
// while hashing; the file must then be at EOF (it did not grow) and the
// SHA-256 must equal wantSHA256. Any difference is ErrUnsettled, wrapped with
// what differed. A missing file is an fs.ErrNotExist error.
//
// On success spool holds the verified bytes and the caller must read those,
// never the folder file again: the sync client may replace it at any moment.
// On error spool holds a partial or wrong copy and must be discarded.
//
// Size or mtime that stopped changing is only a hint for when calling Settle
// is worth it; it never admits a payload.
func Settle(f *Folder, rel string, wantLen int64, wantSHA256 [32]byte, spool io.Writer) error {
	if wantLen < 0 {
		return fmt.Errorf("settle %s: negative length %d", rel, wantLen)
	}
	fi, err := f.Lstat(rel)
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("settle %s: %v: %w", rel, fi.Mode().Type(), ErrNotRegular)
	}
	if fi.Size() != wantLen {
		return fmt.Errorf("settle %s: %w: size %d, want %d", rel, ErrUnsettled, fi.Size(), wantLen)
	}
	file, size, err := f.openRegular(rel, wantLen)
	if errors.Is(err, ErrTooLarge) {
		return fmt.Errorf("settle %s: %w: grew past %d bytes", rel, ErrUnsettled, wantLen)
	}
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	defer file.Close()
	if size != wantLen {
		return fmt.Errorf("settle %s: %w: size %d, want %d", rel, ErrUnsettled, size, wantLen)
	}
	h := sha256.New()
	n, err := io.CopyN(io.MultiWriter(spool, h), file, wantLen)
	if err == io.EOF {
		return fmt.Errorf("settle %s: %w: shrank to %d bytes while reading, want %d", rel, ErrUnsettled, n, wantLen)
	}
	if err != nil {
		return fmt.Errorf("settle %s: %w", rel, err)
	}
	var one [1]byte
	if m, _ := file.Read(one[:]); m > 0 {
		return fmt.Errorf("settle %s: %w: grew past %d bytes while reading", rel, ErrUnsettled, wantLen)
	}
	if got := h.Sum(nil); !bytes.Equal(got, wantSHA256[:]) {
		return fmt.Errorf("settle %s: %w: sha256 %x, want %x", rel, ErrUnsettled, got, wantSHA256)
	}
	return nil
}
