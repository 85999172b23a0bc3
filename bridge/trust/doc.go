// Package trust is each side's home: the private state directory a host or
// an agent keeps outside the synced folder, and the trust store in it — its
// own keys and their generations ([OwnKey], [Home.Rotate]), the peers it
// trusts with their keys and standing ([Peer], [PeerKey], [KeyState]),
// revocations, the idempotency secret of keyed requests
// ([Home.KeyedRequestID]), and an agent's home rebuilt from its one-line
// secret ([RestoreAgentHome]). [InitHome] and [OpenHome] refuse a home inside
// the folder, or one another user could change ([CheckOutside], and the walk
// of package safepath).
//
// The byte formats it reads and writes (bundles, rotation statements, the
// agent secret's text) are the wire's (package bridge, docs/SPEC.md); this
// package keeps them on disk and decides whom to trust.
package trust
