package main

import (
	"runtime"
	"runtime/debug"
)

// Set at link time by release/build.sh:
//
//	-ldflags "-X main.buildVersion=v1.2.3 -X main.buildCommit=HASH -X main.buildDate=2026-01-02T03:04:05Z"
//
// Left empty, buildInfo falls back to what the Go toolchain stamps into
// every binary: the module version for `go install ...@v1.2.3`, the VCS
// revision and time for a build inside a git checkout.
var buildVersion, buildCommit, buildDate string

// versionInfo is what `bridge version` prints.
type versionInfo struct {
	Version  string `json:"version"`            // v1.2.3, or "devel" for a source build
	Commit   string `json:"commit,omitempty"`   // full VCS revision, when known
	Modified bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Date     string `json:"date,omitempty"`     // build date (release builds) or commit time (VCS stamp)
	Go       string `json:"go"`
	Platform string `json:"platform"` // GOOS/GOARCH
}

// buildInfo combines the link-time variables with bi (nil when the binary
// carries no build information). A link-time value wins over the
// toolchain's: a release build names exactly what it was built from.
func buildInfo(bi *debug.BuildInfo, ldVersion, ldCommit, ldDate string) versionInfo {
	v := versionInfo{Version: ldVersion, Commit: ldCommit, Date: ldDate,
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			v.Go = bi.GoVersion
		}
		var rev, vcsTime string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		// The VCS stamp describes a tree only when no commit was given at
		// link time; mixing the two would name a commit the binary may not
		// be built from.
		if v.Commit == "" && rev != "" {
			v.Commit, v.Modified = rev, modified
			if v.Date == "" {
				v.Date = vcsTime
			}
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	return v
}

func currentVersion() versionInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return buildInfo(bi, buildVersion, buildCommit, buildDate)
}

// VersionCmd prints the build's version.
type VersionCmd struct{}

func (c *VersionCmd) Run(g *Globals) error {
	v := currentVersion()
	if g.JSON {
		return g.printJSON(v)
	}
	g.printf("bridge %s\n", v.Version)
	if v.Commit != "" {
		mod := ""
		if v.Modified {
			mod = " (modified)"
		}
		g.printf("commit    %s%s\n", v.Commit, mod)
	} else {
		g.printf("commit    unknown\n")
	}
	if v.Date != "" {
		g.printf("date      %s\n", v.Date)
	}
	g.printf("go        %s\nplatform  %s\n", v.Go, v.Platform)
	return nil
}
