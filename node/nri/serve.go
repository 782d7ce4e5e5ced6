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

	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/node/enforce"
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
	// Beside, when set, starts what runs beside the plugin under its
	// policy and log (the metrics and events of observe/exporter, which
	// the command wires in).
	Beside func(pol *policy.Policy, log *slog.Logger) (Beside, error)
	// Getenv reads the environment (os.Getenv); Stderr gets the log of a
	// plugin the runtime did not launch.
	Getenv func(string) string
	Stderr io.Writer
	// Sweep says where the restart sweep keeps its records and finds the
	// node's processes and cgroups (Config.Sweep).
	Sweep shmsweep.Options
}

// Beside is what runs beside the plugin.
type Beside struct {
	// Observe gets every container's outcome (Config.Observe); nil: none.
	Observe func(enforce.Subject, enforce.Result)
	// Run runs the plugin (fn) beside it until ctx ends; nil: the plugin
	// alone.
	Run func(ctx context.Context, fn func(context.Context) error) error
	// Registered and Unavailable are Options'.
	Registered  func(ok bool, why string)
	Unavailable func(msg string)
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
	var beside Beside
	if o.Beside != nil {
		var err error
		if beside, err = o.Beside(pol, log); err != nil {
			log.Error("cannot start the NRI plugin", "err", err.Error())
			return err
		}
	}
	p := New(Config{Policy: pol, Logger: log, Observe: beside.Observe, OnConfigure: func(pol *policy.Policy) { sink.Settle(pol.LogFile) }, Sweep: o.Sweep})
	run := func(ctx context.Context) error {
		return Run(ctx, p, Options{Socket: o.Socket, Name: o.Name, Index: o.Index, Logger: log, Getenv: o.Getenv,
			Registered: beside.Registered, Unavailable: beside.Unavailable})
	}
	var err error
	if beside.Run != nil {
		err = beside.Run(ctx, run)
	} else {
		err = run(ctx)
	}
	if err != nil {
		log.Error("NRI plugin stopped", "err", err.Error())
		return fmt.Errorf("nri: %w", err)
	}
	log.Info("gpurun NRI plugin stopped")
	return nil
}
