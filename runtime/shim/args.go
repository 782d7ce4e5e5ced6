// Package shim is gpurun-runtime: an OCI runtime that engines (containerd's
// runc shim, dockerd) call in place of runc. On create and run it plans the
// container's /dev/shm with the shared planner, carries the plan out, and
// then hands the unchanged command line to the low-level runtime.
package shim

import (
	"path/filepath"
	"strings"
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
}

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
