//go:build !gpurun_lean

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/observe/shmstats"
)

// statsFlags are `gpurun stats`'s flags.
type statsFlags struct {
	asJSON     bool
	watch      bool
	interval   time.Duration
	filter     shmstats.Filter
	dockerHost string
	containerd []string
	podman     []string
	hostRoot   string
	peaksFile  string
	noOrphans  bool
}

func newStatsCmd(g *globals) *cobra.Command {
	var f statsFlags
	cmd := &cobra.Command{
		Use:   "stats",
		Short: statsShort,
		Long: `Stats lists every running container of dockerd, containerd (every namespace,
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
2 on bad flags or without root.`,
		Example: `  sudo gpurun stats
  sudo gpurun stats --json
  sudo gpurun stats --watch --interval 5s --namespace ml-team
  sudo gpurun stats --pod trainer-0 --container worker`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.interval <= 0 {
				return &exitError{2, fmt.Errorf("stats: --interval %s: want a positive duration", f.interval)}
			}
			if os.Geteuid() != 0 {
				return &exitError{2, errors.New("stats: reads every container's /dev/shm through /proc/<pid>/root and the engines' state dirs: run it as root (sudo gpurun stats)")}
			}
			o := shmstats.Options{HostRoot: f.hostRoot, Docker: f.dockerHost, Orphans: !f.noOrphans}
			if f.watch {
				o.Specs = shmstats.NewSpecs() // each container's config.json parsed once
			}
			if cmd.Flags().Changed("containerd-state") {
				o.Containerd = f.containerd
			}
			if cmd.Flags().Changed("podman-root") {
				o.Podman = f.podman
			}
			pol, err := g.loadPolicy()
			if err != nil {
				return &exitError{2, err}
			}
			o.Policy = pol
			o.Peaks = shmstats.NewPeaks()
			if f.peaksFile != "" {
				var perr error
				if o.Peaks, perr = shmstats.OpenPeaks(f.peaksFile); perr != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "gpurun: stats: %v\n", perr)
				}
			}
			if statsServing(cmd) {
				return serveStats(cmd, o)
			}
			return runStats(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o, f)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.asJSON, "json", false, "print a JSON array of containers (docs/observe.md lists the fields); with --watch one array a line")
	fl.BoolVar(&f.watch, "watch", false, "print again every --interval until interrupted")
	fl.DurationVar(&f.interval, "interval", 2*time.Second, "how often --watch samples")
	fl.StringVar(&f.filter.Namespace, "namespace", "", "only the containers of this Kubernetes namespace (or containerd namespace)")
	fl.StringVar(&f.filter.Pod, "pod", "", "only the containers of the pod of this name")
	fl.StringVar(&f.filter.Container, "container", "", "only the container of this name, id or id prefix")
	fl.StringVar(&f.dockerHost, "docker-host", "", `dockerd's endpoint (default $DOCKER_HOST, else the default socket, skipped when nothing answers there); "none" skips dockerd`)
	fl.StringArrayVar(&f.containerd, "containerd-state", nil, "a containerd state dir (repeatable; default /run/containerd, /run/k3s/containerd, /var/run/docker/containerd/daemon)")
	fl.StringArrayVar(&f.podman, "podman-root", nil, "a Podman storage root, graph root or run root (repeatable; default /var/lib/containers/storage and /run/containers/storage)")
	fl.StringVar(&f.hostRoot, "host-root", "", "where the node's root is mounted when run in a pod (with hostPID)")
	fl.StringVar(&f.peaksFile, "peaks-file", shmstats.DefaultPeaksPath, `where the peaks seen are kept across runs ("" keeps none)`)
	fl.BoolVar(&f.noOrphans, "no-orphans", false, "skip the orphaned-bytes walk of every tmpfs and /proc")
	registerStatsServe(cmd)
	return cmd
}

// runStats samples once, or every interval with --watch, and prints.
func runStats(ctx context.Context, out, errOut io.Writer, o shmstats.Options, f statsFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	for {
		cs, err := shmstats.Collect(ctx, o)
		if serr := o.Peaks.Save(); serr != nil {
			fmt.Fprintf(errOut, "gpurun: stats: %v\n", serr)
		}
		cs = f.filter.Select(cs)
		if f.watch && !f.asJSON {
			fmt.Fprint(out, "\033[H\033[2J")
		}
		if perr := printStats(out, cs, f.asJSON); perr != nil {
			return perr
		}
		if !f.watch {
			if err != nil {
				return &exitError{1, fmt.Errorf("stats: %w", err)}
			}
			return nil
		}
		if err != nil {
			fmt.Fprintf(errOut, "gpurun: stats: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.interval):
		}
	}
}

func printStats(out io.Writer, cs []shmstats.Container, asJSON bool) error {
	if !asJSON {
		return shmstats.WriteTable(out, cs)
	}
	if cs == nil {
		cs = []shmstats.Container{}
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	return enc.Encode(cs)
}
