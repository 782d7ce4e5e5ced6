// Package version says which gpurun this is.
package version

import "runtime/debug"

// Version is set at build time with
// -ldflags "-X github.com/gpurun/gpurun/version.Version=v1.2.3".
var Version = ""

// String returns the version: the one set at build time, else the module
// version Go recorded, else "devel".
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
