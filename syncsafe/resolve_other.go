//go:build !linux

package syncsafe

import (
	"io/fs"
	"os"
)

// Only Linux has openat2; elsewhere every path takes the portable route.

func (f *Folder) fastLstat(string) (fs.FileInfo, bool, error) { return nil, false, nil }

func (f *Folder) fastOpen(string, int) (*os.File, bool, error) { return nil, false, nil }

func openDirFast(*os.File, string) (*os.File, bool, error) { return nil, false, nil }

func (f *Folder) fastLstatIn(string, []string, []fs.FileInfo) (bool, error) { return false, nil }

// rootFromDir: no descriptor-to-Root path here (see the Linux version).
func rootFromDir(*os.File) (*os.Root, bool, error) { return nil, false, nil }

func (f *Folder) lookerDir(string) (*os.File, error) { return nil, nil }

func lstatAt(*os.File, string) (fs.FileInfo, error) { panic("syncsafe: lstatAt without openat2") }
