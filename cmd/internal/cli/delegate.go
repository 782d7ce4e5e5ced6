package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/internal/exitcode"
)

// gpurun ships as two binaries (docs/docker-run.md#speed), two main
// packages over this one:
//
//   - gpurun (cmd/gpurun): docker run/create, the OCI hook, install,
//     explain, shm-probe, completion and version run in it; the commands
//     of gpurun-full are stubs that hand the whole command line to
//     gpurun-full. Its import graph holds none of the packages that are
//     slow to start (TestLeanImportGraph), so a container start pays ~4 ms,
//     not ~17.
//   - gpurun-full (cmd/gpurun-full, with cmd/internal/fullcli): every
//     command, in-process.
//
// Code that needs compose-go, the Kubernetes API types, gRPC/CRI, NRI,
// man-page generation or a metrics library belongs to a command listed in
// FullCommands, wired in cmd/internal/fullcli.

// FullBinary is the name of the full build, installed next to gpurun.
const FullBinary = "gpurun-full"

// The one-line descriptions of the commands that live in gpurun-full only:
// the real commands and gpurun's stubs for them share them.
const (
	PlanShort    = "Show what /dev/shm a container's OCI spec, or a Kubernetes pod, should get, and why"
	ResizeShort  = "Resize a running container's /dev/shm live, without a restart"
	NodeShort    = "Set gpurun up on the Kubernetes node this runs on (the DaemonSet's entrypoint)"
	NRIShort     = "Run as an NRI plugin: GPU containers of containerd 2.x and CRI-O get the policy's /dev/shm"
	WebhookShort = "Serve the mutating admission webhook: GPU pods get a Memory emptyDir at /dev/shm, sized by the policy"
	DoctorShort  = "Say whether /dev/shm is right here, and how to fix it"
	StatsShort   = "Show every running container's /dev/shm: size, use, peak, orphaned bytes, sharing, and gpurun's decision"
	ComposeShort = "Work on Docker Compose files: give their GPU services a right-sized /dev/shm"
	GenDocsShort = "Write man pages, completion scripts, config.toml and docs/config.md (for make dist and make docs)"
)

// FullCommand is a top-level command that only gpurun-full has.
type FullCommand struct {
	Name, Short string
	Hidden      bool
}

// FullCommands are the commands gpurun hands to gpurun-full, in the order
// of gpurun --help.
func FullCommands() []FullCommand {
	return []FullCommand{
		{Name: "plan", Short: PlanShort},
		{Name: "resize", Short: ResizeShort},
		{Name: "node", Short: NodeShort},
		{Name: "nri", Short: NRIShort},
		{Name: "webhook", Short: WebhookShort},
		{Name: "doctor", Short: DoctorShort},
		{Name: "stats", Short: StatsShort},
		{Name: "compose", Short: ComposeShort},
		{Name: "__gendocs", Short: GenDocsShort, Hidden: true},
	}
}

// NRIPluginSocketEnv is set when containerd or CRI-O starts a
// pre-installed NRI plugin (the NRI API's PluginSocketEnvVar, which the
// lean gpurun must not import; fullcli's tests check).
const NRIPluginSocketEnv = "NRI_PLUGIN_SOCKET"

// Lean is the gpurun binary: stubs for gpurun-full's commands, and a
// dispatch that hands their command lines to gpurun-full.
func Lean() Binary {
	return Binary{
		AddCommands: func(root *cobra.Command, _ *Globals) { root.AddCommand(StubCmds()...) },
		Dispatch: func(args, rest []string) ([]string, bool, error) {
			return delegator{Executable: os.Executable, LookPath: exec.LookPath, Exec: syscall.Exec, Environ: os.Environ()}.dispatch(args, rest, os.Getenv)
		},
	}
}

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

// dispatch hands a command line for gpurun-full (a command of its, help or
// completion for one, or the NRI plugin launched by the runtime with no
// arguments) to gpurun-full, which replaces this process; it returns only
// when that fails. Every other command line goes to the command tree.
func (d delegator) dispatch(args, rest []string, getenv func(string) string) (cobraArgs []string, handled bool, err error) {
	if !delegated(rest) && (len(rest) > 0 || getenv(NRIPluginSocketEnv) == "") {
		return args, false, nil
	}
	return nil, true, d.run(args)
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
		return exitcode.New(127, err)
	}
	argv := append([]string{full}, args...)
	if err := d.Exec(full, argv, d.Environ); err != nil {
		return exitcode.New(126, fmt.Errorf("exec %s: %w", full, err))
	}
	return nil
}

// delegated says whether a command line (after gpurun's own options) is
// for a command of gpurun-full: the command itself, or help or shell
// completion for it.
func delegated(rest []string) bool {
	isFull := func(name string) bool {
		return slices.ContainsFunc(FullCommands(), func(c FullCommand) bool { return c.Name == name })
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

// StubCmds are gpurun's entries for the commands of gpurun-full, so that
// gpurun --help lists them and completion offers them. gpurun hands their
// command lines to gpurun-full before cobra sees them (delegated), so a
// stub never runs.
func StubCmds() []*cobra.Command {
	var cmds []*cobra.Command
	for _, c := range FullCommands() {
		cmds = append(cmds, &cobra.Command{
			Use:                c.Name,
			Short:              c.Short,
			Hidden:             c.Hidden,
			DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return errors.New(c.Name + " runs in " + FullBinary + ", not in gpurun itself")
			},
		})
	}
	return cmds
}
