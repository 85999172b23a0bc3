//go:build !linux

package syncsafe

// setNoOpenat2: elsewhere the portable path is the only one.
func setNoOpenat2(bool) (restore func()) { return func() {} }
