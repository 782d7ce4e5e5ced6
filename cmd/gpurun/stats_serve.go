//go:build !gpurun_lean

package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/observe/exporter"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// registerStatsServe adds `gpurun stats --listen`.
func registerStatsServe(cmd *cobra.Command) {
	cmd.Flags().String("listen", "", `serve the metrics the node agent serves (Prometheus, ADDR/metrics and /healthz) instead of printing, sampling every --interval (e.g. `+exporter.DefaultAddress+`)`)
}

// statsServing reports whether --listen was given; serveStats then runs
// instead of printing.
func statsServing(cmd *cobra.Command) bool {
	addr, _ := cmd.Flags().GetString("listen")
	return addr != ""
}

// serveStats serves the metrics of o's containers at --listen until
// interrupted, and counts the remounts in the policy's log_file.
func serveStats(cmd *cobra.Command, o shmstats.Options) error {
	addr, _ := cmd.Flags().GetString("listen")
	interval, _ := cmd.Flags().GetDuration("interval")
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	logFile := ""
	if o.Policy != nil {
		logFile = o.Policy.LogFile
	}
	exp, err := exporter.New(exporter.Options{Address: addr, Stats: o, Interval: interval, RecordsLog: logFile, Log: log})
	if err != nil {
		return &exitError{2, fmt.Errorf("stats: --listen: %w", err)}
	}
	ctx, stop := signalContext(cmd)
	defer stop()
	if err := exp.Run(ctx); err != nil {
		return &exitError{1, fmt.Errorf("stats: %w", err)}
	}
	return nil
}
