package cli

import (
	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/docker/launch"
)

func newRunCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "run [DOCKER RUN OPTIONS] IMAGE [COMMAND] [ARG...]",
		Short: "docker run, with the /dev/shm gpurun's policy gives GPU containers",
		Long: `Run takes exactly the arguments of "docker run" and runs the docker CLI with
them, adding --shm-size=<bytes> right after "run" when the container uses a
GPU and its /dev/shm would be too small (or --ipc=host in mode ipc-host).
Everything else — flags, TTY, signals, exit status, DOCKER_HOST and contexts —
is docker's own: gpurun replaces itself with docker.

"gpurun IMAGE ..." and "gpurun -it IMAGE ..." mean "gpurun run ...".
gpurun's own options go before "run": --dry-run, -v, --config; or in the
environment: GPURUN_DRY_RUN=1, GPURUN_VERBOSE=1, GPURUN_CONFIG, GPURUN_DOCKER.`,
		Example: `  gpurun run --rm -it --gpus all nvidia/cuda:12.4.1-runtime-ubuntu22.04 python train.py
  gpurun --dry-run run --rm -e NVIDIA_VISIBLE_DEVICES=all busybox df -k /dev/shm
  GPURUN_DOCKER=/usr/bin/docker gpurun -v run --rm --memory 2g my/trainer`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDocker(cmd, g, "run", args)
		},
	}
}

func newCreateCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "create [DOCKER CREATE OPTIONS] IMAGE [COMMAND] [ARG...]",
		Short: "docker create, with the /dev/shm gpurun's policy gives GPU containers",
		Long: `Create is run's twin for "docker create": it takes exactly the arguments of
"docker create", adds --shm-size=<bytes> (or --ipc=host) as run does, and
replaces itself with the docker CLI. "gpurun container create" and
"gpurun container run" are the same commands.`,
		Example: `  gpurun create --name trainer --gpus all nvidia/cuda:12.4.1-runtime-ubuntu22.04 python train.py
  gpurun --dry-run container create -e NVIDIA_VISIBLE_DEVICES=all busybox`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDocker(cmd, g, "create", args)
		},
	}
}

// runDocker is `gpurun run|create ARGS` given as a command of the tree
// ("gpurun --config FILE run ..." and the like reach launch.Dispatch first).
func runDocker(cmd *cobra.Command, g *Globals, command string, args []string) error {
	env := launch.OSEnv()
	env.Stdout, env.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
	return launch.Run(launch.Invocation{Command: []string{command}, Args: args}, g.Options, env)
}
