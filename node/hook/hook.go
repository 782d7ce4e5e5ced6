// Package hook is `gpurun hook`: an OCI hook (runtime-spec hooks, or a
// hooks.d file that Podman and CRI-O inject) that gives a GPU container the
// /dev/shm the policy plans for it, for engines whose runtime cannot be
// replaced by gpurun-runtime.
//
// The runtime runs the hook with the container's state on stdin. The hook
// loads the bundle's config.json and hands it to the enforcer
// (node/enforce), as gpurun-runtime does, which plans with the shared
// planner and carries the plan out. A hook runs after the runtime has read
// config.json, so it cannot change the spec; it changes the mounts the spec
// produced instead:
//
//   - remount: /dev/shm binds a tmpfs the engine mounted on the host (a
//     Podman or CRI-O userdata/shm, a CRI sandbox's shm): the enforcer grows
//     it from the host side — only the one the engine named for this
//     container, which the bundle path shows (Podman's graph root or CRI-O's
//     run root, <root>/overlay-containers/<id>/userdata; containerd's state
//     dir) — with engine/remount's rules;
//   - set-size: /dev/shm is the container's own tmpfs, which exists only in
//     its mount namespace: the hook grows it there with
//     remount.GrowInNamespace, at <rootfs>/dev/shm, since createRuntime,
//     prestart and createContainer hooks run before pivot_root;
//   - inject and ipc-host need a different spec: the hook cannot do them, and
//     says so.
//
// Like gpurun-runtime, the hook sits on every container start: it prints
// nothing on stdout, exits 0 when there is nothing to do, and on an internal
// error logs and lets the container start unchanged (fail-open) unless the
// policy sets fail_closed.
package hook

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/internal/logfile"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// Component names the hook in its log records and fail-closed errors.
const Component = "gpurun-hook"

// RuntimeUsage names the hook mode of gpurun-runtime (`gpurun-runtime
// hook`, the same hook from the small binary) in its usage, which `hook
// --help` prints: what tells an installer that a gpurun-runtime has it.
const RuntimeUsage = "gpurun-runtime hook"

// CheckRuntimeMode says whether the gpurun-runtime at path has the hook
// mode (nil) or why not: `path hook --help`, run by run (its stdout),
// must succeed and name RuntimeUsage. One from before the mode hands
// "hook" to runc, which fails, and an engine whose hooks.d entry runs it
// then fails every container start.
func CheckRuntimeMode(path string, run func(name string, args ...string) ([]byte, error)) error {
	out, err := run(path, "hook", "--help")
	switch {
	case err != nil:
		return fmt.Errorf("%s has no hook mode (%q failed: %w)", path, filepath.Base(path)+" hook --help", err)
	case !strings.Contains(string(out), RuntimeUsage):
		return fmt.Errorf("%s has no hook mode (%q does not name it: a gpurun-runtime older than the mode?)", path, filepath.Base(path)+" hook --help")
	}
	return nil
}

// Hook is one invocation of `gpurun hook`. Its function fields are the
// process's effects, so that tests can replace them.
type Hook struct {
	// Stdin carries the container state.
	Stdin io.Reader
	// ConfigPath is --config ("" for $GPURUN_CONFIG, else the default).
	ConfigPath string
	// Stage is the hook stage the runtime runs it in, when the hook entry
	// says (--stage); it is logged, and "createContainer" makes the hook try
	// its own mount namespace first.
	Stage  string
	Getenv func(string) string
	// Fallback is the policy used (for its log_file) when the policy file
	// cannot be read; nil means policy.Default().
	Fallback *policy.Policy

	// Facts returns the host's facts (nil: sysinfo.Facts).
	Facts func() (oci.Facts, error)
	// Grow grows an engine-made host tmpfs (nil: remount.Grow).
	Grow func(path string, size int64, scope remount.Scope) (remount.Result, error)
	// GrowPrivate grows the container's own tmpfs in its mount namespace
	// and says where it found it.
	GrowPrivate func(t Target, size int64) (remount.Result, string, error)
}

// New returns a Hook for this process reading the state from stdin.
func New(stdin io.Reader) *Hook {
	return &Hook{
		Stdin:       stdin,
		Getenv:      os.Getenv,
		GrowPrivate: Namespaces{}.Grow,
	}
}

// Run plans the container's /dev/shm and carries the plan out. It returns
// nil when there was nothing to do, when it was done, and when it failed
// but the policy fails open (the error is logged); an
// *enforce.FailClosedError when the container start must fail.
func (h *Hook) Run() error {
	data, readErr := io.ReadAll(io.LimitReader(h.Stdin, maxState))
	st, stErr := ParseState(data)
	if readErr != nil {
		stErr = fmt.Errorf("read container state from stdin: %w", readErr)
	}
	path, explicit := policy.ResolvePath(h.ConfigPath, h.Getenv)
	pol, polErr := enforce.LoadPolicy(path, explicit, h.Fallback)
	log, closeLog := logfile.Open(pol.LogFile, Component)
	defer closeLog()

	e := enforce.New(enforce.Config{Component: Component, Policy: pol, PolicyErr: polErr, Facts: h.Facts, Grow: h.Grow, Log: log})
	prep := func() (enforce.Request, error) {
		if stErr != nil {
			return enforce.Request{}, stErr
		}
		return h.prepare(st)
	}
	attrs := []any{"stage", h.Stage, "status", st.Status, "container_pid", st.Pid}
	_, err := e.Run(enforce.Subject{ID: st.ID, Bundle: st.Bundle}, attrs, prep)
	return err
}

// prepare reads the bundle's config.json into the one form, names the dirs
// the bundle path shows, and carries out a set-size plan in the container's
// mount namespace.
func (h *Hook) prepare(st State) (enforce.Request, error) {
	cfg, err := specfile.Load(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return enforce.Request{}, err
	}
	return enforce.Request{
		Container: oci.FromSpec(cfg.Spec),
		Dirs:      dirs.FromBundle(st.Bundle, st.ID),
		Carry: func(pl oci.Plan) (enforce.Done, error) {
			if pl.Action != oci.ActionSetSize {
				return enforce.Done{}, fmt.Errorf("%w: plan %q (%s)", ErrSpecOnly, pl.Action, pl.Reason)
			}
			t := Target{Pid: st.Pid, Rootfs: Rootfs(cfg.Spec.Root, st.Bundle), Stage: h.Stage}
			res, where, err := h.GrowPrivate(t, pl.Size)
			if err != nil {
				return enforce.Done{}, fmt.Errorf("grow the container's own /dev/shm: %w", err)
			}
			return enforce.Done{Path: where, Before: res.Before, After: res.After, Changed: res.Changed}, nil
		},
	}, nil
}

// ErrSpecOnly is wrapped when a plan needs a different spec (inject a tmpfs,
// share the host's IPC namespace): by the time hooks run, the runtime has
// read config.json and made the container's namespaces, so only
// gpurun-runtime or an NRI plugin can carry it out.
var ErrSpecOnly = errors.New("an OCI hook cannot change the container's spec; use gpurun-runtime (or the NRI plugin) for this plan")
