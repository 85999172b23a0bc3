//go:build race

package runner

// raceOn: a race-instrumented binary maps terabytes of shadow memory, so
// a shim of it cannot live under an RLIMIT_AS of a few GiB.
const raceOn = true
