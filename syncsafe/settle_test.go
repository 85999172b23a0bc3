//go:build unix

package syncsafe

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestSettle(t *testing.T) {
	f, dir := newFolder(t)
	final := bytes.Repeat([]byte("0123456789abcdef"), 8192) // 128 KiB: several copy chunks
	sum := sha256.Sum256(final)
	n := int64(len(final))
	p := filepath.Join(dir, "x.payload")

	check := func(step string, wantErr error) []byte {
		t.Helper()
		var spool bytes.Buffer
		err := Settle(f, "x.payload", n, sum, &spool)
		if wantErr == nil && err != nil || wantErr != nil && !errors.Is(err, wantErr) {
			t.Fatalf("%s: Settle = %v, want %v", step, err, wantErr)
		}
		t.Logf("%s: %v", step, err)
		return spool.Bytes()
	}

	check("missing", fs.ErrNotExist)

	// A growing prefix at the final name (in-place writer).
	writeFile(t, p, string(final[:n/2]))
	check("half", ErrUnsettled)

	// An intermediate version of the right length but other bytes.
	other := bytes.Clone(final)
	other[n-1] ^= 1
	writeFile(t, p, string(other))
	check("intermediate complete version", ErrUnsettled)

	writeFile(t, p, string(final)+"x")
	check("too long", ErrUnsettled)

	writeFile(t, p, string(final))
	if got := check("exact", nil); !bytes.Equal(got, final) {
		t.Fatal("spool does not hold the verified bytes")
	}

	// The file grows while it is being read: the spool writer appends to
	// the real file after the first chunk, as a still-running writer would.
	appended := false
	grow := writerFunc(func(b []byte) (int, error) {
		if !appended {
			appended = true
			af, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return 0, err
			}
			af.Write([]byte("more"))
			af.Close()
		}
		return len(b), nil
	})
	if err := Settle(f, "x.payload", n, sum, grow); !errors.Is(err, ErrUnsettled) {
		t.Fatalf("grew while reading: Settle = %v, want ErrUnsettled", err)
	} else {
		t.Logf("grew while reading: %v", err)
	}

	// Shrinks while being read.
	writeFile(t, p, string(final))
	shrunk := false
	shrink := writerFunc(func(b []byte) (int, error) {
		if !shrunk {
			shrunk = true
			if err := os.Truncate(p, 10); err != nil {
				return 0, err
			}
		}
		return len(b), nil
	})
	if err := Settle(f, "x.payload", n, sum, shrink); !errors.Is(err, ErrUnsettled) {
		t.Fatalf("shrank while reading: Settle = %v, want ErrUnsettled", err)
	}

	must(t, os.Remove(p))
	must(t, os.Symlink("elsewhere", p))
	if err := Settle(f, "x.payload", n, sum, &bytes.Buffer{}); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("symlink: Settle = %v, want ErrNotRegular", err)
	}

	// Empty payloads are legal.
	writeFile(t, filepath.Join(dir, "empty"), "")
	if err := Settle(f, "empty", 0, sha256.Sum256(nil), &bytes.Buffer{}); err != nil {
		t.Fatalf("empty: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(b []byte) (int, error) { return w(b) }
