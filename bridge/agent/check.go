package agent

import "github.com/syncbridge/bridge/bridge"

// CheckCall checks a call against the host's signed catalog this agent
// already holds, before anything is sent (bridge.Catalog.CheckCall): an
// unknown op or argument, a value its schema refuses, or standard input the
// op does not take or needs is refused in milliseconds. checked is false
// when there is no catalog to check against (not published or not synced
// yet, or not verifiable with the keys this agent holds, or older than the
// policy the host's liveness stamp names): the call should then go as it
// is, and the host decides. `bridge run` and `bridge mcp` both call it.
func (c *Client) CheckCall(host, op string, args map[string]string, in bridge.CallInput) (checked bool, err error) {
	cat, err := c.Ops(host)
	if err != nil || cat.Stale {
		return false, nil
	}
	return true, cat.CheckCall(op, args, in)
}
