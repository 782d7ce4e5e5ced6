// Package compose migrates Docker Compose projects so that every GPU
// service gets a right-sized /dev/shm: it finds a project's files the way
// `docker compose` does, understands them with compose-go (overrides,
// extends, include, profiles, interpolation with .env), decides per
// service from gpurun's policy, and inserts `shm_size: <size>` into each
// GPU service that lacks one, in the file and mapping where the service is
// defined, without changing a byte of anything else (see yamledit).
package compose

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpurun/gpurun/compose/yamledit"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// ShmKey is the service key migrate writes.
const ShmKey = "shm_size"

// Options says which projects to migrate and how.
type Options struct {
	// Files are the project's compose files in override order (-f); none
	// means the files `docker compose` would find in ProjectDir (or the
	// working directory, or a parent of it).
	Files []string
	// ProjectDir is the project directory (--project-directory): the base
	// of relative paths and the place of the default .env file.
	ProjectDir string
	// EnvFiles replace the project's .env (--env-file).
	EnvFiles []string
	// Paths are more projects: a file is a project of its own, a directory
	// is searched for projects. They cannot be combined with Files.
	Paths []string
	// Size, when not 0, is the size every GPU service gets (--size).
	Size int64
	// EnforceMin raises an explicit shm_size below the policy minimum.
	EnforceMin bool
	// StrictShared leaves a GPU service for a hand edit (ActionSkip, with
	// a warning) when the mapping its shm_size would go into is shared
	// with services that are not GPU services (a YAML anchor they alias or
	// merge with "<<", or a service they extend). Without it the line goes
	// into the shared mapping and those services inherit it
	// (ActionInherit): a tmpfs reserves no memory until it is written.
	StrictShared bool
	// Policy sizes the services; nil means policy.Default().
	Policy *policy.Policy
	// Environ is the environment for interpolation, as os.Environ gives it.
	Environ []string
	// WorkDir is the directory relative paths in Files, EnvFiles, Paths and
	// ProjectDir start from; "" means the process's working directory.
	WorkDir string

	// composeGoOnly makes every project go through compose-go's loader,
	// the reference the fast path for simple projects is tested against.
	composeGoOnly bool
}

// ServiceAction is what migrate does to a service.
type ServiceAction string

// The actions.
const (
	// ActionNone: not a GPU service; left alone.
	ActionNone ServiceAction = "none"
	// ActionKeep: a GPU service whose /dev/shm is already taken care of.
	ActionKeep ServiceAction = "keep"
	// ActionAdd: shm_size is added (or, for a service that inherits it
	// through a YAML merge or extends, added where it inherits from).
	ActionAdd ServiceAction = "add"
	// ActionRaise: an explicit shm_size below the minimum is raised
	// (--enforce-min).
	ActionRaise ServiceAction = "raise"
	// ActionInherit: not a GPU service, and not changed itself, but it
	// takes the shm_size added to a mapping it shares with a GPU service
	// (through a YAML alias, a "<<" merge or extends), so its /dev/shm
	// gets the GPU service's larger ceiling. A tmpfs reserves no memory:
	// pages are charged only when written, so the ceiling costs nothing.
	ActionInherit ServiceAction = "inherit"
	// ActionSkip: a GPU service that needs a size, left alone because
	// changing it would change other services too, or its layout cannot be
	// edited safely; a warning says what to do by hand.
	ActionSkip ServiceAction = "skip"
)

// ServiceReport is migrate's finding and decision for one service.
type ServiceReport struct {
	// Project is the project's first compose file.
	Project string `json:"project"`
	// File and Line are where the service is defined; for add, the file
	// and the line of the key whose mapping gets shm_size (for a service
	// that takes it from another mapping, that mapping's); for raise, the
	// line of the value raised.
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Service string `json:"service"`
	GPU     bool   `json:"gpu"`
	// Evidence lists the GPU signals found ("deploy.resources.reservations.devices: driver nvidia").
	Evidence []string      `json:"evidence,omitempty"`
	Action   ServiceAction `json:"action"`
	// Size is the shm_size written (for inherit, the one inherited), in
	// compose's units ("8gb").
	Size      string `json:"size,omitempty"`
	SizeBytes int64  `json:"size_bytes,omitempty"`
	// SharedWith, for add, names the services that are not GPU services
	// and inherit the added line, because they share the mapping it goes
	// into.
	SharedWith []string `json:"shared_with,omitempty"`
	// InheritsFrom, for inherit, names the GPU services whose added line
	// the service takes.
	InheritsFrom []string `json:"inherits_from,omitempty"`
	Reason       string   `json:"reason"`
	Warnings     []string `json:"warnings,omitempty"`
	// WarningKinds are the kinds of the decision's warnings among
	// Warnings (oci.WarningKind), in their order; migrate's own (a service
	// not understood, left alone) have none.
	WarningKinds []oci.WarningKind `json:"warning_kinds,omitempty"`
}

// File is one compose file of the migrated projects.
type File struct {
	// Path is the file's path as found (absolute unless given relative).
	Path string
	// Old is the file's content; New the migrated content (Old when
	// nothing changes).
	Old, New []byte
	abs      string
}

// Changed reports whether migrate changes the file.
func (f *File) Changed() bool { return string(f.Old) != string(f.New) }

// Result is what Migrate found and would change.
type Result struct {
	// Files are all compose files of the projects, in the order found.
	Files []*File
	// Services are the reports, per project in file order, per file in
	// service name order.
	Services []ServiceReport
	// Notes are project-level remarks (unset variables, files found).
	Notes []string
}

// Changed reports whether any file changes.
func (r *Result) Changed() bool {
	return slices.ContainsFunc(r.Files, (*File).Changed)
}

// Migrate analyzes the projects opts names and computes the migrated
// files; it writes nothing. Bad input (unreadable files, YAML or compose
// errors, a file that is not a compose file) is an error naming the file,
// line and column, and then there is no result at all.
func Migrate(ctx context.Context, opts Options) (*Result, error) {
	if opts.Policy == nil {
		opts.Policy = policy.Default()
	}
	specs, err := discover(opts)
	if err != nil {
		return nil, err
	}
	cache := &fileCache{files: map[string]*yamledit.File{}}
	res := &Result{}
	edits := map[string][]yamledit.Edit{}
	var order []string
	var errs []error
	for _, spec := range specs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, err := loadProject(ctx, spec, opts, cache)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		reports, pedits := placeEdits(p, opts)
		if len(pedits) > 0 {
			if err := p.validate(); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		res.Services = append(res.Services, reports...)
		res.Notes = append(res.Notes, p.notes...)
		for _, f := range p.files {
			if _, seen := edits[f.abs]; !seen {
				order = append(order, f.abs)
				edits[f.abs] = nil
			}
		}
		for name, es := range pedits {
			edits[name] = mergeEdits(edits[name], es)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, abs := range order {
		f := cache.files[abs]
		out, err := f.Apply(edits[abs])
		if err != nil {
			errs = append(errs, fmt.Errorf("migrate %s: %w", f.Name, err))
			continue
		}
		res.Files = append(res.Files, &File{Path: f.Name, Old: f.Src, New: out, abs: abs})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return res, nil
}

// mergeEdits adds es to have, leaving out edits already there (a file that
// belongs to two projects is planned twice).
func mergeEdits(have, es []yamledit.Edit) []yamledit.Edit {
	for _, e := range es {
		if !slices.ContainsFunc(have, func(h yamledit.Edit) bool { return h.Offset == e.Offset }) {
			have = append(have, e)
		}
	}
	return have
}
