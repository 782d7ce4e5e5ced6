// Package hook is `gpurun hook`: an OCI hook (runtime-spec hooks, or a
// hooks.d file that Podman and CRI-O inject) that gives a GPU container the
// /dev/shm the policy plans for it, for engines whose runtime cannot be
// replaced by gpurun-runtime.
//
// The runtime runs the hook with the container's state on stdin. The hook
// loads the bundle's config.json, plans with the shared planner (oci.Decide,
// as gpurun-runtime does), and carries the plan out. A hook runs after the
// runtime has read config.json, so it cannot change the spec; it changes the
// mounts the spec produced instead:
//
//   - remount: /dev/shm binds a tmpfs the engine mounted on the host (a
//     Podman or CRI-O userdata/shm, a CRI sandbox's shm, a Docker shareable
//     IPC): it is grown from the host side with remount.Grow, under the
//     policy's engine_roots, as gpurun-runtime does;
//   - set-size: /dev/shm is the container's own tmpfs, which exists only in
//     its mount namespace: it is grown there with remount.GrowInNamespace, at
//     <rootfs>/dev/shm, since createRuntime, prestart and createContainer hooks
//     run before pivot_root;
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
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/runtime/logfile"
	"github.com/gpurun/gpurun/runtime/remount"
	"github.com/gpurun/gpurun/runtime/sysinfo"
)

// Component names the hook in its log records.
const Component = "gpurun-hook"

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

	MemTotal      func() (int64, error)
	HostTmpfsSize func(path string) (int64, error)
	// Grow grows an engine-made host tmpfs (remount.Grow).
	Grow func(path string, size int64, scope remount.Scope) (remount.Result, error)
	// GrowPrivate grows the container's own tmpfs in its mount namespace
	// and says where it found it.
	GrowPrivate func(t Target, size int64) (remount.Result, string, error)
}

// New returns a Hook for this process reading the state from stdin.
func New(stdin io.Reader) *Hook {
	return &Hook{
		Stdin:         stdin,
		Getenv:        os.Getenv,
		MemTotal:      sysinfo.MemTotal,
		HostTmpfsSize: sysinfo.TmpfsSize,
		Grow:          remount.Grow,
		GrowPrivate:   Namespaces{}.Grow,
	}
}

// FailClosedError is what Run returns when the policy's fail_closed turns an
// internal error into a failed container start.
type FailClosedError struct {
	Err    error
	Policy string // the policy file that sets fail_closed
}

func (e *FailClosedError) Error() string {
	return fmt.Sprintf("hook: %v (fail_closed is set in %s)", e.Err, e.Policy)
}

func (e *FailClosedError) Unwrap() error { return e.Err }

// Run plans the container's /dev/shm and carries the plan out. It returns
// nil when there was nothing to do, when it was done, and when it failed
// but the policy fails open (the error is logged); a *FailClosedError when
// the container start must fail.
func (h *Hook) Run() error {
	path, explicit := policy.ResolvePath(h.ConfigPath, h.Getenv)
	pol, polErr := policy.Load(path, explicit)
	if polErr != nil {
		// Without a policy there is no fail_closed to honour: fail open.
		pol = h.Fallback
		if pol == nil {
			pol = policy.Default()
		}
	}
	log, closeLog := logfile.Open(pol.LogFile, Component)
	defer closeLog()

	data, readErr := io.ReadAll(io.LimitReader(h.Stdin, maxState))
	st, stErr := ParseState(data)
	if readErr != nil {
		stErr = fmt.Errorf("read container state from stdin: %w", readErr)
	}
	attrs := []any{"stage", h.Stage, "id", st.ID, "status", st.Status, "container_pid", st.Pid, "bundle", st.Bundle}
	if polErr != nil {
		log.Error("policy unreadable; container left as it is", append(attrs, "err", polErr.Error())...)
		return nil
	}
	err := stErr
	if err == nil {
		err = h.apply(st, pol, log, attrs)
	}
	if err == nil {
		return nil
	}
	log.Error("could not size /dev/shm", append(attrs, "err", err.Error(), "fail_closed", pol.FailClosed)...)
	if pol.FailClosed {
		return &FailClosedError{Err: err, Policy: path}
	}
	return nil
}

// apply plans and acts. A panic becomes an error, so the caller can fail open.
func (h *Hook) apply(st State, pol *policy.Policy, log *slog.Logger, attrs []any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	cfg, err := oci.LoadConfig(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return err
	}
	mem, err := h.MemTotal()
	if err != nil {
		log.Warn("host memory unknown", "err", err.Error())
	}
	pl := oci.Decide(oci.Input{Container: oci.FromSpec(cfg.Spec), Policy: pol, Facts: oci.Facts{HostMemory: mem, TmpfsSize: h.HostTmpfsSize}})
	attrs = append(attrs, "action", string(pl.Action), "size_bytes", pl.Size, "current_bytes", pl.Current, "gpu", pl.GPU, "reason", pl.Reason)
	switch pl.Action {
	case oci.ActionNone:
	case oci.ActionRemount:
		res, err := h.Grow(pl.Shm.Source, pl.Size, remount.Scope{Roots: pol.EngineRoots})
		if err != nil {
			return fmt.Errorf("grow %s: %w", pl.Shm.Source, err)
		}
		attrs = append(attrs, "path", pl.Shm.Source, "before_bytes", res.Before, "after_bytes", res.After, "changed", res.Changed)
	case oci.ActionSetSize:
		t := Target{Pid: st.Pid, Rootfs: Rootfs(cfg.Spec.Root, st.Bundle), Stage: h.Stage}
		res, where, err := h.GrowPrivate(t, pl.Size)
		if err != nil {
			return fmt.Errorf("grow the container's own /dev/shm: %w", err)
		}
		attrs = append(attrs, "path", where, "before_bytes", res.Before, "after_bytes", res.After, "changed", res.Changed)
	default:
		return fmt.Errorf("%w: plan %q (%s)", ErrSpecOnly, pl.Action, pl.Reason)
	}
	log.Info("planned /dev/shm", attrs...)
	return nil
}

// ErrSpecOnly is wrapped when a plan needs a different spec (inject a tmpfs,
// share the host's IPC namespace): by the time hooks run, the runtime has
// read config.json and made the container's namespaces, so only
// gpurun-runtime or an NRI plugin can carry it out.
var ErrSpecOnly = errors.New("an OCI hook cannot change the container's spec; use gpurun-runtime (or the NRI plugin) for this plan")
