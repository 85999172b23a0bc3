package agent

import (
	"errors"

	"github.com/syncbridge/bridge/bridge"

	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Progress reads the verified progress chunks of a request from seq from
// on, in order, stopping at the first missing or unverifiable one. prev is
// the hash of chunk from-1 ("" when from is 1). It reads only.
func (c *Client) Progress(id string, from int, prev string) ([]bridge.Chunk, error) {
	s, err := c.Sent(id)
	if err != nil {
		return nil, err
	}
	check, own, err := c.resultCheck(s)
	if err != nil {
		return nil, err
	}
	// Chunk by chunk, each by its name, from the first not yet seen until
	// one is missing (the next has not arrived yet): the result directory
	// is never listed, so a folder of many results costs nothing here.
	var out []bridge.Chunk
	for seq := from; ; seq++ {
		data, err := c.folder.ReadFile(bridge.ProgressPath(s.Host, c.home.Config.ID, id, seq), bcrypto.KindProgress.MaxSize())
		if err != nil {
			break
		}
		p, err := bridge.OpenProgress(data, bridge.ProgressCheck{ID: id, Host: s.Host, Agent: c.home.Config.ID, Seq: seq, Prev: prev, HostKeys: check.HostKeys})
		if errors.Is(err, bridge.ErrBrokenChain) {
			return out, err
		} else if err != nil {
			break // not (yet) a valid chunk from the host
		}
		var ch *bridge.Chunk
		for _, k := range own {
			if k.Identity.BoxKid() == p.AgentBoxKid {
				ch, err = bridge.OpenChunk(p, data, k.Identity)
			}
		}
		if ch == nil || err != nil {
			break
		}
		prev = ch.ChunkHash()
		out = append(out, *ch)
	}
	return out, nil
}

// Started reports whether the host has begun the op of request id: it
// publishes a signed progress chunk within a second of output, and a
// heartbeat within bridge.HeartbeatEvery of a silent start, so the first
// chunk of the chain is the sign. Only that chunk's signature is checked
// (its content is Progress's business). It reads only.
func (c *Client) Started(id string) bool {
	s, err := c.Sent(id)
	if err != nil {
		return false
	}
	check, _, err := c.resultCheck(s)
	if err != nil {
		return false
	}
	data, err := c.folder.ReadFile(bridge.ProgressPath(s.Host, c.home.Config.ID, id, 1), bcrypto.KindProgress.MaxSize())
	if err != nil {
		return false
	}
	_, err = bridge.OpenProgress(data, bridge.ProgressCheck{ID: id, Host: s.Host, Agent: c.home.Config.ID, Seq: 1, HostKeys: check.HostKeys})
	return err == nil
}
