//go:build !unix

package host

func processAlive(int) bool { return false }
