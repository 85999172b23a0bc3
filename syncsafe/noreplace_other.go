//go:build !linux && !darwin && !windows

package syncsafe

// RenameNoReplace moves oldpath to newpath unless something is at newpath
// already: then it fails with an error that is fs.ErrExist, and both stay
// as they were. A link and an unlink here.
func RenameNoReplace(oldpath, newpath string) error {
	return linkThenRemove(oldpath, newpath)
}
