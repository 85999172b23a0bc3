package crypto

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// EncodeBody returns the canonical JSON encoding of v (SPEC §2.3): the output of
// encoding/json for v's Go type, with HTML escaping off and no trailing newline.
// Struct field order is the declaration order, map keys are sorted, []byte is
// standard padded base64.
func EncodeBody(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// DecodeBody decodes data into v and accepts it only if it is the canonical
// encoding of the decoded value. This single rule rejects unknown fields,
// duplicate keys, whitespace, other field orders, escapes that need not be
// there, invalid UTF-8, non-canonical numbers and base64, and trailing bytes, so
// a signed body has exactly one byte form (no malleability).
func DecodeBody(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	again, err := EncodeBody(v)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !bytes.Equal(again, data) {
		return fmt.Errorf("%w: not the canonical encoding", ErrMalformed)
	}
	return nil
}
