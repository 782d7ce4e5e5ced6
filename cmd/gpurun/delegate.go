package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"
)

// gpurun ships as two builds of this package (docs/performance.md):
//
//   - gpurun, built with -tags gpurun_lean: docker run/create, the OCI hook,
//     install, explain, completion and version run in it; the commands
//     below are stubs that hand the whole command line to gpurun-full.
//     Its import graph holds none of the packages that are slow to start
//     (TestLeanImportGraph), so a container start pays ~3 ms, not ~17.
//   - gpurun-full, the default build: every command, in-process.
//
// Code that needs compose-go, the Kubernetes API types, gRPC/CRI, NRI,
// man-page generation or a metrics library belongs to a command listed in
// fullCommands, in a file built with `//go:build !gpurun_lean`.

// FullBinary is the name of the full build, installed next to gpurun.
const FullBinary = "gpurun-full"

// The one-line descriptions of the commands that live in gpurun-full only:
// the real commands and gpurun's stubs for them share them.
const (
	planShort    = "Show what /dev/shm a container's OCI spec, or a Kubernetes pod, should get, and why"
	resizeShort  = "Resize a running container's /dev/shm live, without a restart"
	nodeShort    = "Set gpurun up on the Kubernetes node this runs on (the DaemonSet's entrypoint)"
	nriShort     = "Run as an NRI plugin: GPU containers of containerd 2.x and CRI-O get the policy's /dev/shm"
	webhookShort = "Serve the mutating admission webhook: GPU pods get a Memory emptyDir at /dev/shm, sized by the policy"
	doctorShort  = "Say whether /dev/shm is right here, and how to fix it"
	statsShort   = "Show every running container's /dev/shm: size, use, peak, orphaned bytes, sharing, and gpurun's decision"
	composeShort = "Work on Docker Compose files: give their GPU services a right-sized /dev/shm"
	genDocsShort = "Write man pages, completion scripts, config.toml and docs/config.md (for make dist and make docs)"
)

// fullCommand is a top-level command that only gpurun-full has.
type fullCommand struct {
	name, short string
	hidden      bool
}

// fullCommands are the commands gpurun hands to gpurun-full, in the order
// of gpurun --help.
func fullCommands() []fullCommand {
	return []fullCommand{
		{name: "plan", short: planShort},
		{name: "resize", short: resizeShort},
		{name: "node", short: nodeShort},
		{name: "nri", short: nriShort},
		{name: "webhook", short: webhookShort},
		{name: "doctor", short: doctorShort},
		{name: "stats", short: statsShort},
		{name: "compose", short: composeShort},
		{name: "__gendocs", short: genDocsShort, hidden: true},
	}
}

// nriPluginSocketEnv is set when containerd or CRI-O starts a pre-installed
// NRI plugin (the NRI API's PluginSocketEnvVar; nri_test.go checks).
const nriPluginSocketEnv = "NRI_PLUGIN_SOCKET"

// delegator runs gpurun-full in place of this process. Its fields are the
// process's effects, so tests can replace them.
type delegator struct {
	// Executable is this program's path (os.Executable).
	Executable func() (string, error)
	// LookPath finds a program on PATH (exec.LookPath).
	LookPath func(string) (string, error)
	// Exec replaces the process (syscall.Exec).
	Exec    func(path string, argv, env []string) error
	Environ []string
}

// fullPath finds gpurun-full: next to this executable (links resolved, so
// the docker CLI plugin's link finds the package's), else on PATH.
func (d delegator) fullPath() (string, error) {
	var tried []string
	if self, err := d.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		p := filepath.Join(filepath.Dir(self), FullBinary)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
		tried = append(tried, p)
	}
	p, err := d.LookPath(FullBinary)
	if err == nil {
		return p, nil
	}
	tried = append(tried, "PATH")
	return "", fmt.Errorf("%s is not installed (looked in %v): install it from the same release as gpurun", FullBinary, tried)
}

// run execs gpurun-full with gpurun's command line args (after the program
// name); it returns only when that fails.
func (d delegator) run(args []string) error {
	full, err := d.fullPath()
	if err != nil {
		return &exitError{127, err}
	}
	argv := append([]string{full}, args...)
	if err := d.Exec(full, argv, d.Environ); err != nil {
		return &exitError{126, fmt.Errorf("exec %s: %w", full, err)}
	}
	return nil
}

// delegated says whether a command line (after gpurun's own options) is
// for a command of gpurun-full: the command itself, or help or shell
// completion for it.
func delegated(rest []string) bool {
	isFull := func(name string) bool {
		return slices.ContainsFunc(fullCommands(), func(c fullCommand) bool { return c.name == name })
	}
	switch {
	case len(rest) == 0:
		return false
	case isFull(rest[0]):
		return true
	case len(rest) > 1 && slices.Contains([]string{"help", "__complete", "__completeNoDesc"}, rest[0]):
		return isFull(rest[1])
	}
	return false
}

// stubCmds are gpurun's entries for the commands of gpurun-full, so that
// gpurun --help lists them and completion offers them. gpurun hands their
// command lines to gpurun-full before cobra sees them (delegated), so a
// stub never runs.
func stubCmds() []*cobra.Command {
	var cmds []*cobra.Command
	for _, c := range fullCommands() {
		cmds = append(cmds, &cobra.Command{
			Use:                c.name,
			Short:              c.short,
			Hidden:             c.hidden,
			DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return errors.New(c.name + " runs in " + FullBinary + ", not in gpurun itself")
			},
		})
	}
	return cmds
}
