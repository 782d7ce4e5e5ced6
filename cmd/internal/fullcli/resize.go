package fullcli

import (
	"fmt"
	"os"
	"time"

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
Needs root (or CAP_SYS_ADMIN) on the host where the container runs.

With --pod, CONTAINER is a Kubernetes pod, [NAMESPACE/]NAME, whose
/dev/shm is a Memory emptyDir (gpurun webhook's, or the pod's own with a
sizeLimit): from where kubectl works (--kubeconfig, --context, -n), its
sizeLimit is patched through the pod's resize subresource and the kubelet
remounts the tmpfs in place, for every container of the pod (KEP-6030:
Kubernetes 1.37 or later, the feature gate
` + resize.KEP6030Gate + ` on the API server and the
kubelet, a cgroup v2 node; needs patch on pods/resize). gpurun waits up to
--wait for the kubelet to confirm, and says so where the cluster refuses
or does not act. The webhook never undoes the new size: it acts on a
pod's creation only.`

func newResizeCmd(g *cli.Globals) *cobra.Command {
	var o resize.RunOptions
	cmd := &cobra.Command{
		Use:   "resize CONTAINER SIZE | --pod [NAMESPACE/]NAME SIZE",
		Short: cli.ResizeShort,
		Long:  resizeLong,
		Example: `  # A training job hit "Bus error": give it 8 GiB of /dev/shm now
  sudo gpurun resize trainer 8g

  # A CRI container (Kubernetes node), by id as crictl ps shows it
  sudo gpurun resize --cri 3f2a9c1d 16Gi

  # Beyond the policy's max
  sudo gpurun resize --force trainer 300g

  # A webhook-sized pod, through the API server (KEP-6030), no root
  gpurun resize --pod ml/train-worker-0 48Gi`,
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
	f.BoolVar(&o.Pod, "pod", false, "CONTAINER is a Kubernetes pod, [NAMESPACE/]NAME: patch its Memory emptyDir's sizeLimit through the API server (KEP-6030)")
	f.StringVarP(&o.Kube.Namespace, "namespace", "n", "", "with --pod: the namespace (default: the kubeconfig context's)")
	f.StringVar(&o.Kube.Context, "context", "", "with --pod: the kubeconfig context (default: its current-context)")
	f.StringVar(&o.Kube.Kubeconfig, "kubeconfig", "", "with --pod: the kubeconfig file (default $KUBECONFIG, else ~/.kube/config, else the pod's service account)")
	f.DurationVar(&o.Wait, "wait", 30*time.Second, "with --pod: how long to wait for the kubelet to confirm the resize (0: not at all)")
	return cmd
}
