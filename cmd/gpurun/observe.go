//go:build !gpurun_lean

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/observe/exporter"
	"github.com/gpurun/gpurun/observe/metrics"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// observeFlags are the metrics and events flags of the long-running
// node-side commands (node run, nri).
type observeFlags struct {
	address    string
	events     bool
	interval   time.Duration
	containerd []string
}

func (f *observeFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.address, "metrics-address", "", `serve Prometheus metrics of every container's /dev/shm at ADDR/metrics ("" none; the DaemonSets use `+exporter.DefaultAddress+`)`)
	fl.BoolVar(&f.events, "events", false, "post Kubernetes Events (ShmSized, ShmNotSized) on the pods whose /dev/shm gpurun sized or could not (needs the pod's service account and NODE_NAME)")
	fl.DurationVar(&f.interval, "metrics-interval", metrics.DefaultInterval, "how often the metrics sample every container's /dev/shm")
	fl.StringArrayVar(&f.containerd, "containerd-state", nil, "a containerd state dir the metrics read, on the node (repeatable; default "+strings.Join(shmstats.DefaultContainerdStates, ", ")+")")
}

// enabled says whether anything is to run.
func (f *observeFlags) enabled() bool { return f.address != "" || f.events }

// exporter returns the Exporter the flags ask for (nil when none), set up
// with where to look and the records log to follow ("" for none).
func (f *observeFlags) exporter(stats shmstats.Options, recordsLog string, log *slog.Logger) (*exporter.Exporter, error) {
	if !f.enabled() {
		return nil, nil
	}
	if f.interval <= 0 {
		return nil, &exitError{2, fmt.Errorf("--metrics-interval %s: want a positive duration", f.interval)}
	}
	if f.containerd != nil {
		stats.Containerd = f.containerd
	}
	exp, err := exporter.New(exporter.Options{
		Address: f.address, Stats: stats, Interval: f.interval, RecordsLog: recordsLog,
		Events: f.events, Node: os.Getenv("NODE_NAME"), Log: log,
	})
	if err != nil {
		return nil, &exitError{2, err}
	}
	return exp, nil
}

// runBeside runs exp (if any) while fn runs, and stops it when fn returns.
func runBeside(ctx context.Context, exp *exporter.Exporter, log *slog.Logger, fn func(context.Context) error) error {
	if exp == nil {
		return fn(ctx)
	}
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := exp.Run(ectx); err != nil {
			log.Error("metrics stopped", "err", err.Error())
		}
	}()
	err := fn(ctx)
	cancel()
	<-done
	return err
}
