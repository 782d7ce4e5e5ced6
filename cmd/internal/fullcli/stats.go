package fullcli

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/observe/exporter"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// statsFlags are `gpurun stats`'s flags that are not options as they are.
type statsFlags struct {
	containerd, podman []string
	noOrphans          bool
	listen             string
}

const statsLong = `Stats lists every running container of dockerd, containerd (every namespace,
Kubernetes' k8s.io included) and Podman on this host with its /dev/shm, read
from the host side (statfs of /proc/<pid>/root/dev/shm; nothing is run in a
container): its size, the bytes in use, the highest use gpurun has seen
(kept in --peaks-file across runs), the percentage, the bytes held by files
no live process has open or mapped (left by a crashed rank), the other
containers on the same tmpfs (an IPC group, a pod), whether it is a GPU
container, and what gpurun decides for it. Under the table: for a container
near its ceiling or far below it, the size that fits its measured peak and
the setting that gives it.

It needs root. Exit status: 0; 1 when an engine could not be read (the
containers of the others are still shown, and the error names the engine);
2 on bad flags or without root.`

func newStatsCmd(g *cli.Globals) *cobra.Command {
	var (
		o shmstats.RunOptions
		f statsFlags
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: cli.StatsShort,
		Long:  statsLong,
		Example: `  sudo gpurun stats
  sudo gpurun stats --json
  sudo gpurun stats --watch --interval 5s --namespace ml-team
  sudo gpurun stats --pod trainer-0 --container worker`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Orphans = !f.noOrphans
			if cmd.Flags().Changed("containerd-state") {
				o.Containerd = f.containerd
			}
			if cmd.Flags().Changed("podman-root") {
				o.Podman = f.podman
			}
			if f.listen != "" {
				o.Serve = func(ctx context.Context, so shmstats.Options) error {
					return exporter.ServeStats(ctx, f.listen, o.Interval, so, cmd.ErrOrStderr())
				}
			}
			o.LoadPolicy, o.Geteuid, o.Out, o.Err = g.Policy, os.Geteuid, cmd.OutOrStdout(), cmd.ErrOrStderr()
			return shmstats.Run(cmd.Context(), o)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&o.JSON, "json", false, "print a JSON array of containers (docs/observe.md lists the fields); with --watch one array a line")
	fl.BoolVar(&o.Watch, "watch", false, "print again every --interval until interrupted")
	fl.DurationVar(&o.Interval, "interval", 2*time.Second, "how often --watch samples")
	fl.StringVar(&o.Filter.Namespace, "namespace", "", "only the containers of this Kubernetes namespace (or containerd namespace)")
	fl.StringVar(&o.Filter.Pod, "pod", "", "only the containers of the pod of this name")
	fl.StringVar(&o.Filter.Container, "container", "", "only the container of this name, id or id prefix")
	fl.StringVar(&o.Docker, "docker-host", "", `dockerd's endpoint (default $DOCKER_HOST, else the default socket, skipped when nothing answers there); "none" skips dockerd`)
	fl.StringArrayVar(&f.containerd, "containerd-state", nil, "a containerd state dir (repeatable; default /run/containerd, /run/k3s/containerd, /var/run/docker/containerd/daemon)")
	fl.StringArrayVar(&f.podman, "podman-root", nil, "a Podman storage root, graph root or run root (repeatable; default /var/lib/containers/storage and /run/containers/storage)")
	fl.StringVar(&o.HostRoot, "host-root", "", "where the node's root is mounted when run in a pod (with hostPID)")
	fl.StringVar(&o.PeaksFile, "peaks-file", shmstats.DefaultPeaksPath, `where the peaks seen are kept across runs ("" keeps none)`)
	fl.BoolVar(&f.noOrphans, "no-orphans", false, "skip the orphaned-bytes walk of every tmpfs and /proc")
	fl.StringVar(&f.listen, "listen", "", `serve the metrics the node agent serves (Prometheus, ADDR/metrics and /healthz) instead of printing, sampling every --interval (e.g. `+exporter.DefaultAddress+`)`)
	return cmd
}
