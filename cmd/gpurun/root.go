package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/policy"
)

// globals are gpurun's own options, given before the subcommand.
type globals struct {
	configPath string
	verbose    bool
	dryRun     bool
	// dockerGlobals are the docker CLI's global options (-H, --context, ...)
	// given to docker-gpurun, the docker CLI plugin, before "gpurun"; the
	// docker run that gpurun execs gets them again.
	dockerGlobals []string
}

// loadPolicy loads the policy named by --config, GPURUN_CONFIG or the
// default path.
func (g *globals) loadPolicy() (*policy.Policy, error) {
	path, explicit := policy.ResolvePath(g.configPath, os.Getenv)
	return policy.Load(path, explicit)
}

func newRootCmd(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpurun",
		Short: "Give GPU containers a /dev/shm big enough for real work",
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
	pf.StringVar(&g.configPath, "config", "", fmt.Sprintf("policy file (default $%s, else %s); a directory is docker's --config", policy.ConfigEnv, policy.DefaultConfigPath))
	pf.StringVar(&g.configPath, "policy", "", "policy file, as --config FILE")
	pf.BoolVarP(&g.verbose, "verbose", "v", false, "say why on stderr")
	pf.BoolVar(&g.dryRun, "dry-run", false, "print what would be run or changed, and why; change nothing")
	root.AddCommand(newRunCmd(g), newCreateCmd(g), newInstallCmd(g), newUninstallCmd(g), newVersionCmd())
	root.AddCommand(newHookCmd(g))
	root.AddCommand(newExplainCmd(g), newShmProbeCmd())
	root.AddCommand(newCompletionCmd(root))
	addFullCmds(root, g) // gpurun-full's commands, or gpurun's stubs for them (delegate.go)
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
