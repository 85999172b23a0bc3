//go:build !unix

package trust

// foreignHome: ownership and modes are Unix checks.
func foreignHome(string) string { return "" }
