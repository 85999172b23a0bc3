package policy

import "github.com/syncbridge/bridge/bridge/internal/opspec"

// Suggest returns the candidate closest to s (at most two edits away), or
// "": the "did you mean" of op and argument names (opspec.Suggest).
func Suggest(s string, candidates []string) string { return opspec.Suggest(s, candidates) }

// closest is Suggest, for the policy's own messages.
func closest(s string, candidates []string) string { return opspec.Suggest(s, candidates) }
