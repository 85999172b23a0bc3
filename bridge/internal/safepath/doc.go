// Package safepath walks a path as the kernel resolves it, through every
// link at any depth, and says whether another user could change what it
// names: each directory traversed must be owned by root or this user and
// not writable by group or others (a sticky one, as /tmp, is fine above the
// last), each link owned by root or this user, and no FUSE file system
// another user mounted may be crossed (Linux). The host's policy checks
// every program it runs this way (package policy), and a home checks where
// it keeps its keys ([WalkOwned]); it is a package of its own so that the
// wire package, which holds the home, need not link the policy compiler.
package safepath
