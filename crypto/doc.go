// Package crypto holds every cryptographic decision of syncbridge, and nothing
// else: no file paths, no folder layout, no knowledge of operations.
//
// The entry points are few:
//
//   - [GenerateIdentity] and [ParseIdentity] for a party's private keys, and
//     [Identity.Bundle] for the signed public half that peers pin.
//   - [ParseBundle] and [ParseBundleText] to read a peer's bundle.
//   - [Sign] and [Parse] for signed envelopes (manifests, results, rotation
//     statements, cancels, acks), each kind with its own magic and domain label.
//   - [NewSealer] and [NewOpener] to seal and open a payload as a stream of
//     64 KiB chunks in constant memory.
//   - [EncodeBody] and [DecodeBody]: the one canonical JSON encoding of every
//     signed body. A body is accepted only if re-encoding it yields the same bytes.
//
// The byte-level formats are fixed in docs/SPEC.md; section numbers in comments
// refer to it.
//
// # Security
//
// Signatures are Ed25519 over a domain label, the envelope magic, the body
// length and the body, so a signature made for one kind of file can never be
// replayed as another. Payloads use a fresh random 32-byte key per message,
// wrapped for the recipient with NaCl box's anonymous seal (X25519,
// XSalsa20-Poly1305); the stream itself is ChaCha20-Poly1305 in the STREAM
// construction (counter nonce with a last-chunk flag), so truncation, reordering
// and extension are detected. The sender of a payload is anonymous at this
// layer: authenticity comes from the signed envelope that pins the payload's
// length and SHA-256.
//
// Every length is checked before a signature is verified or a chunk is opened;
// X25519 public keys of low order are refused; Ed25519 keys and signatures of the
// wrong length are refused rather than passed to code that panics.
//
// # Compatibility
//
// Every format carries a version (the envelope magic ends in a version digit;
// bodies carry "v":1). An unknown version is refused with [ErrUnknownVersion],
// never guessed at.
package crypto
