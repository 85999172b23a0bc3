package bridge

import (
	"fmt"

	bcrypto "github.com/syncbridge/bridge/crypto"
)

// SignCancel returns a signed <id>.cancel file.
func SignCancel(agent *bcrypto.Identity, c Cancel) ([]byte, error) {
	c.V = 1
	return signBody(bcrypto.KindCancel, agent, &c, c.check)
}

// OpenCancel verifies a cancel file found as <stem>.cancel in agent's directory.
func OpenCancel(data []byte, stem, host, agent string, agentKeys [][]byte) (*Cancel, error) {
	var c Cancel
	if err := OpenBody(bcrypto.KindCancel, data, agentKeys, &c); err != nil {
		return nil, err
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.ID != stem || c.Agent != agent {
		return nil, fmt.Errorf("cancel %s: %w", stem, ErrNameMismatch)
	}
	if c.Host != host {
		return nil, fmt.Errorf("cancel %s: %w", stem, ErrWrongRecipient)
	}
	return &c, nil
}

func (c *Cancel) check() error {
	if c.V != 1 {
		return fmt.Errorf("cancel: %w: v=%d", bcrypto.ErrUnknownVersion, c.V)
	}
	if !ValidID(c.ID) || !bcrypto.ValidKid(c.Agent) || !bcrypto.ValidKid(c.Host) {
		return fmt.Errorf("cancel: %w: bad id", bcrypto.ErrMalformed)
	}
	return nil
}

// SignAck returns a signed <id>.ack file.
func SignAck(agent *bcrypto.Identity, a Ack) ([]byte, error) {
	a.V = 1
	return signBody(bcrypto.KindAck, agent, &a, a.check)
}

// OpenAck verifies an ack file found as <stem>.ack in agent's directory.
func OpenAck(data []byte, stem, host, agent string, agentKeys [][]byte) (*Ack, error) {
	var a Ack
	if err := OpenBody(bcrypto.KindAck, data, agentKeys, &a); err != nil {
		return nil, err
	}
	if err := a.check(); err != nil {
		return nil, err
	}
	if a.ID != stem || a.Agent != agent {
		return nil, fmt.Errorf("ack %s: %w", stem, ErrNameMismatch)
	}
	if a.Host != host {
		return nil, fmt.Errorf("ack %s: %w", stem, ErrWrongRecipient)
	}
	return &a, nil
}

func (a *Ack) check() error {
	if a.V != 1 {
		return fmt.Errorf("ack: %w: v=%d", bcrypto.ErrUnknownVersion, a.V)
	}
	if !ValidID(a.ID) || !bcrypto.ValidKid(a.Agent) || !bcrypto.ValidKid(a.Host) || !validSHA256Hex(a.ResultSHA256) {
		return fmt.Errorf("ack: %w: bad id or hash", bcrypto.ErrMalformed)
	}
	return nil
}

func signBody(k bcrypto.Kind, id *bcrypto.Identity, body any, check func() error) ([]byte, error) {
	if err := check(); err != nil {
		return nil, err
	}
	b, err := bcrypto.EncodeBody(body)
	if err != nil {
		return nil, err
	}
	return bcrypto.Sign(k, b, id)
}

// openBody verifies a one-signature envelope under any of keys, then decodes
// its body strictly. Nothing is decoded before a signature verified.
func OpenBody(k bcrypto.Kind, data []byte, keys [][]byte, body any) error {
	env, err := bcrypto.Parse(k, data)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return fmt.Errorf("%s: %w", k, bcrypto.ErrUnknownKey)
	}
	verr := error(nil)
	for _, key := range keys {
		if verr = env.Verify(0, key); verr == nil {
			break
		}
	}
	if verr != nil {
		return verr
	}
	if err := bcrypto.DecodeBody(env.Body(), body); err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	return nil
}
