package fullcli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/diagnose/doctor"
	"github.com/gpurun/gpurun/engine/criclient"
)

const doctorLong = `Doctor checks /dev/shm where it runs, and says what is wrong and how to fix it.

  - Inside a container: what /dev/shm is (the engine's tmpfs, the host's,
    the user's), its size and use against what the policy gives this
    container, GPUs visible (device nodes, NVIDIA_VISIBLE_DEVICES,
    nvidia-smi), CPUs, the cgroup memory limit, NCCL_* variables, and the
    fix for docker run, compose and Kubernetes. --probe SIZE also allocates
    SIZE in /dev/shm (and frees it), to prove it can be had.
  - On a host: dockerd (daemon.json and what the daemon loaded: runtimes,
    default runtime, default-shm-size), containerd (config.toml with its
    imports, the gpurun runtime handler, its pod_annotations, what the
    running containerd loaded), the OCI hooks of Podman and CRI-O
    (hooks.d/gpurun.json), gpurun's policy file, the runtime gpurun-runtime
    hands over to, and the host's /dev/shm.
  - With CONTAINER (a Docker name or id, or with --cri a CRI container id):
    that container's IPC mode, /dev/shm size and use, GPU evidence, and
    what gpurun would do. Needs root on the host where it runs.

Where it runs is told from the PID namespace and the engines' bind mounts;
--host and --container override. --host-root, --docker-config and
--containerd-config imply --host.

Exit status: 0 healthy, 1 a problem found, 2 something could not be checked.
--json prints {schema, mode, target, status, exit_code, checks: [{name,
status (ok|warn|problem|error), detail, fix, data}]}; see docs/doctor.md.`

func newDoctorCmd(g *cli.Globals) *cobra.Command {
	var o doctor.RunOptions
	cmd := &cobra.Command{
		Use:   "doctor [CONTAINER]",
		Short: cli.DoctorShort,
		Long:  doctorLong,
		Example: `  # In a training container that died with "Bus error"
  gpurun doctor
  gpurun doctor --probe 8g

  # On the host: is gpurun installed and loaded in dockerd and containerd?
  sudo gpurun doctor --host

  # One container, from the host
  sudo gpurun doctor trainer
  sudo gpurun doctor --cri 3f2a9c1d --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.Container = args[0]
			}
			o.ConfigPath, o.Getenv, o.Out = g.ConfigPath, os.Getenv, cmd.OutOrStdout()
			return doctor.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.CRI, "cri", false, "CONTAINER is a CRI container id (Kubernetes), not a Docker container")
	f.StringVar(&o.Endpoint, "runtime-endpoint", "", fmt.Sprintf("CRI endpoint (default $%s, else %s)", criclient.EndpointEnv, criclient.DefaultEndpoint))
	f.BoolVar(&o.Host, "host", false, "check this host's engines, even if it looks like a container")
	f.BoolVar(&o.InContainer, "container", false, "check from inside a container, even if it looks like a host")
	f.StringVar(&o.HostRoot, "host-root", "", `the host's root filesystem, when it is mounted elsewhere (a DaemonSet: "/host")`)
	f.StringVar(&o.DockerConfig, "docker-config", "", "dockerd's daemon.json, a path on the host (default "+doctor.DefaultDockerConfig+")")
	f.StringVar(&o.ContainerdConfig, "containerd-config", "", "containerd's config.toml, a path on the host (default "+doctor.DefaultContainerdConfig+")")
	f.StringVar(&o.Probe, "probe", "", "inside a container: allocate SIZE in /dev/shm and free it again (8g, 8Gi)")
	f.BoolVar(&o.JSON, "json", false, "print the report as JSON (see docs/doctor.md)")
	return cmd
}
