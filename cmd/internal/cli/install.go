package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/policy"
)

// installFlags are common to install and uninstall.
type installFlags struct {
	hostRoot, runtimePath, statePath, policyPath, config string
}

func (f *installFlags) register(cmd *cobra.Command, configDefault, what string) {
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", configDefault, what+" (a path on the node)")
	fl.StringVar(&f.hostRoot, "host-root", "", `the node's root filesystem, when it is mounted elsewhere (a DaemonSet: "/host")`)
	fl.StringVar(&f.runtimePath, "runtime-path", "", "gpurun-runtime as the engine will run it (default: next to this gpurun, else /usr/local/bin/gpurun-runtime)")
	fl.StringVar(&f.statePath, "state", install.DefaultStatePath, "where install records what it changed, for uninstall")
	fl.StringVar(&f.policyPath, "policy", "", fmt.Sprintf("gpurun's policy file, where a chained runtime is set (default $%s, else %s)", policy.ConfigEnv, policy.DefaultConfigPath))
}

func (f *installFlags) options(g *Globals, out io.Writer) install.Options {
	rt := f.runtimePath
	if rt == "" {
		rt = install.DefaultRuntimePath(f.hostRoot, os.Executable)
	}
	pol := f.policyPath
	if pol == "" {
		pol, _ = policy.ResolvePath("", os.Getenv)
	}
	return install.Options{HostRoot: f.hostRoot, RuntimePath: rt, StatePath: f.statePath, PolicyPath: pol, DryRun: g.DryRun, Out: out}
}

// installOrUninstall runs one of the two and maps a failure to exit status 1.
func installOrUninstall(uninstall bool, install, remove func() error) error {
	run := install
	if uninstall {
		run = remove
	}
	if err := run(); err != nil {
		return exitcode.New(1, err)
	}
	return nil
}

func newInstallCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "install docker|containerd",
		Short: "Register gpurun-runtime with an engine on this node",
		Long: `Install registers gpurun-runtime as an OCI runtime named "gpurun" in an engine's
configuration, keeping every other setting, with a backup of the original and
a record of the change for "gpurun uninstall". A second install changes
nothing. --dry-run prints the change as a unified diff.

Under install and uninstall, --config names the engine's configuration file;
gpurun's own policy file is --policy (or $GPURUN_CONFIG).`,
		Example: `  sudo gpurun install docker --dry-run                        # show the daemon.json diff
  sudo gpurun install docker --set-as-default --reload        # every container on a Docker host
  sudo gpurun install containerd --set-as-default --restart   # every pod on a Kubernetes node
  gpurun install docker-cli-plugin                            # docker gpurun run ...
  gpurun install kubectl-plugin                               # kubectl gpurun doctor pod/NAME`,
	}
	cmd.AddCommand(newInstallDockerCmd(g, false), newInstallContainerdCmd(g, false))
	cmd.AddCommand(newInstallCLIPluginCmd(g, false), newInstallKubectlPluginCmd(g, false))
	cmd.AddCommand(newInstallHooksCmd(g, install.EnginePodman, false), newInstallHooksCmd(g, install.EngineCRIO, false))
	return cmd
}

func newUninstallCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "uninstall docker|containerd",
		Short: "Take gpurun-runtime out of an engine's configuration again",
		Long: `Uninstall undoes what "gpurun install" recorded for that configuration file:
it removes the gpurun runtime, restores the previous default runtime (if it
still names gpurun), and un-chains gpurun's policy; nothing else changes.`,
		Example: `  sudo gpurun uninstall docker --dry-run
  sudo gpurun uninstall docker --reload
  sudo gpurun uninstall containerd --restart
  gpurun uninstall docker-cli-plugin`,
	}
	cmd.AddCommand(newInstallDockerCmd(g, true), newInstallContainerdCmd(g, true))
	cmd.AddCommand(newInstallCLIPluginCmd(g, true), newInstallKubectlPluginCmd(g, true))
	cmd.AddCommand(newInstallHooksCmd(g, install.EnginePodman, true), newInstallHooksCmd(g, install.EngineCRIO, true))
	return cmd
}

func newInstallDockerCmd(g *Globals, uninstall bool) *cobra.Command {
	var f installFlags
	var d install.Docker
	cmd := &cobra.Command{
		Use:   "docker",
		Short: "dockerd: runtimes.gpurun in daemon.json",
		Long: `Install registers gpurun-runtime in dockerd's daemon.json as the runtime
"gpurun", with dockerd's data-root in its runtimeArgs
(--gpurun-docker-data-root=DIR): dockerd passes runtimeArgs on every call, so
gpurun-runtime knows where a --ipc shareable group's /dev/shm tmpfs is
(DIR/containers/<id>/mounts/shm) wherever the data-root is. The data-root is
the running dockerd's (asked at $DOCKER_HOST, else the default socket) when
it reads this daemon.json, else daemon.json's "data-root" (else
/var/lib/docker; with "userns-remap", its <uid>.<gid> subdirectory);
--data-root overrides all.
Run install again after moving the data-root.`,
		Example: `  gpurun install docker --dry-run
  gpurun install docker --set-as-default --reload
  gpurun install docker --data-root /mnt/nvme/docker --reload
  gpurun uninstall docker --reload`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d.Options = f.options(g, cmd.OutOrStdout())
			d.ConfigPath = f.config
			if !uninstall {
				d.Daemon = install.RunningDockerRoot(cmd.Context(), os.Getenv)
			}
			return installOrUninstall(uninstall, d.Install, d.Uninstall)
		},
	}
	f.register(cmd, install.DefaultDockerConfig, "dockerd's daemon.json")
	fl := cmd.Flags()
	if !uninstall {
		fl.BoolVar(&d.SetAsDefault, "set-as-default", false, `make gpurun dockerd's default-runtime, so plain "docker run" gets it`)
	}
	fl.BoolVar(&d.Reload, "reload", false, "send SIGHUP to dockerd, which reloads runtimes without a restart")
	fl.StringVar(&d.PIDFile, "pid-file", "", `dockerd's pid file for --reload (default: daemon.json "pidfile", else /var/run/docker.pid)`)
	if !uninstall {
		fl.StringVar(&d.DataRoot, "data-root", "", "dockerd's data-root, told to gpurun-runtime (default: the running dockerd's, else daemon.json's, else /var/lib/docker)")
	}
	return cmd
}

func newInstallContainerdCmd(g *Globals, uninstall bool) *cobra.Command {
	var f installFlags
	var c install.Containerd
	cmd := &cobra.Command{
		Use:   "containerd",
		Short: "containerd (Kubernetes nodes): a CRI runtime handler named gpurun",
		Example: `  gpurun install containerd --dry-run
  gpurun install containerd --set-as-default --restart
  gpurun install containerd --drop-in /etc/containerd/conf.d --restart
  gpurun install containerd --distribution=k3s --restart   # into k3s's config.toml.tmpl; restarts k3s
  gpurun uninstall containerd --restart
  gpurun install containerd --host-root /host --restart=systemd   # from a privileged hostPID pod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c.Options = f.options(g, cmd.OutOrStdout())
			c.ConfigPath = f.config
			c.Distribution = install.ResolveDistribution(c.Distribution, f.hostRoot, f.config)
			if c.Distribution.Templated() && !cmd.Flags().Changed("config") {
				c.ConfigPath = "" // the distribution's generated config.toml
			}
			return installOrUninstall(uninstall, c.Install, c.Uninstall)
		},
	}
	f.register(cmd, install.DefaultContainerdConfig, "containerd's config.toml")
	fl := cmd.Flags()
	fl.StringVar(&c.DropInDir, "drop-in", "", "write gpurun's tables to DIR/"+install.DropInName+" and import it from the main config")
	if !uninstall {
		fl.BoolVar(&c.SetAsDefault, "set-as-default", false, "make gpurun the default runtime handler, so every pod gets it without a RuntimeClass")
		fl.BoolVar(&c.NoAutoDropIn, "no-auto-drop-in", false, "refuse, rather than install into a drop-in directory of gpurun's own, when a file containerd reads later (NVIDIA's drop-in) would hide an install in place")
		fl.StringSliceVar(&c.PodAnnotations, "pod-annotations", install.DefaultPodAnnotations, "pod annotations passed to gpurun-runtime")
	}
	var dist string
	fl.StringVar(&dist, "distribution", string(install.DistAuto), "whose containerd: "+install.Distributions+`; k3s and rke2 write gpurun's runtime into their containerd template (config.toml.tmpl or config-v3.toml.tmpl under /var/lib/rancher/{k3s,rke2}/agent/etc/containerd), never into the config.toml they generate; auto tells them by that directory`)
	var restartMode string
	fl.StringVar(&restartMode, "restart", string(restart.None), "make containerd read the config: "+restart.Modes+`; --restart alone is systemd (with --host-root: the node's systemd through PID 1); running containers keep running`)
	fl.Lookup("restart").NoOptDefVal = string(restart.Systemd)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		mode, err := restart.ParseMode(restartMode)
		if err != nil {
			return exitcode.New(2, fmt.Errorf("--restart: %w", err))
		}
		c.Restart = mode
		if c.Distribution, err = install.ParseDistribution(dist); err != nil {
			return exitcode.New(2, fmt.Errorf("--distribution: %w", err))
		}
		return nil
	}
	return cmd
}
