package syncsafe

// setNoOpenat2 has the package take the portable path, as where openat2 is
// missing (v), or not; the returned function puts back what was.
func setNoOpenat2(v bool) (restore func()) {
	was := noOpenat2.Load()
	noOpenat2.Store(v)
	return func() { noOpenat2.Store(was) }
}
