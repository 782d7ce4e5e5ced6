package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

// MigrateRun is gpurun compose migrate's: what to migrate (Options, less
// Policy and Size, which come from LoadPolicy and SizeFlag) and what to do
// with the result.
type MigrateRun struct {
	Options
	// SizeFlag is --size ("" for the policy's sizes).
	SizeFlag string
	// Write replaces the files (Backup keeps FILE.bak); Diff prints a
	// unified diff; Check changes nothing and fails when a file would
	// change; JSON prints a report per service. None: the migrated files
	// go to Out.
	Write, Backup, Diff, Check, JSON bool
	// DryRun turns Write into Diff; Verbose prints compose-go's notes.
	DryRun, Verbose bool
	// LoadPolicy loads gpurun's policy.
	LoadPolicy func() (*policy.Policy, error)
	// Out gets the files, diffs or reports; Err the warnings and notes.
	Out, Err io.Writer
}

// RunMigrate is gpurun compose migrate: it migrates the projects (Migrate)
// and prints or writes the result as o says. Its error carries the exit
// status (exitcode): 1 when Check finds files that would change or
// services to edit by hand, 2 for bad input or a file that could not be
// written.
func RunMigrate(ctx context.Context, o MigrateRun) error {
	// compose-go logs through logrus (for variables nested in defaults,
	// say); gpurun reports what matters itself.
	logrus.SetLevel(logrus.ErrorLevel)
	if o.Backup && !o.Write {
		return exitcode.New(2, errors.New("compose migrate: --backup needs --write"))
	}
	if o.Write && o.DryRun {
		o.Write, o.Diff = false, true // --dry-run: show the change, write nothing
	}
	pol, err := o.LoadPolicy()
	if err != nil {
		return exitcode.New(2, err)
	}
	o.Policy = pol
	o.EnforceMin = o.EnforceMin || pol.EnforceMin
	if o.SizeFlag != "" {
		if o.Size, err = policy.ParseSize(o.SizeFlag); err != nil || o.Size <= 0 {
			if err == nil {
				err = errors.New("must be more than 0")
			}
			return exitcode.New(2, fmt.Errorf("--size %s: %w", o.SizeFlag, err))
		}
	}
	res, err := Migrate(ctx, o.Options)
	if err != nil {
		return exitcode.New(2, err)
	}
	o.printNotes(res)
	if o.Write {
		if err := res.Write(o.Backup); err != nil {
			return exitcode.New(2, err)
		}
	}
	if err := o.print(res); err != nil {
		return fmt.Errorf("compose migrate: %w", err)
	}
	if o.Check {
		if err := checkResult(res); err != nil {
			return exitcode.New(1, err)
		}
	}
	return nil
}

// printNotes writes the notes (with Verbose), the warnings and, when the
// files or a diff go to Out, the services that inherit a line, on Err.
func (o MigrateRun) printNotes(res *Result) {
	if o.Verbose {
		for _, n := range res.Notes {
			fmt.Fprintf(o.Err, "gpurun: %s\n", n)
		}
	}
	if o.JSON {
		return
	}
	for _, s := range res.Services {
		for _, warning := range s.Warnings {
			fmt.Fprintf(o.Err, "gpurun: warning: %s:%d: service %s: %s\n", s.File, s.Line, s.Service, warning)
		}
	}
	if o.Check || o.Write {
		return
	}
	for _, s := range res.Services {
		if s.Action == ActionInherit {
			fmt.Fprintf(o.Err, "gpurun: note: %s:%d: service %s: %s\n", s.File, s.Line, s.Service, s.Reason)
		}
	}
}

// print writes the result on Out in the mode o asks for.
func (o MigrateRun) print(res *Result) error {
	switch {
	case o.JSON:
		enc := json.NewEncoder(o.Out)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		services := res.Services
		if services == nil {
			services = []ServiceReport{}
		}
		return enc.Encode(services)
	case o.Diff:
		for _, f := range res.Files {
			fmt.Fprint(o.Out, f.Diff())
		}
	case o.Check || o.Write:
		printChanges(o.Out, res, o.Write)
	default:
		for _, f := range res.Files {
			if len(res.Files) > 1 {
				fmt.Fprintf(o.Out, "==> %s <==\n", f.Path)
			}
			if _, err := o.Out.Write(f.New); err != nil {
				return err
			}
		}
	}
	return nil
}

// printChanges writes a line per changed service, and per service that
// inherits a change.
func printChanges(w io.Writer, res *Result, done bool) {
	verb := map[ServiceAction]string{ActionAdd: "would add", ActionRaise: "would raise", ActionInherit: "would inherit"}
	if done {
		verb = map[ServiceAction]string{ActionAdd: "added", ActionRaise: "raised", ActionInherit: "inherits"}
	}
	for _, s := range res.Services {
		if v, ok := verb[s.Action]; ok {
			fmt.Fprintf(w, "%s:%d: service %s: %s shm_size: %s (%s)\n", s.File, s.Line, s.Service, v, s.Size, s.Reason)
		}
	}
}

// checkResult is --check's verdict: an error when a file would change or
// a GPU service is left for a hand edit.
func checkResult(res *Result) error {
	files, skipped := 0, 0
	for _, f := range res.Files {
		if f.Changed() {
			files++
		}
	}
	for _, s := range res.Services {
		if s.Action == ActionSkip {
			skipped++
		}
	}
	var problems []string
	if files > 0 {
		problems = append(problems, fmt.Sprintf("%d file(s) would change; run gpurun compose migrate --write", files))
	}
	if skipped > 0 {
		problems = append(problems, fmt.Sprintf("%d GPU service(s) need shm_size added by hand (see the warnings)", skipped))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("compose migrate --check: %s", strings.Join(problems, "; "))
}
