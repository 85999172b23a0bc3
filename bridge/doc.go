// Package bridge is the wire format both sides of a bridge speak: request
// and result bodies, sealing and opening them, the folder layout, request
// ids, the signed catalog, liveness stamps, messages and progress, the
// agent secret's text, and the one vocabulary of reasons, notices and next
// steps. It runs nothing, watches nothing and keeps no state: each side's
// home and trust store is package trust, the host daemon package host, the
// agent's client package agent (neither imports the other), the Syncthing
// client package syncthing, the checks of `bridge doctor` package doctor.
//
// Entry points:
//
//   - [SealRequest] and [OpenRequest], [OpenCall]: a request manifest and its
//     sealed payload (docs/SPEC.md §7, §8).
//   - [SealResult] and [OpenResult], [OpenOutput]: a result and its sealed
//     output with the receipt (§9).
//   - [RequestPath], [ResultPath] and the other path functions: every name
//     in the synced folder comes from them.
//
// # Security
//
// Nothing read from the folder is decoded before a signature verified it
// ([OpenBody]); lengths are checked before signatures and AEAD; bodies have
// one canonical encoding. Results are bound to the exact request manifest
// they answer. A home must never be inside the synced folder.
//
// # Compatibility
//
// The format is version 1 (docs/SPEC.md §13): every envelope's magic and
// every body's "v". A reader refuses any other version.
package bridge
