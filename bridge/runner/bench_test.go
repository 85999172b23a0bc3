//go:build linux

package runner

import (
	"context"
	"testing"
	"time"
)

// BenchmarkStart is one run of `true` without limits (no shim) and with an
// open-files limit (through the resource-limit shim): the difference is
// what the shim costs an op, its start and its quiescing before the limits
// included. Wall time per run (in bridge/runner: go test -run '^$' -bench
// Start -benchtime 400x). Linux only: this package's TestMain, which makes
// the test binary a shim, is.
func BenchmarkStart(b *testing.B) {
	for _, c := range []struct {
		name string
		lim  Limits
	}{{"no limits", Limits{}}, {"shim", Limits{OpenFiles: 64}}} {
		b.Run(c.name, func(b *testing.B) {
			s := Spec{Argv: []string{"true"}, Dir: b.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}, Grace: 200 * time.Millisecond, Limits: c.lim}
			for b.Loop() {
				if o := Run(context.Background(), s); o.StartErr != nil || o.ExitCode != 0 {
					b.Fatalf("start %v, exit %d, stderr %q", o.StartErr, o.ExitCode, o.Stderr.Data)
				}
			}
		})
	}
}
