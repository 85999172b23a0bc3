//go:build !linux

package syncsafe

import "os"

// scanDir calls fn for each entry of the open directory d, by os.ReadDir
// (see the Linux version; buf is unused here; its errors name d by shown).
func scanDir(d *os.File, shown string, _ *[]byte, fn func(name []byte, kind entryKind)) error {
	des, err := d.ReadDir(-1)
	if err != nil {
		return shownAs(err, shown)
	}
	for _, de := range des {
		kind := entryOther
		switch t := de.Type(); {
		case t.IsDir():
			kind = entryDir
		case t.IsRegular():
			kind = entryFile
		}
		fn([]byte(de.Name()), kind)
	}
	return nil
}
