// Package systest holds the host's system suites: the daemon driven as a
// whole, through its exported API and as a process of the test binary,
// beside real sync clients (two Syncthings on loopback, Unison, rclone
// bisync) and the real agent client. It has no code but its tests.
//
// They are apart from the unit tests of bridge/host so that those run in
// seconds, and `go test ./...` runs both packages side by side. What they
// share (polling, planted files, the daemon process, the crash probe) is in
// bridge/host/internal/testkit and bridge/host/internal/probe.
package systest
