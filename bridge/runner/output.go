package runner

import "fmt"

// capture keeps the head and the tail of a stream within a cap: the first
// half of the cap as written, the last half in a ring buffer, so memory stays
// bounded however much the child writes and the end of the output (where
// errors usually are) survives along with its beginning.
type capture struct {
	headMax, tailMax int
	head             []byte
	tail             []byte // grows to tailMax, then a ring; oldest byte at pos once full
	pos              int
	total            int64
}

func newCapture(max int64) *capture {
	h := int(max / 2)
	return &capture{headMax: h, tailMax: int(max) - h}
}

func (c *capture) write(p []byte) {
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

func (c *capture) output() Output {
	kept := int64(len(c.head) + len(c.tail))
	o := Output{Total: c.total, Truncated: c.total > kept}
	data := make([]byte, 0, kept+64)
	data = append(data, c.head...)
	if o.Truncated {
		data = fmt.Appendf(data, "\n[... %d bytes omitted by bridge ...]\n", c.total-kept)
	}
	data = append(data, c.tail[c.pos:]...)
	data = append(data, c.tail[:c.pos]...)
	o.Data = data
	return o
}
