//go:build !linux && !darwin

package ledger

import "os"

// changeTime is fi's modification time here (Windows keeps no change time
// in os.FileInfo): a tool that writes the file and sets its time back
// (a restore that keeps times) with the same size goes unseen.
func changeTime(fi os.FileInfo) int64 { return fi.ModTime().UnixNano() }
