//go:build !gpurun_lean

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/runtime/nri"
)

// nriFlags are `gpurun nri`'s own options.
type nriFlags struct {
	socket, name, index string
	obs                 observeFlags
}

func newNRICmd(g *globals) *cobra.Command {
	f := nriFlags{}
	cmd := &cobra.Command{
		Use:   "nri [--socket PATH] [--name NAME] [--index IDX]",
		Short: nriShort,
		Long: `nri runs gpurun as an NRI (Node Resource Interface) plugin of containerd 2.x
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
command when started without arguments that way. Needs root (CAP_SYS_ADMIN) to remount the pods' tmpfs.`,
		Example: `  # containerd 2.x or CRI-O with NRI enabled
  sudo gpurun nri
  sudo gpurun --config /etc/gpurun/config.toml nri --socket /var/run/nri/nri.sock --index 10 --name gpurun`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runNRI(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.socket, "socket", nri.DefaultSocket, "the runtime's NRI socket")
	fl.StringVar(&f.name, "name", nri.DefaultName, "the plugin's name in the runtime")
	fl.StringVar(&f.index, "index", nri.DefaultIndex, "the plugin's index (two digits): plugins run in index order")
	f.obs.register(cmd)
	return cmd
}

// launchedNRI returns the command line to run: args, with "nri" added when
// there is no command (rest is args without gpurun's own options) and a
// runtime launched this binary as a pre-installed NRI plugin, which it
// does without arguments.
func launchedNRI(args, rest []string, getenv func(string) string) []string {
	if len(rest) == 0 && nri.Launched(getenv) {
		return append(args[:len(args):len(args)], "nri")
	}
	return args
}

func runNRI(cmd *cobra.Command, g *globals, f nriFlags) error {
	if g.dryRun {
		return &exitError{2, fmt.Errorf("nri: --dry-run does not apply to the plugin; use gpurun plan to see decisions")}
	}
	if err := nri.CheckIdentity(f.name, f.index); err != nil {
		return &exitError{2, fmt.Errorf("nri: %w", err)}
	}
	launched := nri.Launched(os.Getenv)
	level := slog.LevelInfo
	if g.verbose {
		level = slog.LevelDebug
	}
	pol, polErr := g.loadPolicy()
	logFile := policy.Default().LogFile
	if polErr == nil {
		logFile = pol.LogFile
	}
	sink := nri.NewLog(launched, logFile, cmd.ErrOrStderr())
	defer sink.Close()
	log := sink.Logger(level)
	if polErr != nil {
		log.Error("cannot start the NRI plugin", "err", polErr.Error())
		return &exitError{2, polErr}
	}

	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	source := pol.Source
	if source == "" {
		source = "(defaults)"
	}
	log.Info("gpurun NRI plugin starting", "version", version.String(), "socket", f.socket,
		"plugin", f.index+"-"+f.name, "launched_by_runtime", launched, "policy", source)
	exp, err := f.obs.exporter(shmstats.Options{Policy: pol}, "", log)
	if err != nil {
		log.Error("cannot start the NRI plugin", "err", err.Error())
		return err
	}
	cfg := nri.Config{Policy: pol, Logger: log, OnConfigure: func(pol *policy.Policy) { sink.Settle(pol.LogFile) }}
	if exp != nil {
		cfg.Observe = exp.ObserveFor(nri.Component)
	}
	p := nri.New(cfg)
	err = runBeside(ctx, exp, log, func(ctx context.Context) error {
		return nri.Run(ctx, p, nri.Options{Socket: f.socket, Name: f.name, Index: f.index, Logger: log})
	})
	if err != nil {
		log.Error("NRI plugin stopped", "err", err.Error())
		return fmt.Errorf("nri: %w", err)
	}
	log.Info("gpurun NRI plugin stopped")
	return nil
}
