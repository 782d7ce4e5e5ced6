package fullcli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/diagnose/resize"
	"github.com/gpurun/gpurun/engine/criclient"
)

const resizeLong = `Resize changes the size of a running container's /dev/shm in place. The
processes inside see the new size at once; nothing restarts.

  - Docker --ipc shareable (and every container joined to it with
    --ipc container:X), and a Kubernetes pod's sandbox shm: the tmpfs the
    engine mounted on the host is remounted there, so every container that
    shares it sees the new size and they keep sharing it.
  - Docker private IPC (the default), or a --tmpfs /dev/shm: the tmpfs is
    remounted inside the container's mount namespace.

Safety: the host's /dev/shm is never touched (--ipc host is refused), only a
tmpfs the engine made under its own directories is remounted, the size never
goes below what /dev/shm holds, and not above the policy's max without
--force. Nothing else changes: Docker's own record (HostConfig.ShmSize) keeps
the old size, so a restart returns to it unless the container is recreated
with --shm-size (or started with gpurun run).

SIZE takes Docker units (2g, 512m) or Kubernetes quantities (2Gi, 512Mi).
Needs root (or CAP_SYS_ADMIN) on the host where the container runs.`

func newResizeCmd(g *cli.Globals) *cobra.Command {
	var o resize.RunOptions
	cmd := &cobra.Command{
		Use:   "resize CONTAINER SIZE",
		Short: cli.ResizeShort,
		Long:  resizeLong,
		Example: `  # A training job hit "Bus error": give it 8 GiB of /dev/shm now
  sudo gpurun resize trainer 8g

  # A CRI container (Kubernetes node), by id as crictl ps shows it
  sudo gpurun resize --cri 3f2a9c1d 16Gi

  # Beyond the policy's max
  sudo gpurun resize --force trainer 300g`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Container, o.Size = args[0], args[1]
			o.DryRun, o.LoadPolicy, o.Getenv, o.Out = g.DryRun, g.Policy, os.Getenv, cmd.OutOrStdout()
			return resize.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.CRI, "cri", false, "CONTAINER is a CRI container id (Kubernetes), not a Docker container")
	f.StringVar(&o.Endpoint, "runtime-endpoint", "", fmt.Sprintf("CRI endpoint with --cri (default $%s, else %s)", criclient.EndpointEnv, criclient.DefaultEndpoint))
	f.BoolVar(&o.Force, "force", false, "allow a size above the policy's max")
	return cmd
}
