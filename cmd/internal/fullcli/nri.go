package fullcli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/node/nri"
)

const nriLong = `nri runs gpurun as an NRI (Node Resource Interface) plugin of containerd 2.x
(1.7 with NRI enabled) or CRI-O. On every container creation it plans the
container's /dev/shm with the same planner as gpurun-runtime and gpurun plan:

  - the container binds its pod's /dev/shm (the sandbox tmpfs the runtime
    mounted on the host): that tmpfs is grown on the host, so every
    container of the pod sees the new size and they keep sharing it;
  - the container has its own tmpfs at /dev/shm: the runtime is told to
    mount it with the planned size;
  - anything else is logged and left alone.

Errors are logged and the container starts unchanged, unless the policy
sets fail_closed. The policy is --config (else $GPURUN_CONFIG, else
/etc/gpurun/config.toml); a runtime that launches the plugin and passes it
a configuration (containerd's plugin_config_path) replaces it with that.

Long-running (systemd unit, DaemonSet): connects to --socket, registers as
<index>-<name>, and reconnects whenever the runtime restarts. Pre-installed:
copy gpurun-full (the build that holds this command) to the runtime's
plugin directory as <index>-<name> (for example /opt/nri/plugins/10-gpurun);
the runtime then launches it with a connected socket, and it runs this
command when started without arguments that way. Needs root (CAP_SYS_ADMIN) to remount the pods' tmpfs.`

func newNRICmd(g *cli.Globals) *cobra.Command {
	var (
		o          nri.ServeOptions
		obs        observeFlags
		cgroupRoot string
		sweepState string
	)
	cmd := &cobra.Command{
		Use:   "nri [--socket PATH] [--name NAME] [--index IDX]",
		Short: cli.NRIShort,
		Long:  nriLong,
		Example: `  # containerd 2.x or CRI-O with NRI enabled
  sudo gpurun nri
  sudo gpurun --config /etc/gpurun/config.toml nri --socket /var/run/nri/nri.sock --index 10 --name gpurun`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.DryRun, o.Verbose, o.LoadPolicy = g.DryRun, g.Verbose, g.Policy
			o.Beside, o.Getenv, o.Stderr = obs.nriBeside(cgroupRoot), os.Getenv, cmd.ErrOrStderr()
			o.Sweep = shmsweep.Options{CgroupRoot: cgroupRoot, StateDir: sweepState}
			return nri.Serve(cmd.Context(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Socket, "socket", nri.DefaultSocket, "the runtime's NRI socket")
	fl.StringVar(&o.Name, "name", nri.DefaultName, "the plugin's name in the runtime")
	fl.StringVar(&o.Index, "index", nri.DefaultIndex, "the plugin's index (two digits): plugins run in index order")
	fl.StringVar(&cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "the node's cgroup tree as the plugin sees it (the DaemonSet mounts the node's /sys/fs/cgroup at /host/sys/fs/cgroup): the restart sweep tells a live sibling container's files by it, the metrics read each container's memory")
	fl.StringVar(&sweepState, "sweep-state", shmsweep.DefaultStateDir, "where the restart sweep keeps its records of each pod's containers (a node directory, so that a restarted plugin still knows an earlier instance's start)")
	obs.register(cmd)
	return cmd
}
