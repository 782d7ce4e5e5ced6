package fullcli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/node/nodeagent"
	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/observe/exporter"
	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/policy"
)

// nodeFlags are the node agent's settings, common to its subcommands.
type nodeFlags struct {
	s nodeagent.Settings
}

func (f *nodeFlags) register(cmd *cobra.Command, installing bool) {
	fl := cmd.Flags()
	a := &f.s.Agent
	fl.StringVar(&a.HostRoot, "host-root", "", `the node's root filesystem, where it is mounted (a DaemonSet: "/host"; default: this host)`)
	fl.StringVar(&a.BinDir, "bin-dir", nodeagent.DefaultBinDir, "node directory for gpurun, gpurun-full and gpurun-runtime")
	fl.StringVar(&a.PolicyPath, "policy", policy.DefaultConfigPath, "the node's policy file, which gpurun-runtime reads")
	fl.StringVar(&a.ContainerdConfig, "containerd-config", install.DefaultContainerdConfig, "containerd's config.toml on the node (k3s, RKE2: left at this default, the config.toml they generate)")
	fl.StringVar(&f.s.Distribution, "distribution", string(install.DistAuto), "whose containerd the node runs: "+install.Distributions+"; k3s and rke2 get gpurun's runtime in their containerd template (config.toml.tmpl or config-v3.toml.tmpl under /var/lib/rancher/{k3s,rke2}/agent/etc/containerd) and are restarted through their own service; auto tells them by that directory")
	fl.StringVar(&a.DropInDir, "drop-in", "", "write gpurun's tables to DIR/"+install.DropInName+" on the node and import it from the main config, last (beside NVIDIA's toolkit: docs/nvidia.md); left out on a node detected as k3s or RKE2")
	fl.StringVar(&a.InstallState, "install-state", install.DefaultStatePath, `where "gpurun install" records its change, on the node`)
	fl.StringVar(&a.StatePath, "state", nodeagent.DefaultStatePath, "where the agent records what it installed, on the node")
	fl.StringVar(&f.s.Restart, "restart", string(restart.None), "how containerd is made to read its config: "+restart.Modes+" (see gpurun node --help)")
	if installing {
		fl.StringVar(&a.SourceDir, "from", "", "directory holding the gpurun, gpurun-full and gpurun-runtime to copy (default: this gpurun's directory)")
		fl.StringVar(&a.PolicySource, "policy-source", "", "keep the node's policy file equal to this file (the DaemonSet's ConfigMap)")
		fl.BoolVar(&a.SetAsDefault, "set-as-default", false, "make gpurun containerd's default runtime handler, so every pod gets it without a RuntimeClass")
		fl.StringSliceVar(&a.PodAnnotations, "pod-annotations", install.DefaultPodAnnotations, "pod annotations passed to gpurun-runtime")
	}
}

// agentFor returns the configured agent, logging to stderr.
func (f *nodeFlags) agentFor(g *cli.Globals) (*nodeagent.Agent, error) {
	s := f.s
	s.DryRun, s.Executable, s.Log = g.DryRun, os.Executable, os.Stderr
	return nodeagent.Configure(s)
}

func newNodeCmd(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: cli.NodeShort,
		Long: `The node commands run in gpurun's DaemonSet pod (privileged, hostPID, the
node's / mounted at /host; see deploy/kubernetes) or directly on a node.

"node install" copies gpurun, gpurun-full and gpurun-runtime from the image onto the node
(--bin-dir, atomically; a file it replaces is kept and put back on
uninstall), keeps the node's policy file equal to --policy-source (except a
runtime that "gpurun install" chained), registers gpurun-runtime as
containerd's runtime handler "gpurun" (as "gpurun install containerd"
does), and restarts containerd if it has not read that configuration yet and
--restart allows. Everything is recorded on the node (--state).

"node run" does the same, then stays up and logs the node's state whenever it
changes; with --uninstall-on-exit it uninstalls when the pod stops.
"node uninstall" undoes exactly what the record says; gpurun-runtime stays
while running containers or containerd may still call it, and a later
uninstall finishes. "node status" prints the state and exits 0 only when
gpurun is in effect: the DaemonSet's readiness probe.

--restart (containerd reads its config only at start; running containers keep
running across a restart):
  none     restart nothing; the pod stays not ready until containerd restarts
  systemd  the node's systemd restarts containerd.service: nsenter into PID 1's
           mount namespace and systemctl restart, with the node's own tools
  signal   SIGTERM to the containerd reading the config; its supervisor
           (systemd's Restart=always) starts it again, and gpurun waits for it.
           containerd has no reload signal (SIGHUP would kill it); where
           nothing supervises containerd, the node is left without it.`,
		Example: `  # In the DaemonSet
  gpurun node run --host-root /host --restart=systemd --uninstall-on-exit --policy-source /etc/gpurun-source/config.toml
  gpurun node status --host-root /host
  gpurun node run --host-root /host --distribution=k3s --restart=systemd   # restarts k3s.service (or k3s-agent)

  # On a node, by hand
  sudo gpurun node install --restart=systemd --set-as-default
  sudo gpurun node uninstall --restart=systemd`,
	}
	cmd.AddCommand(newNodeInstallCmd(g), newNodeRunCmd(g), newNodeUninstallCmd(g), newNodeStatusCmd(g))
	return cmd
}

// withAgent is the action of a node subcommand: the agent from the flags,
// fn under a context that SIGTERM and SIGINT cancel, exit 1 on its error.
func (f *nodeFlags) withAgent(g *cli.Globals, fn func(context.Context, *nodeagent.Agent) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		a, err := f.agentFor(g)
		if err != nil {
			return err
		}
		ctx, stop := signalContext(cmd)
		defer stop()
		if err := fn(ctx, a); err != nil {
			return exitcode.New(1, err)
		}
		return nil
	}
}

func newNodeInstallCmd(g *cli.Globals) *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Copy the binaries onto the node, register the runtime handler, restart containerd as --restart says",
		Example: `  gpurun node install --host-root /host --restart=systemd
  gpurun node install --host-root /host --set-as-default --policy-source /etc/gpurun-source/config.toml`,
		Args: cobra.NoArgs,
		RunE: f.withAgent(g, func(ctx context.Context, a *nodeagent.Agent) error { return a.Install(ctx) }),
	}
	f.register(cmd, true)
	return cmd
}

func newNodeRunCmd(g *cli.Globals) *cobra.Command {
	var (
		f        nodeFlags
		obs      observeFlags
		interval time.Duration
		onExit   bool
	)
	cmd := &cobra.Command{
		Use:     "run",
		Short:   "Install, then stay up reporting the node's state (the DaemonSet's container)",
		Example: `  gpurun node run --host-root /host --restart=systemd --uninstall-on-exit`,
		Args:    cobra.NoArgs,
		RunE: f.withAgent(g, func(ctx context.Context, a *nodeagent.Agent) error {
			pol, err := a.NodePolicy()
			if err != nil {
				a.Log.Error("the metrics go by another policy than the node's", "err", err.Error())
			}
			exp, err := obs.options().New(shmstats.Options{HostRoot: a.HostRoot, Policy: pol}, filepath.Join(a.HostRoot, pol.LogFile), a.Log)
			if err != nil {
				return err
			}
			// An install that fails (settings that cannot work on this
			// node, say) ends the agent, and its pod is not ready: said as
			// a Warning Event on the node too, with events on.
			failed := func(err error) {
				warnNode(exp, a.Log, events.ReasonAgentFailed, fmt.Sprintf("gpurun's node agent cannot set gpurun up on this node: %v. Its pod restarts, not ready, until that is fixed (the agent's settings: ConfigMap gpurun-node)", err))
			}
			return exporter.RunBeside(ctx, exp, a.Log, func(ctx context.Context) error {
				return a.Run(ctx, nodeagent.RunOptions{Interval: interval, UninstallOnExit: onExit, Failed: failed})
			})
		}),
	}
	f.register(cmd, true)
	obs.register(cmd)
	cmd.Flags().DurationVar(&interval, "interval", nodeagent.DefaultInterval, "how often to check the node")
	cmd.Flags().BoolVar(&onExit, "uninstall-on-exit", false, "uninstall when stopped (SIGTERM): deleting the DaemonSet takes gpurun off the nodes")
	return cmd
}

func newNodeUninstallCmd(g *cli.Globals) *cobra.Command {
	var f nodeFlags
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Undo what gpurun node install recorded on the node",
		Example: `  gpurun node uninstall --host-root /host --restart=systemd
  sudo gpurun node uninstall --restart=systemd   # on the node`,
		Args: cobra.NoArgs,
		RunE: f.withAgent(g, func(ctx context.Context, a *nodeagent.Agent) error { return a.Uninstall(ctx) }),
	}
	f.register(cmd, false)
	return cmd
}

func newNodeStatusCmd(g *cli.Globals) *cobra.Command {
	var (
		f      nodeFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the node's state; exit 0 only when gpurun is in effect (readiness probe)",
		Example: `  gpurun node status --host-root /host
  kubectl -n gpurun-system exec ds/gpurun-node -- gpurun node status --host-root /host --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := f.agentFor(g)
			if err != nil {
				return err
			}
			return a.WriteStatus(cmd.OutOrStdout(), asJSON)
		},
	}
	f.register(cmd, false)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the state as JSON")
	return cmd
}
