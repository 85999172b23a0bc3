package bridge

import (
	"fmt"

	"github.com/syncbridge/bridge/bridge/policy"
	bcrypto "github.com/syncbridge/bridge/crypto"
)

// Catalog is the signed body of ops.catalog (SPEC §10a): the ops one agent
// may run on one host, so it can discover what to ask before it asks.
type Catalog struct {
	V      int             `json:"v"`
	Host   string          `json:"host"`
	Agent  string          `json:"agent"`
	Policy string          `json:"policy_sha256"`
	Ops    []policy.OpInfo `json:"ops"`
}

// SignCatalog returns the signed ops.catalog file.
func SignCatalog(c Catalog, host *bcrypto.Identity) ([]byte, error) {
	c.V = 1
	body, err := bcrypto.EncodeBody(c)
	if err != nil {
		return nil, err
	}
	return bcrypto.Sign(bcrypto.KindCatalog, body, host)
}

// OpenCatalog verifies a catalog file from host for agent under any of
// hostKeys.
func OpenCatalog(data []byte, host, agent string, hostKeys [][]byte) (*Catalog, error) {
	var cat Catalog
	if err := OpenBody(bcrypto.KindCatalog, data, hostKeys, &cat); err != nil {
		return nil, fmt.Errorf("host catalog: %w", err)
	}
	if cat.V != 1 || cat.Host != host || cat.Agent != agent {
		return nil, fmt.Errorf("host catalog: %w", ErrWrongRecipient)
	}
	return &cat, nil
}

// OpInfo and ArgInfo are the catalog's public descriptions of an op and its
// arguments, named here so that the agent's side (the MCP server) reads a
// catalog without reaching into the host's policy package.
type (
	OpInfo  = policy.OpInfo
	ArgInfo = policy.ArgInfo
)
