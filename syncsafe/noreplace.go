package syncsafe

import "os"

// linkThenRemove is RenameNoReplace by a hard link, which fails if newpath
// exists, and the removal of oldpath (not used on Windows). A failed removal leaves the temp
// beside its copy: the move itself happened.
func linkThenRemove(oldpath, newpath string) error {
	if err := os.Link(oldpath, newpath); err != nil {
		return err
	}
	os.Remove(oldpath)
	return nil
}
