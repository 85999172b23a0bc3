package runner

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/syncbridge/bridge/syncsafe"
)

// capture keeps the head and the tail of a stream within a cap: the first
// half of the cap as written, the last half in a ring buffer, so memory stays
// bounded however much the child writes and the end of the output (where
// errors usually are) survives along with its beginning.
//
// With a spool file (Spec.Spool) the head and the ring live in the file, not
// in memory: the head at [0, headMax), the ring at [headMax, headMax+tailMax).
// The memory of a run is then constant whatever the cap.
type capture struct {
	headMax, tailMax int
	head             []byte
	tail             []byte // grows to tailMax, then a ring; oldest byte at pos once full
	pos              int
	total            int64

	f                *os.File // the spool file, or nil: in memory
	headLen, tailLen int      // what the file holds of each
	err              error    // the first write error of the spool file

	spool    string // the directory of a spool file to make past spillAt bytes; "" once made or tried
	spillAt  int64
	spillErr error // why no spool file could be made
}

func newCapture(max int64) *capture {
	h := int(max / 2)
	return &capture{headMax: h, tailMax: int(max) - h}
}

// spoolAbove is how much of a stream a spooling capture keeps in memory
// before it moves to its file: most ops write a few lines, and a file made
// for each of their two streams would cost more than the run (creating a
// file can take half a millisecond of CPU). A run's memory stays constant.
const spoolAbove = 64 << 10

// newSpooledCapture is newCapture that keeps the stream in an unlinked
// temporary file in dir once it has more than spillAt bytes: nothing is
// left behind whatever becomes of the process, and the file is gone once
// the Output's last reader lets go.
func newSpooledCapture(max int64, dir string, spillAt int64) *capture {
	c := newCapture(max)
	c.spool, c.spillAt = dir, spillAt
	return c
}

// spill moves what is kept in memory to a new spool file, at the offsets
// writeFile uses (the ring's layout is the same in both); if no file can be
// made, the stream stays in memory and spillErr says why.
func (c *capture) spill() {
	f, err := syncsafe.UnnamedTemp(c.spool, ".output-*")
	c.spool = "" // one try
	if err != nil {
		c.spillErr = err
		return
	}
	c.f = f
	if _, err := f.WriteAt(c.head, 0); err != nil {
		c.err = err
	}
	if _, err := f.WriteAt(c.tail, int64(c.headMax)); err != nil && c.err == nil {
		c.err = err
	}
	c.headLen, c.tailLen = len(c.head), len(c.tail)
	c.head, c.tail = nil, nil
}

func (c *capture) write(p []byte) {
	if c.spool != "" && c.total+int64(len(p)) > c.spillAt {
		c.spill()
	}
	if c.f != nil {
		c.writeFile(p)
		return
	}
	c.total += int64(len(p))
	if n := min(c.headMax-len(c.head), len(p)); n > 0 {
		c.head = append(c.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 || c.tailMax == 0 {
		return
	}
	if len(p) >= c.tailMax {
		c.tail = append(c.tail[:0], p[len(p)-c.tailMax:]...)
		c.pos = 0
		return
	}
	if room := c.tailMax - len(c.tail); room > 0 {
		n := min(room, len(p))
		c.tail = append(c.tail, p[:n]...)
		p = p[n:]
	}
	for len(p) > 0 {
		n := copy(c.tail[c.pos:], p)
		p = p[n:]
		c.pos = (c.pos + n) % c.tailMax
	}
}

// writeFile is write for a spooled capture: the same head and ring, at
// offsets of the file.
func (c *capture) writeFile(p []byte) {
	c.total += int64(len(p))
	at := func(b []byte, off int) {
		if _, err := c.f.WriteAt(b, int64(off)); err != nil && c.err == nil {
			c.err = err
		}
	}
	if n := min(c.headMax-c.headLen, len(p)); n > 0 {
		at(p[:n], c.headLen)
		c.headLen += n
		p = p[n:]
	}
	if len(p) == 0 || c.tailMax == 0 {
		return
	}
	if len(p) >= c.tailMax {
		at(p[len(p)-c.tailMax:], c.headMax)
		c.tailLen, c.pos = c.tailMax, 0
		return
	}
	if room := c.tailMax - c.tailLen; room > 0 {
		n := min(room, len(p))
		at(p[:n], c.headMax+c.tailLen)
		c.tailLen += n
		p = p[n:]
	}
	for len(p) > 0 {
		n := min(c.tailMax-c.pos, len(p))
		at(p[:n], c.headMax+c.pos)
		p = p[n:]
		c.pos = (c.pos + n) % c.tailMax
	}
}

func (c *capture) marker(kept int64) string {
	return fmt.Sprintf("\n[... %d bytes omitted by bridge ...]\n", c.total-kept)
}

func (c *capture) output() Output {
	if c.f != nil {
		return c.fileOutput()
	}
	kept := int64(len(c.head) + len(c.tail))
	o := Output{Total: c.total, Truncated: c.total > kept}
	if !o.Truncated && len(c.tail) == 0 {
		o.Data = c.head // all of it is the head: no copy
		return o
	}
	data := make([]byte, 0, kept+64)
	data = append(data, c.head...)
	if o.Truncated {
		data = append(data, c.marker(kept)...)
	}
	data = append(data, c.tail[c.pos:]...)
	data = append(data, c.tail[:c.pos]...)
	o.Data = data
	return o
}

func (c *capture) fileOutput() Output {
	if c.err != nil {
		// What the file holds is not known: say so rather than guess.
		c.f.Close()
		return Output{Total: c.total, Truncated: true, Data: fmt.Appendf(nil, "\n[... %d bytes lost by bridge: %v ...]\n", c.total, c.err)}
	}
	kept := int64(c.headLen + c.tailLen)
	o := Output{Total: c.total, Truncated: c.total > kept, spooled: true}
	parts := []io.ReaderAt{io.NewSectionReader(c.f, 0, int64(c.headLen))}
	sizes := []int64{int64(c.headLen)}
	if o.Truncated {
		m := c.marker(kept)
		parts, sizes = append(parts, strings.NewReader(m)), append(sizes, int64(len(m)))
	}
	if c.tailLen > 0 {
		// Before the ring is full pos is 0 and this is the whole tail.
		parts = append(parts, io.NewSectionReader(c.f, int64(c.headMax+c.pos), int64(c.tailLen-c.pos)), io.NewSectionReader(c.f, int64(c.headMax), int64(c.pos)))
		sizes = append(sizes, int64(c.tailLen-c.pos), int64(c.pos))
	}
	o.parts, o.sizes, o.file = parts, sizes, c.f
	return o
}

// Len is how many bytes Reader yields: len(Data), or what the spool holds.
func (o Output) Len() int64 {
	if !o.spooled {
		return int64(len(o.Data))
	}
	var n int64
	for _, s := range o.sizes {
		n += s
	}
	return n
}

// Reader returns the kept bytes from the start, each call a new reader:
// Data, or, for a spooled Output, the spool file's head, marker and tail.
func (o Output) Reader() io.Reader {
	if !o.spooled {
		return bytes.NewReader(o.Data)
	}
	rs := make([]io.Reader, len(o.parts))
	for i, p := range o.parts {
		rs[i] = io.NewSectionReader(p, 0, o.sizes[i])
	}
	return io.MultiReader(rs...)
}

// Spooled reports whether the output is kept in a spool file (Spec.Spool)
// rather than in Data.
func (o Output) Spooled() bool { return o.spooled }

// Close releases a spooled Output's file (its name was removed at once, so
// nothing is left on disk either way). Data stays valid.
func (o Output) Close() error {
	if o.file == nil {
		return nil
	}
	return o.file.Close()
}
