package crypto

import (
	"crypto/cipher"
	"crypto/hkdf"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/crypto/nacl/box"
)

// Payload stream parameters (SPEC §4).
const (
	// ChunkSize is the plaintext size of every chunk but the last.
	ChunkSize = 64 << 10
	// WrappedKeySize is the size of a payload key sealed with box.SealAnonymous.
	WrappedKeySize = 32 + box.AnonymousOverhead
	labelPayload   = "bridge/v1/payload"
	tagSize        = chacha20poly1305.Overhead
	encChunkSize   = ChunkSize + tagSize
)

// SealedSize is the ciphertext length of a plaintext of n bytes.
func SealedSize(n int64) int64 {
	chunks := n / ChunkSize
	if n%ChunkSize != 0 || n == 0 {
		chunks++
	}
	return n + chunks*tagSize
}

// OpenedSize is the plaintext length of a well-formed ciphertext of n bytes,
// or -1 if no plaintext seals to exactly n bytes.
func OpenedSize(n int64) int64 {
	if n < tagSize {
		return -1
	}
	full := n / encChunkSize
	rest := n % encChunkSize
	var pt int64
	switch {
	case rest == 0:
		pt = full * ChunkSize
	case rest >= tagSize:
		pt = full*ChunkSize + rest - tagSize
	default:
		return -1
	}
	if SealedSize(pt) != n {
		return -1
	}
	return pt
}

func payloadAEAD(key []byte) (cipher.AEAD, error) {
	pk, err := hkdf.Key(sha256.New, key, nil, labelPayload, chacha20poly1305.KeySize)
	if err != nil {
		return nil, err
	}
	return chacha20poly1305.New(pk)
}

// nonce for chunk i: 11-byte big-endian counter ‖ last-chunk flag.
func setNonce(nonce []byte, counter uint64, last bool) {
	clear(nonce)
	for i := 10; i >= 3 && counter > 0; i-- {
		nonce[i] = byte(counter)
		counter >>= 8
	}
	if last {
		nonce[11] = 1
	}
}

// Sealer encrypts a payload as a stream. Write the plaintext, then Close; the
// stream is not valid until Close wrote the final chunk.
type Sealer struct {
	dst     io.Writer
	aead    cipher.AEAD
	buf     []byte
	out     []byte
	nonce   [12]byte
	counter uint64
	closed  bool
	err     error
}

// NewSealer starts a payload for the recipient's X25519 public key. It returns
// the key wrapped for the recipient, which the caller pins in a signed
// envelope. rand is crypto/rand when nil.
func NewSealer(dst io.Writer, recipientBoxPub []byte, rand io.Reader) (*Sealer, []byte, error) {
	if err := CheckBoxKey(recipientBoxPub); err != nil {
		return nil, nil, err
	}
	if rand == nil {
		rand = cryptorand.Reader
	}
	key := make([]byte, 32)
	if _, err := io.ReadFull(rand, key); err != nil {
		return nil, nil, fmt.Errorf("payload key: %w", err)
	}
	var rpk [32]byte
	copy(rpk[:], recipientBoxPub)
	wrapped, err := box.SealAnonymous(nil, key, &rpk, rand)
	if err != nil {
		return nil, nil, fmt.Errorf("wrap payload key: %w", err)
	}
	aead, err := payloadAEAD(key)
	if err != nil {
		return nil, nil, err
	}
	return &Sealer{
		dst:  dst,
		aead: aead,
		buf:  getChunkBuf(),
		out:  getChunkBuf(),
	}, wrapped, nil
}

// chunkBufs holds chunk-sized buffers between streams: a daemon seals and
// opens a few per request, and two fresh 64 KiB buffers per stream made a
// collection every few requests (and their zeroing), for payloads mostly a
// few bytes long. A stream takes its buffers as it starts and gives them
// back once it is done (Sealer.Close, Opener at EOF); one abandoned midway
// leaves them to the collector.
var chunkBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, encChunkSize+1)
	return &b
}}

func getChunkBuf() []byte { return (*chunkBufs.Get().(*[]byte))[:0] }

func putChunkBuf(b []byte) {
	if cap(b) >= encChunkSize+1 {
		b = b[:0]
		chunkBufs.Put(&b)
	}
}

func (s *Sealer) Write(p []byte) (int, error) {
	if s.closed {
		return 0, errors.New("seal payload: write after close")
	}
	if s.err != nil {
		return 0, s.err
	}
	n := 0
	for len(p) > 0 {
		// A full buffer is only flushed when more data follows, so the last
		// chunk is always the one Close writes with the final flag.
		if len(s.buf) == ChunkSize {
			if err := s.flush(false); err != nil {
				return n, err
			}
		}
		k := copy(s.buf[len(s.buf):ChunkSize], p)
		s.buf = s.buf[:len(s.buf)+k]
		p = p[k:]
		n += k
	}
	return n, nil
}

// ReadFrom seals r to its end, reading straight into the chunk buffer
// (io.Copy uses it): Write's copy of every byte is saved. It reads one byte
// past a full chunk before sealing it, so that, as with Write, the last
// chunk is always the one Close writes.
func (s *Sealer) ReadFrom(r io.Reader) (int64, error) {
	if s.closed {
		return 0, errors.New("seal payload: write after close")
	}
	if s.err != nil {
		return 0, s.err
	}
	var n int64
	for {
		m, err := r.Read(s.buf[len(s.buf) : ChunkSize+1]) // the pool's buffers hold encChunkSize+1
		s.buf = s.buf[:len(s.buf)+m]
		n += int64(m)
		if len(s.buf) > ChunkSize {
			next := s.buf[ChunkSize]
			s.buf = s.buf[:ChunkSize]
			if ferr := s.flush(false); ferr != nil {
				return n, ferr
			}
			s.buf = append(s.buf, next)
		}
		switch {
		case err == io.EOF:
			return n, nil
		case err != nil:
			return n, err
		}
	}
}

func (s *Sealer) flush(last bool) error {
	setNonce(s.nonce[:], s.counter, last)
	s.out = s.aead.Seal(s.out[:0], s.nonce[:], s.buf, nil)
	if _, err := s.dst.Write(s.out); err != nil {
		s.err = fmt.Errorf("seal payload: %w", err)
		return s.err
	}
	s.counter++
	s.buf = s.buf[:0]
	return nil
}

// Close writes the final chunk. It does not close the destination.
func (s *Sealer) Close() error {
	if s.closed {
		return s.err
	}
	s.closed = true
	if s.err != nil {
		return s.err
	}
	err := s.flush(true)
	// Done with the buffers: Write and Close refuse from here on.
	putChunkBuf(s.buf)
	putChunkBuf(s.out)
	s.buf, s.out = nil, nil
	return err
}

// Opener decrypts a payload stream; it is an io.Reader. A stream cut short
// (even at a chunk boundary) fails with ErrTruncated, a modified one with
// ErrUnauthenticated. Plaintext of a chunk is released only once that chunk
// authenticated; a caller that must not act on a partial payload reads to EOF
// before acting.
type Opener struct {
	src     io.Reader
	aead    cipher.AEAD
	in      []byte // one encrypted chunk plus one look-ahead byte
	inLen   int
	plain   []byte // unread plaintext, a slice of pbuf
	pbuf    []byte
	nonce   [12]byte
	counter uint64
	done    bool
	err     error
}

// NewOpener unwraps the payload key with the recipient identity and returns a
// reader of the plaintext.
func NewOpener(src io.Reader, wrappedKey []byte, id *Identity) (*Opener, error) {
	if len(wrappedKey) != WrappedKeySize {
		return nil, fmt.Errorf("open payload: %w: wrapped key of %d bytes, want %d", ErrMalformed, len(wrappedKey), WrappedKeySize)
	}
	key, ok := box.OpenAnonymous(nil, wrappedKey, &id.boxPub, &id.box)
	if !ok {
		return nil, fmt.Errorf("open payload: %w: key not sealed to this identity", ErrUnauthenticated)
	}
	aead, err := payloadAEAD(key)
	if err != nil {
		return nil, err
	}
	return &Opener{src: src, aead: aead, in: getChunkBuf()[:encChunkSize+1], pbuf: getChunkBuf()}, nil
}

func (o *Opener) Read(p []byte) (int, error) {
	for len(o.plain) == 0 {
		if o.err != nil {
			return 0, o.err
		}
		if o.done {
			o.release()
			return 0, io.EOF
		}
		o.err = o.next()
	}
	n := copy(p, o.plain)
	o.plain = o.plain[n:]
	return n, nil
}

// WriteTo writes the plaintext to w chunk by chunk, each once it
// authenticated (io.Copy uses it): Read's copy into the caller's buffer is
// saved.
func (o *Opener) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		for len(o.plain) > 0 {
			m, err := w.Write(o.plain)
			if m < 0 || m > len(o.plain) {
				return n, fmt.Errorf("open payload: the writer reported %d bytes written of %d", m, len(o.plain))
			}
			n += int64(m)
			o.plain = o.plain[m:]
			if err != nil {
				return n, err
			}
			if m == 0 {
				return n, io.ErrShortWrite
			}
		}
		if o.err != nil {
			return n, o.err
		}
		if o.done {
			o.release()
			return n, nil
		}
		o.err = o.next()
	}
}

// release gives the buffers back once every byte was read out (copied).
func (o *Opener) release() {
	if o.in != nil {
		putChunkBuf(o.in)
		putChunkBuf(o.pbuf)
		o.in, o.pbuf = nil, nil
	}
}

// next reads and opens one chunk. The look-ahead byte tells whether more data
// follows, and so whether this chunk must carry the final flag.
func (o *Opener) next() error {
	n, err := io.ReadFull(o.src, o.in[o.inLen:])
	o.inLen += n
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
	case err != nil:
		return fmt.Errorf("open payload: %w", err)
	}
	last := o.inLen <= encChunkSize
	chunk := o.in[:min(o.inLen, encChunkSize)]
	if len(chunk) < tagSize {
		return fmt.Errorf("open payload: %w: chunk %d has %d bytes", ErrTruncated, o.counter, len(chunk))
	}
	setNonce(o.nonce[:], o.counter, last)
	plain, aerr := o.aead.Open(o.pbuf[:0], o.nonce[:], chunk, nil)
	if aerr != nil {
		if last {
			// A chunk that opens as non-final where the stream ends means the
			// stream was cut at a chunk boundary.
			setNonce(o.nonce[:], o.counter, false)
			if _, e := o.aead.Open(nil, o.nonce[:], chunk, nil); e == nil {
				return fmt.Errorf("open payload: %w: stream ends without its final chunk", ErrTruncated)
			}
		}
		return fmt.Errorf("open payload: %w: chunk %d", ErrUnauthenticated, o.counter)
	}
	if last && len(plain) == 0 && o.counter > 0 {
		// Only an empty payload has an empty final chunk; anything else has
		// one canonical chunking.
		return fmt.Errorf("open payload: %w: empty final chunk", ErrMalformed)
	}
	o.plain = plain
	o.counter++
	if last {
		o.done = true
		o.inLen = 0
	} else {
		o.in[0] = o.in[encChunkSize]
		o.inLen = 1
	}
	return nil
}
