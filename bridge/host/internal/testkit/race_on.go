//go:build race

package testkit

// RaceOn says whether the race detector is on: it multiplies memory and
// CPU, so memory bounds do not hold and fewer tests fit at once.
const RaceOn = true
