package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time: go build -ldflags "-X main.version=v1.2.3".
// Empty means: derive it from the build info (module version, or the VCS
// revision for a build from a checkout).
var version = ""

func newVersionCmd(cfg *config) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print deed's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v, rev := buildVersion()
			if cfg.json {
				writeJSON(cfg.inv.Stdout, map[string]string{
					"version":  v,
					"revision": rev,
					"go":       runtime.Version(),
					"platform": runtime.GOOS + "/" + runtime.GOARCH,
				})
				return nil
			}
			fmt.Fprintln(cfg.inv.Stdout, versionLine(v))
			return nil
		},
	}
}

// versionLine is the one line `deed version` and `deed --version` print.
func versionLine(v string) string {
	return fmt.Sprintf("deed %s (%s, %s/%s)", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// buildVersion returns the version to report and the VCS revision, if known.
func buildVersion() (v, rev string) {
	info, ok := debug.ReadBuildInfo()
	if ok {
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && rev != "" {
			rev += "-dirty"
		}
	}
	switch {
	case version != "":
		return version, rev
	case ok && info.Main.Version != "" && info.Main.Version != "(devel)":
		return info.Main.Version, rev
	case rev != "":
		return "devel-" + rev, rev
	default:
		return "devel", rev
	}
}
