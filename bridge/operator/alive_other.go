//go:build !unix

package operator

func processAlive(int) bool { return false }
