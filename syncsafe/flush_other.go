//go:build !linux

package syncsafe

func (f *Folder) syncFS() error { return errNoSyncFS }
