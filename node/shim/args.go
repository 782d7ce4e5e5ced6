// Package shim is gpurun-runtime: an OCI runtime that engines (containerd's
// runc shim, dockerd) call in place of runc. On create and run it reads the
// bundle's config.json and hands it to the enforcer (node/enforce), which
// plans the container's /dev/shm with the shared planner and carries the
// plan out — rewriting config.json, or growing the host tmpfs the engine
// named for the container — and then it hands the command line, less its
// own flags, to the low-level runtime.
package shim

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/engine/dirs"
)

// Invocation is what gpurun-runtime needs from a runc command line.
type Invocation struct {
	// Command is the subcommand ("create", "run", "start", ...), "" if none.
	Command string
	// Bundle is the bundle directory of create and run: --bundle, -b, or
	// the working directory.
	Bundle string
	// ID is the container id, "" if none was given.
	ID string
	// Log and LogFormat are runc's global --log and --log-format: where an
	// engine reads a runtime's error from ("json" or "text").
	Log, LogFormat string
	// DockerRoot is dockerd's data-root, when dockerd passed it in the
	// runtime's runtimeArgs (dirs.DockerRootFlag, gpurun's own
	// global flag, which RuncArgs removes).
	DockerRoot string
}

// ownFlag is gpurun-runtime's own global flag, without its dashes.
var ownFlag = strings.TrimLeft(dirs.DockerRootFlag, "-")

// valueFlags are the runc and crun flags, global or of create and run,
// that take a value. runc parses with urfave/cli, which accepts one dash or
// two and "--flag=value" or "--flag value".
var valueFlags = map[string]bool{
	// global
	"root": true, "log": true, "log-format": true, "criu": true, "rootless": true,
	"cgroup-manager": true, "log-level": true,
	// create / run
	"bundle": true, "b": true, "console-socket": true, "pid-file": true,
	"preserve-fds": true, "pidfd-socket": true, "config": true, "f": true,
	// gpurun-runtime's own, from dockerd's runtimeArgs
	ownFlag: true,
}

// ParseArgs reads a runc command line (without the program name). It knows
// which flags take values, so that a value ("--root create") is never taken
// for the subcommand and a bundle literally named "create" is found.
func ParseArgs(args []string, cwd string) Invocation {
	var inv Invocation
	i := 0
	// Global flags, up to the subcommand.
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		name, hasValue, ok := flagName(a)
		if !ok {
			break
		}
		value := ""
		if hasValue {
			_, value, _ = strings.Cut(a, "=")
		} else if valueFlags[name] && i+1 < len(args) {
			i++ // the next argument is the value
			value = args[i]
		}
		switch name {
		case "log":
			inv.Log = value
		case "log-format":
			inv.LogFormat = value
		case ownFlag:
			inv.DockerRoot = value
		}
	}
	if i >= len(args) {
		return inv
	}
	inv.Command = args[i]
	i++
	bundle := ""
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) && inv.ID == "" {
				inv.ID = args[i+1]
			}
			break
		}
		name, hasValue, ok := flagName(a)
		if !ok {
			if inv.ID == "" {
				inv.ID = a
			}
			continue
		}
		value := ""
		if hasValue {
			_, value, _ = strings.Cut(a, "=")
		} else if valueFlags[name] && i+1 < len(args) {
			i++
			value = args[i]
		}
		if name == "bundle" || name == "b" {
			bundle = value
		}
	}
	if inv.Command == "create" || inv.Command == "run" {
		switch {
		case bundle == "":
			inv.Bundle = cwd
		case filepath.IsAbs(bundle):
			inv.Bundle = filepath.Clean(bundle)
		default:
			inv.Bundle = filepath.Join(cwd, bundle)
		}
	}
	return inv
}

// RuncArgs returns args without gpurun-runtime's own global flags (the
// ones dockerd passes from runtimeArgs, ahead of its own): what the
// low-level runtime, which would refuse an unknown flag, gets. Anything
// after the subcommand is left as it is.
func RuncArgs(args []string) []string {
	var drop []int
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, hasValue, ok := flagName(a)
		if !ok {
			break
		}
		if name == ownFlag {
			drop = append(drop, i)
			if !hasValue && i+1 < len(args) {
				drop = append(drop, i+1)
			}
		}
		if !hasValue && valueFlags[name] {
			i++
		}
	}
	if len(drop) == 0 {
		return args
	}
	out := make([]string, 0, len(args)-len(drop))
	for i, a := range args {
		if !slices.Contains(drop, i) {
			out = append(out, a)
		}
	}
	return out
}

// flagName returns the name of a flag argument ("--root=x" -> "root", true).
func flagName(a string) (name string, hasValue, ok bool) {
	if len(a) < 2 || a[0] != '-' {
		return "", false, false
	}
	name = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if name == "" {
		return "", false, false
	}
	name, _, hasValue = strings.Cut(name, "=")
	return name, hasValue, true
}
