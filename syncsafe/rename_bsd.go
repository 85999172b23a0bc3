//go:build unix && !linux

package syncsafe

// place moves src/srcName to dst/dstName; without replace by link+unlink,
// which fails with EEXIST rather than overwrite.
func place(src dirH, srcName string, dst dirH, dstName string, replace bool) error {
	if replace {
		return renameReplace(src, srcName, dst, dstName)
	}
	return linkUnlink(src, srcName, dst, dstName)
}
