package fullcli

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/node/nri"
	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/observe/exporter"
	"github.com/gpurun/gpurun/observe/metrics"
	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/policy"
)

// observeFlags are the metrics and events flags of the long-running
// node-side commands (node run, nri).
type observeFlags struct {
	address    string
	events     bool
	interval   time.Duration
	containerd []string
	cri        []string
}

func (f *observeFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.address, "metrics-address", "", `serve Prometheus metrics of every container's /dev/shm at ADDR/metrics ("" none; the DaemonSets use `+exporter.DefaultAddress+`)`)
	fl.BoolVar(&f.events, "events", false, "post Kubernetes Events on the pods whose /dev/shm gpurun sized or could not (ShmSized, ShmNotSized), swept at a restart (ShmSwept), or whose memory /dev/shm fills (ShmNearMemoryLimit, ShmOOMKilled) (needs the pod's service account and NODE_NAME)")
	fl.DurationVar(&f.interval, "metrics-interval", metrics.DefaultInterval, "how often the metrics sample every container's /dev/shm")
	fl.StringArrayVar(&f.containerd, "containerd-state", nil, "a containerd state dir the metrics read, on the node (repeatable; default "+strings.Join(shmstats.DefaultContainerdStates, ", ")+")")
	fl.StringArrayVar(&f.cri, "cri-endpoint", nil, "a CRI socket to ask how a container that left the samples ended (an OOM kill), as this process reaches it (repeatable; default: containerd.sock in each --containerd-state, containerd's default place)")
}

// options are the exporter's settings the flags give, on the node
// NODE_NAME names.
func (f *observeFlags) options() exporter.NodeOptions {
	return exporter.NodeOptions{Address: f.address, Events: f.events, Node: os.Getenv("NODE_NAME"), Interval: f.interval, Containerd: f.containerd, CRIEndpoints: f.cri}
}

// nriBeside runs the metrics and events the flags ask for beside the NRI
// plugin, fed with its outcomes; it reads the node's cgroups at
// cgroupRoot (nri's --cgroup-root).
func (f *observeFlags) nriBeside(cgroupRoot string) func(*policy.Policy, *slog.Logger) (nri.Beside, error) {
	return func(pol *policy.Policy, log *slog.Logger) (nri.Beside, error) {
		exp, err := f.options().New(shmstats.Options{Policy: pol, Cgroup: cgroupRoot}, "", log)
		if err != nil {
			return nri.Beside{}, err
		}
		b := nri.Beside{Run: func(ctx context.Context, fn func(context.Context) error) error {
			return exporter.RunBeside(ctx, exp, log, fn)
		}}
		// Not registered for a while: said in the log and, with events on,
		// as a Warning Event on the node.
		b.Unavailable = func(msg string) {
			log.Warn(msg)
			warnNode(exp, log, events.ReasonNRIUnavailable, msg)
		}
		if exp != nil {
			b.Observe = exp.ObserveFor(nri.Component)
			// /readyz (the DaemonSet's readiness probe): registered with
			// the runtime.
			exp.SetReady(false, "not registered with the runtime yet")
			b.Registered = exp.SetReady
		}
		return b, nil
	}
}

// warnNode posts a Warning Event on the node through exp (when events are
// on), logging what cannot be posted.
func warnNode(exp *exporter.Exporter, log *slog.Logger, reason, msg string) {
	if exp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := exp.WarnNode(ctx, reason, msg); err != nil {
		log.Warn("cannot post a Kubernetes event", "err", err.Error())
	}
}
