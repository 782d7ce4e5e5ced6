// Package cli is gpurun's command line as both binaries have it: the
// root command, gpurun's own options, the commands the lean gpurun runs
// itself (docker run and create, the OCI hook, install, explain,
// shm-probe, completion, version) and the dispatch of a command line to
// the docker door, to gpurun-full or to the command tree. Each command
// fills a package's options from its flags and calls it; the work is the
// packages'. Its import graph holds none of the packages that are slow to
// start (cmd/gpurun's TestLeanImportGraph).
package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/docker/cliplugin"
	"github.com/gpurun/gpurun/docker/launch"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/policy"
)

// Globals are gpurun's own options, given before the subcommand, and the
// docker CLI's global options given with them (for a docker run).
type Globals struct {
	launch.Options
}

// Policy loads the policy named by --config, GPURUN_CONFIG or the default
// path.
func (g *Globals) Policy() (*policy.Policy, error) { return g.LoadPolicy(os.Getenv) }

// Binary is what sets gpurun and gpurun-full apart.
type Binary struct {
	// AddCommands adds the commands of gpurun-full to root: the commands
	// themselves, or the lean gpurun's stubs for them.
	AddCommands func(root *cobra.Command, g *Globals)
	// Dispatch returns the arguments for the command tree, given the
	// command line args and rest, args without gpurun's own options; or it
	// runs the command line itself and returns handled true.
	Dispatch func(args, rest []string) (cobraArgs []string, handled bool, err error)
}

// Main runs the process's command line as binary b and returns the exit
// status: a docker run (with gpurun's own options before it) goes straight
// to the docker door with its arguments untouched; everything else goes to
// b's dispatch and the command tree.
func Main(b Binary) int {
	g := &Globals{}
	env := launch.OSEnv()
	args := os.Args[1:]
	if cliplugin.IsCLIPlugin(os.Args[0]) {
		// Run by the docker CLI as docker-gpurun (`docker gpurun ...`).
		rest, done, err := launch.FromDockerCLI(args, &g.Options, rootShort, env)
		if done {
			return exit(err)
		}
		args = rest
	}
	args = kubectlCompleteArgs(os.Args[0], args)
	return exit(run(NewRoot(g, b.AddCommands), g, b, args, env))
}

// run dispatches a command line.
func run(root *cobra.Command, g *Globals, b Binary, args []string, env launch.Env) error {
	rest, handled, err := launch.Dispatch(args, &g.Options, IsSubcommand(root), env)
	if handled || err != nil {
		return err
	}
	cobraArgs, handled, err := b.Dispatch(args, rest)
	if handled {
		return err
	}
	root.SetArgs(cobraArgs)
	return root.Execute()
}

// exit prints err, if any, and returns its exit status.
func exit(err error) int {
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpurun: %v\n", err)
	}
	return exitcode.Of(err)
}

// IsSubcommand returns whether a word names one of root's commands.
func IsSubcommand(root *cobra.Command) func(string) bool {
	return func(name string) bool {
		for _, c := range root.Commands() {
			if c.Name() == name || c.HasAlias(name) {
				return true
			}
		}
		return false
	}
}

// rootShort is gpurun's one-line description (and the docker CLI plugin's).
const rootShort = "Give GPU containers a /dev/shm big enough for real work"

// NewRoot returns gpurun's command tree, with gpurun-full's commands (or
// stubs for them) from addFull.
func NewRoot(g *Globals, addFull func(*cobra.Command, *Globals)) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpurun",
		Short: rootShort,
		Long: `gpurun gives GPU containers a right-sized /dev/shm, however they start.

Containers get a 64 MiB /dev/shm by default; PyTorch DataLoader workers die
with "Bus error" and NCCL with "posix_fallocate failed: No space left on
device". gpurun decides the size once (half the memory the container may use,
at least 1 GiB, by default) and applies it through every front door.`,
		Example: `  # docker run, with the right /dev/shm for GPU containers
  gpurun run --rm -it --gpus all nvidia/cuda:12.4.1-runtime-ubuntu22.04 python train.py
  gpurun --dry-run -e NVIDIA_VISIBLE_DEVICES=all busybox df -k /dev/shm

  # What would gpurun do to this bundle's /dev/shm?
  gpurun plan --spec /run/containerd/.../config.json
  gpurun plan --spec config.json --host-memory 64g --json`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	root.SetVersionTemplate("gpurun {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.StringVar(&g.ConfigPath, "config", "", fmt.Sprintf("policy file (default $%s, else %s); a directory is docker's --config", policy.ConfigEnv, policy.DefaultConfigPath))
	pf.StringVar(&g.ConfigPath, "policy", "", "policy file, as --config FILE")
	pf.BoolVarP(&g.Verbose, "verbose", "v", false, "say why on stderr")
	pf.BoolVar(&g.DryRun, "dry-run", false, "print what would be run or changed, and why; change nothing")
	root.AddCommand(newRunCmd(g), newCreateCmd(g), newInstallCmd(g), newUninstallCmd(g), newVersionCmd())
	root.AddCommand(newHookCmd(g))
	root.AddCommand(newExplainCmd(g), newShmProbeCmd())
	root.AddCommand(newCompletionCmd(root))
	addFull(root, g) // gpurun-full's commands, or gpurun's stubs for them (delegate.go)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gpurun's version",
		Example: `  gpurun version
  gpurun --version
  docker gpurun version   # the docker CLI plugin (gpurun install docker-cli-plugin)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "gpurun %s\n", version.String())
			return err
		},
	}
}
