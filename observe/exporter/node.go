package exporter

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// NodeOptions are the metrics and events settings of a long-running
// node-side command (gpurun node run, gpurun nri): nothing runs unless an
// address or events are asked for.
type NodeOptions struct {
	// Address serves Prometheus metrics at ADDR/metrics ("" none).
	Address string
	// Events posts Kubernetes Events as node Node.
	Events bool
	Node   string
	// Interval is how often the metrics sample every container.
	Interval time.Duration
	// Containerd are the containerd state dirs the metrics read (nil for
	// the defaults).
	Containerd []string
	// CRIEndpoints are the CRI sockets asked how a container ended (nil:
	// <state>/containerd.sock of each state dir, containerd's default).
	CRIEndpoints []string
}

// Enabled says whether anything is to run.
func (o NodeOptions) Enabled() bool { return o.Address != "" || o.Events }

// New returns the Exporter o asks for, nil when none, set up with where to
// look (stats) and the records log to follow ("" for none). Its errors
// carry exit status 2 (exitcode).
func (o NodeOptions) New(stats shmstats.Options, recordsLog string, log *slog.Logger) (*Exporter, error) {
	if !o.Enabled() {
		return nil, nil
	}
	if o.Interval <= 0 {
		return nil, exitcode.New(2, fmt.Errorf("--metrics-interval %s: want a positive duration", o.Interval))
	}
	if o.Containerd != nil {
		stats.Containerd = o.Containerd
	}
	exp, err := New(Options{
		Address: o.Address, Stats: stats, Interval: o.Interval, RecordsLog: recordsLog,
		Events: o.Events, Node: o.Node, Log: log, CRIEndpoints: o.CRIEndpoints,
	})
	if err != nil {
		return nil, exitcode.New(2, err)
	}
	return exp, nil
}

// RunBeside runs exp (when not nil) while fn runs, and stops it when fn
// returns; fn's error is the result.
func RunBeside(ctx context.Context, exp *Exporter, log *slog.Logger, fn func(context.Context) error) error {
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

// ServeStats is gpurun stats --listen: it serves the metrics of stats's
// containers at address, sampling every interval, and counts the remounts
// in the policy's log_file, until SIGTERM or SIGINT. It logs to logOut.
// Its errors carry their exit status (exitcode): 2 for an address it
// cannot serve, 1 for a failure while serving.
func ServeStats(ctx context.Context, address string, interval time.Duration, stats shmstats.Options, logOut io.Writer) error {
	log := slog.New(slog.NewTextHandler(logOut, nil))
	logFile := ""
	if stats.Policy != nil {
		logFile = stats.Policy.LogFile
	}
	exp, err := New(Options{Address: address, Stats: stats, Interval: interval, RecordsLog: logFile, Log: log})
	if err != nil {
		return exitcode.New(2, fmt.Errorf("stats: --listen: %w", err))
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := exp.Run(ctx); err != nil {
		return exitcode.New(1, fmt.Errorf("stats: %w", err))
	}
	return nil
}
