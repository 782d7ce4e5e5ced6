package nri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/observe/exporter"
	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/policy"
)

// ServeOptions are gpurun nri's.
type ServeOptions struct {
	// Socket, Name and Index are the connection's (Options).
	Socket, Name, Index string
	// DryRun is gpurun's --dry-run, which the plugin refuses; Verbose logs
	// at debug level.
	DryRun, Verbose bool
	// LoadPolicy loads gpurun's policy.
	LoadPolicy func() (*policy.Policy, error)
	// Metrics are the metrics and events to run beside the plugin.
	Metrics exporter.NodeOptions
	// Getenv reads the environment (os.Getenv); Stderr gets the log of a
	// plugin the runtime did not launch.
	Getenv func(string) string
	Stderr io.Writer
}

// Serve is gpurun nri: it runs the plugin (New, Run), with the metrics
// beside it, until SIGTERM or SIGINT, logging to Stderr or, launched by
// the runtime, to the policy's log_file. Its errors carry the exit status
// (exitcode): 2 for bad options or a policy that cannot be read.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.DryRun {
		return exitcode.New(2, errors.New("nri: --dry-run does not apply to the plugin; use gpurun plan to see decisions"))
	}
	if err := CheckIdentity(o.Name, o.Index); err != nil {
		return exitcode.New(2, fmt.Errorf("nri: %w", err))
	}
	launched := Launched(o.Getenv)
	level := slog.LevelInfo
	if o.Verbose {
		level = slog.LevelDebug
	}
	pol, polErr := o.LoadPolicy()
	logFile := policy.Default().LogFile
	if polErr == nil {
		logFile = pol.LogFile
	}
	sink := NewLog(launched, logFile, o.Stderr)
	defer sink.Close()
	log := sink.Logger(level)
	if polErr != nil {
		log.Error("cannot start the NRI plugin", "err", polErr.Error())
		return exitcode.New(2, polErr)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	source := pol.Source
	if source == "" {
		source = "(defaults)"
	}
	log.Info("gpurun NRI plugin starting", "version", version.String(), "socket", o.Socket,
		"plugin", o.Index+"-"+o.Name, "launched_by_runtime", launched, "policy", source)
	exp, err := o.Metrics.New(shmstats.Options{Policy: pol}, "", log)
	if err != nil {
		log.Error("cannot start the NRI plugin", "err", err.Error())
		return err
	}
	cfg := Config{Policy: pol, Logger: log, OnConfigure: func(pol *policy.Policy) { sink.Settle(pol.LogFile) }}
	if exp != nil {
		cfg.Observe = exp.ObserveFor(Component)
	}
	p := New(cfg)
	err = exporter.RunBeside(ctx, exp, log, func(ctx context.Context) error {
		return Run(ctx, p, Options{Socket: o.Socket, Name: o.Name, Index: o.Index, Logger: log, Getenv: o.Getenv})
	})
	if err != nil {
		log.Error("NRI plugin stopped", "err", err.Error())
		return fmt.Errorf("nri: %w", err)
	}
	log.Info("gpurun NRI plugin stopped")
	return nil
}
