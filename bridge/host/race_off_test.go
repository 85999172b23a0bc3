//go:build !race

package host

const raceOn = false
