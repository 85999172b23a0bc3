//go:build race

package host

// raceOn: the race detector multiplies memory, so memory bounds do not hold.
const raceOn = true
