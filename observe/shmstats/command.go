package shmstats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

// RunOptions are gpurun stats's.
type RunOptions struct {
	// Options say where to look (HostRoot, Docker, Containerd, Podman,
	// Orphans); Run sets Policy, Peaks and, with Watch, Specs.
	Options
	// Filter picks the containers printed.
	Filter Filter
	// JSON prints a JSON array of containers (with Watch, one a line).
	JSON bool
	// Watch prints again every Interval until ctx ends.
	Watch    bool
	Interval time.Duration
	// PeaksFile keeps the peaks seen across runs ("" keeps none).
	PeaksFile string
	// LoadPolicy loads gpurun's policy.
	LoadPolicy func() (*policy.Policy, error)
	// Geteuid is the process's effective user id (os.Geteuid): stats needs
	// root.
	Geteuid func() int
	// Serve, when set, serves the containers' metrics (gpurun stats
	// --listen) instead of printing.
	Serve func(ctx context.Context, o Options) error
	// Out gets the table or the JSON; Err what could not be read.
	Out, Err io.Writer
}

// Run is gpurun stats: it samples every running container's /dev/shm
// once, or every Interval with Watch, and prints them (or runs Serve). Its
// error carries the exit status (exitcode): 1 when an engine could not be
// read (the others' containers are still printed), 2 for bad options or
// without root.
func Run(ctx context.Context, o RunOptions) error {
	if o.Interval <= 0 {
		return exitcode.New(2, fmt.Errorf("stats: --interval %s: want a positive duration", o.Interval))
	}
	if o.Geteuid() != 0 {
		return exitcode.New(2, errors.New("stats: reads every container's /dev/shm through /proc/<pid>/root and the engines' state dirs: run it as root (sudo gpurun stats)"))
	}
	if o.Watch {
		o.Specs = NewSpecs() // each container's config.json parsed once
	}
	pol, err := o.LoadPolicy()
	if err != nil {
		return exitcode.New(2, err)
	}
	o.Policy = pol
	o.Peaks = NewPeaks()
	if o.PeaksFile != "" {
		var perr error
		if o.Peaks, perr = OpenPeaks(o.PeaksFile); perr != nil {
			fmt.Fprintf(o.Err, "gpurun: stats: %v\n", perr)
		}
	}
	if o.Serve != nil {
		return o.Serve(ctx, o.Options)
	}
	return o.print(ctx)
}

// print samples once, or every interval with Watch, and prints.
func (o RunOptions) print(ctx context.Context) error {
	for {
		cs, err := Collect(ctx, o.Options)
		if serr := o.Peaks.Save(); serr != nil {
			fmt.Fprintf(o.Err, "gpurun: stats: %v\n", serr)
		}
		cs = o.Filter.Select(cs)
		if o.Watch && !o.JSON {
			fmt.Fprint(o.Out, "\033[H\033[2J")
		}
		if perr := writeContainers(o.Out, cs, o.JSON); perr != nil {
			return fmt.Errorf("stats: %w", perr)
		}
		if !o.Watch {
			if err != nil {
				return exitcode.New(1, fmt.Errorf("stats: %w", err))
			}
			return nil
		}
		if err != nil {
			fmt.Fprintf(o.Err, "gpurun: stats: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.Interval):
		}
	}
}

// writeContainers prints the table, or the JSON array.
func writeContainers(out io.Writer, cs []Container, asJSON bool) error {
	if !asJSON {
		return WriteTable(out, cs)
	}
	if cs == nil {
		cs = []Container{}
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	return enc.Encode(cs)
}
