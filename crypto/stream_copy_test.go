package crypto

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// sealVia seals pt with a fixed key through the sealer's Write or its
// ReadFrom, reading pt through wrap.
func sealVia(t *testing.T, to *Identity, pt []byte, readFrom bool, wrap func(io.Reader) io.Reader) ([]byte, []byte) {
	t.Helper()
	var buf bytes.Buffer
	s, wrapped, err := NewSealer(&buf, to.BoxPublic(), newDetRand("payload key"))
	if err != nil {
		t.Fatal(err)
	}
	if readFrom {
		n, err := s.ReadFrom(wrap(bytes.NewReader(pt)))
		if err != nil || n != int64(len(pt)) {
			t.Fatalf("ReadFrom: %d of %d bytes, %v", n, len(pt), err)
		}
	} else if _, err := s.Write(pt); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), wrapped
}

// ReadFrom and WriteTo (what io.Copy takes) give the bytes Write and Read
// give, whatever sizes the reader returns, at every chunk boundary.
func TestStreamCopyPathsAgree(t *testing.T) {
	host := mustIdentity(t, "host")
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return struct{ io.Reader }{r} },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for _, n := range []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 2 * ChunkSize, 2*ChunkSize + 1, 3*ChunkSize + 7} {
		pt := make([]byte, n)
		for i := range pt {
			pt[i] = byte(i * 7)
		}
		want, wrapped := sealVia(t, host, pt, false, nil)
		for name, wrap := range readers {
			if n > 2*ChunkSize && name == "one byte" {
				continue // slow, and the boundaries below cover it
			}
			got, _ := sealVia(t, host, pt, true, wrap)
			if !bytes.Equal(got, want) {
				t.Fatalf("n=%d, %s reads: ReadFrom sealed other bytes than Write", n, name)
			}
		}
		var out bytes.Buffer
		o, err := NewOpener(bytes.NewReader(want), wrapped, host)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := io.Copy(&out, o); err != nil || m != int64(n) || !bytes.Equal(out.Bytes(), pt) {
			t.Fatalf("n=%d: WriteTo gave %d bytes, %v, equal %v", n, m, err, bytes.Equal(out.Bytes(), pt))
		}
		if m, err := o.WriteTo(&out); err != nil || m != 0 {
			t.Fatalf("n=%d: WriteTo after the end: %d, %v", n, m, err)
		}
	}
}

// Every stream Read refuses, WriteTo refuses with the same error, having
// written no more than Read released.
func TestStreamWriteToRejects(t *testing.T) {
	host := mustIdentity(t, "host")
	pt := bytes.Repeat([]byte("x"), 2*ChunkSize+10)
	ct, wrapped := seal(t, host, pt)
	flip := func(b []byte, i int) []byte { c := bytes.Clone(b); c[i] ^= 1; return c }
	for name, bad := range map[string][]byte{
		"cut at chunk boundary": ct[:2*encChunkSize],
		"cut mid chunk":         ct[:encChunkSize+100],
		"bit flip last tag":     flip(ct, len(ct)-1),
		"extended":              append(bytes.Clone(ct), 0),
		"empty":                 nil,
	} {
		o1, err := NewOpener(bytes.NewReader(bad), wrapped, host)
		if err != nil {
			t.Fatal(err)
		}
		read, rerr := io.ReadAll(o1)
		o2, _ := NewOpener(bytes.NewReader(bad), wrapped, host)
		var out bytes.Buffer
		n, werr := o2.WriteTo(&out)
		if rerr == nil || werr == nil || rerr.Error() != werr.Error() {
			t.Errorf("%s: Read says %v, WriteTo says %v", name, rerr, werr)
		}
		if n != int64(len(read)) || !bytes.Equal(out.Bytes(), read) {
			t.Errorf("%s: WriteTo wrote %d bytes, Read released %d", name, n, len(read))
		}
	}
}

// A writer's error ends WriteTo with it; a writer that takes nothing is a
// short write, not a loop.
func TestStreamWriteToWriterErrors(t *testing.T) {
	host := mustIdentity(t, "host")
	ct, wrapped := seal(t, host, bytes.Repeat([]byte("y"), ChunkSize+1))
	boom := errors.New("disk full")
	o, _ := NewOpener(bytes.NewReader(ct), wrapped, host)
	if _, err := o.WriteTo(failWriter{err: boom}); !errors.Is(err, boom) {
		t.Errorf("writer error: got %v", err)
	}
	o, _ = NewOpener(bytes.NewReader(ct), wrapped, host)
	if _, err := o.WriteTo(failWriter{}); !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("writer taking nothing: got %v", err)
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

// A reader's error ends ReadFrom with it, after what it read.
func TestStreamReadFromReaderError(t *testing.T) {
	host := mustIdentity(t, "host")
	s, _, err := NewSealer(io.Discard, host.BoxPublic(), nil)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("pipe broke")
	r := io.MultiReader(bytes.NewReader(make([]byte, ChunkSize+5)), iotest.ErrReader(boom))
	if n, err := s.ReadFrom(r); !errors.Is(err, boom) || n != ChunkSize+5 {
		t.Fatalf("got %d, %v", n, err)
	}
}

// A writer that reports more than it was given, or less than nothing, is an
// error, not a panic.
func TestStreamWriteToLyingWriter(t *testing.T) {
	host := mustIdentity(t, "host")
	ct, wrapped := seal(t, host, []byte("output"))
	for _, n := range []int{-1, 7} {
		o, _ := NewOpener(bytes.NewReader(ct), wrapped, host)
		if _, err := o.WriteTo(countWriter(n)); err == nil {
			t.Errorf("a writer reporting %d of 6 bytes: no error", n)
		}
	}
}

type countWriter int

func (w countWriter) Write([]byte) (int, error) { return int(w), nil }
