//go:build !unix

package bridge

// foreignHome: ownership and modes are Unix checks.
func foreignHome(string) string { return "" }
