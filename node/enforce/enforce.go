// Package enforce carries out gpurun's /dev/shm plans for the front doors
// that sit on container starts: the runtime shim (gpurun-runtime), the OCI
// hook (gpurun hook) and the NRI plugin (gpurun nri). Each front door keeps
// only what is its own — reading runc's command line, a hook's state or
// NRI's request into the one form, oci.Container, and the one action it can
// take on the container itself — and hands the rest to an Enforcer, which:
//
//   - plans with oci.Decide, under the policy loaded once (a policy file
//     that cannot be read leaves every container as it is: there is then no
//     fail_closed to honour), with the host's facts from one provider
//     (sysinfo.Facts unless a test injects others);
//   - grows an engine-made host tmpfs itself (a pod's sandbox /dev/shm, a
//     Docker IPC group's, Podman's userdata/shm), only the one the engine
//     named for this container (engine/dirs) — or, where the engine
//     named nothing, one under the policy's engine_roots — with
//     engine/remount's safety rules;
//   - hands every other action (set-size, inject, ipc-host) to the front
//     door's Carry;
//   - turns a panic into an error, fails open (logs and lets the container
//     start as the engine made it) unless the policy sets fail_closed, and
//     then returns the one fail-closed error type, *FailClosedError;
//   - logs one record per container with the same fields for every front
//     door (log/slog), the Kubernetes pod's namespace, name, uid and
//     container name among them where the spec's CRI annotations say, and
//     hands the outcome to Config.Observe (a long-running front door's
//     metrics and events; the per-start ones are read back from the log).
package enforce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"slices"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// The messages of the records an Enforcer writes; doctor reads them back.
const (
	// MsgPlanned is the record of a container whose plan was carried out
	// (or had nothing to do).
	MsgPlanned = "planned /dev/shm"
	// MsgFailed is the record of a container whose plan failed.
	MsgFailed = "could not size /dev/shm"
	// MsgPolicyUnreadable is the record of a container left as it is
	// because the policy file could not be read.
	MsgPolicyUnreadable = "policy unreadable; container left as it is"
)

// Config sets up an Enforcer.
type Config struct {
	// Component names the front door in a fail-closed error
	// ("gpurun-runtime", "gpurun-hook", "gpurun-nri").
	Component string
	// Policy is the policy in force (the defaults if nil).
	Policy *policy.Policy
	// PolicyErr is why the policy file could not be read (LoadPolicy): the
	// Enforcer then leaves every container as it is and says why.
	PolicyErr error
	// Facts returns the host's facts (nil: sysinfo.Facts). It is called
	// once per container; a long-running front door passes a memoized one.
	Facts func() (oci.Facts, error)
	// Grow grows an engine-made host tmpfs (nil: remount.Grow).
	Grow func(path string, size int64, scope remount.Scope) (remount.Result, error)
	// Log receives the records (nil: discard).
	Log *slog.Logger
	// Observe, if set, is called once per container Run planned, after its
	// record is logged, with the subject and the result (also when the
	// container could not be read). It runs on the container's start path:
	// it must be quick and must not block.
	Observe func(Subject, Result)
	// QuietNone logs a plan that leaves a container without GPU evidence
	// alone at debug level instead of info (a long-running plugin's stderr,
	// which sees every container of a node).
	QuietNone bool
	// SweepOptions say where the restart sweep (the policy's sweep) finds
	// the node's processes, cgroups and its records (zero: the node's
	// defaults).
	SweepOptions shmsweep.Options
	// Sweep runs the sweep (nil: shmsweep.Sweep with SweepOptions).
	Sweep func(shmsweep.Start) (shmsweep.Result, error)
	// NoSweep sweeps nothing: for a front door that looks at containers
	// already running (NRI's Synchronize), not at their starts.
	NoSweep bool
}

// Enforcer plans containers' /dev/shm and carries the plans out. It is
// safe for concurrent use when its Facts and Grow are.
type Enforcer struct {
	component string
	pol       *policy.Policy
	polErr    error
	facts     func() (oci.Facts, error)
	grow      func(string, int64, remount.Scope) (remount.Result, error)
	log       *slog.Logger
	observe   func(Subject, Result)
	quietNone bool
	sweepOpts shmsweep.Options
	sweeper   func(shmsweep.Start) (shmsweep.Result, error)
	noSweep   bool
}

// New returns an Enforcer.
func New(c Config) *Enforcer {
	e := &Enforcer{component: c.Component, pol: c.Policy, polErr: c.PolicyErr, facts: c.Facts, grow: c.Grow, log: c.Log, observe: c.Observe, quietNone: c.QuietNone,
		sweepOpts: c.SweepOptions, sweeper: c.Sweep, noSweep: c.NoSweep}
	if e.sweeper == nil {
		e.sweeper = func(st shmsweep.Start) (shmsweep.Result, error) { return shmsweep.Sweep(e.sweepOpts, st) }
	}
	if e.pol == nil {
		e.pol = policy.Default()
	}
	if e.facts == nil {
		e.facts = sysinfo.Facts
	}
	if e.grow == nil {
		e.grow = remount.Grow
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	return e
}

// Policy returns the policy in force.
func (e *Enforcer) Policy() *policy.Policy { return e.pol }

// LoadPolicy loads the policy file at path (explicit: named by a flag or
// $GPURUN_CONFIG, so it must exist). When the file cannot be read it
// returns fallback (policy.Default() if nil) — for its log_file — and the
// error, which New takes as Config.PolicyErr.
func LoadPolicy(path string, explicit bool, fallback *policy.Policy) (*policy.Policy, error) {
	pol, err := policy.Load(path, explicit)
	if err == nil {
		return pol, nil
	}
	if fallback == nil {
		fallback = policy.Default()
	}
	return fallback, err
}

// Subject names a container in every record and in a fail-closed error,
// as far as its front door knows it.
type Subject struct {
	// ID is the container's id.
	ID string
	// Name is its name (NRI, from the pod spec).
	Name string
	// Pod ("namespace/name") and PodID name its pod (NRI).
	Pod, PodID string
	// Bundle is the bundle directory the engine handed over (shim, hook).
	Bundle string
}

func (s Subject) attrs() []any {
	var out []any
	for _, kv := range [][2]string{{"id", s.ID}, {"name", s.Name}, {"pod", s.Pod}, {"pod_id", s.PodID}, {"bundle", s.Bundle}} {
		if kv[1] != "" {
			out = append(out, kv[0], kv[1])
		}
	}
	return out
}

// String names the container for people.
func (s Subject) String() string {
	who := s.Name
	if who == "" {
		who = s.ID
	}
	if who == "" {
		who = "(unknown)"
	}
	if s.Pod != "" {
		return "container " + who + " in pod " + s.Pod
	}
	return "container " + who
}

// Request is what a front door hands the Enforcer for one container.
type Request struct {
	// Container is the container in the one form.
	Container *oci.Container
	// Dirs are the directories the engine named for it (the bundle path it
	// handed over, dockerd's data-root, NRI's pod).
	Dirs dirs.Dirs
	// Carry carries out a plan that changes the container itself (set-size,
	// inject, ipc-host) the way the front door can; nil when it can do none
	// of them. An action it leaves undone on purpose is Done.Skipped; one
	// it cannot do and must report is an error.
	Carry func(oci.Plan) (Done, error)
}

// Done is what a Carry did, for the record.
type Done struct {
	// Path is where it acted ("" when nowhere worth naming).
	Path string
	// Before and After are the sizes it found and left, when it knows them.
	Before, After int64
	Changed       bool
	// Skipped says why the front door left the plan undone on purpose.
	Skipped string
}

// Result is what Run did for one container.
type Result struct {
	// Plan is the planner's decision; its Action is "" when the front door
	// could not read the container.
	Plan oci.Plan
	// Grown is the remount of an engine-made host tmpfs, if one was made.
	Grown *remount.Result
	// Done is what the front door's Carry did.
	Done Done
	// Sweep is what the restart sweep did in the pod's /dev/shm, nil where
	// none ran (see Swept).
	Sweep *Swept
	// Err is what went wrong, whatever fail_closed says.
	Err error
}

// FailClosedError is returned when the policy's fail_closed turns an error
// into a failed container start.
type FailClosedError struct {
	// Component is the front door.
	Component string
	// Subject is the container.
	Subject Subject
	// Err is what went wrong.
	Err error
	// Policy is the policy file that sets fail_closed.
	Policy string
}

func (e *FailClosedError) Error() string {
	return fmt.Sprintf("%s: /dev/shm of %s: %v (fail_closed is set in %s)", e.Component, e.Subject, e.Err, e.Policy)
}

func (e *FailClosedError) Unwrap() error { return e.Err }

// RefusedError is a host tmpfs that could not be grown: refused by the
// engine's named dirs or remount's safety rules, or not reachable. Fix says
// what makes it work.
type RefusedError struct {
	Path string
	Err  error
	Fix  string
}

func (e *RefusedError) Error() string { return fmt.Sprintf("grow %s: %v", e.Path, e.Err) }

func (e *RefusedError) Unwrap() error { return e.Err }

// Refused returns the *RefusedError in err's chain, if any, and whether it
// is a refusal by the safety rules or the engine's named dirs (refused
// true) rather than a tmpfs that could not be reached.
func Refused(err error) (ref *RefusedError, refused bool) {
	if !errors.As(err, &ref) {
		return nil, false
	}
	return ref, errors.Is(ref.Err, remount.ErrUnsafe) || errors.Is(ref.Err, dirs.ErrNotNamed)
}

// The causes Cause names.
const (
	CauseNotNamed    = "not-named"    // a tmpfs the engine did not name for the container
	CauseUnknownRoot = "unknown-root" // under no engine dir gpurun knows
	CauseUnsafe      = "unsafe"       // refused by remount's safety rules
	CauseError       = "error"        // anything else (a tmpfs not reachable, a failed remount)
)

// Cause is a short, stable name of why a plan failed (one of the Cause
// constants), for counting failures by cause; "" for no error.
func Cause(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, dirs.ErrUnknownRoot), errors.Is(err, remount.ErrUnproven):
		// Before ErrNotNamed, which an unknown root also matches.
		return CauseUnknownRoot
	case errors.Is(err, dirs.ErrNotNamed):
		return CauseNotNamed
	case errors.Is(err, remount.ErrUnsafe):
		return CauseUnsafe
	}
	return CauseError
}

// podAttrs are the record's fields that name the container's Kubernetes
// pod, from the spec's CRI annotations (none outside a pod).
func podAttrs(p oci.Pod) []any {
	var out []any
	for _, kv := range [][2]string{{"k8s_namespace", p.Namespace}, {"k8s_pod", p.Name}, {"k8s_uid", p.UID}, {"k8s_container", p.Container}} {
		if kv[1] != "" {
			out = append(out, kv[0], kv[1])
		}
	}
	return out
}

// Run reads a container with prepare (the front door's own parsing), plans
// it and carries the plan out, and logs one record. A panic anywhere
// becomes an error. It returns a *FailClosedError when something went wrong
// and the policy sets fail_closed; otherwise nil, and the container starts
// as the engine made it (Result.Err says what went wrong). attrs are the
// front door's own fields for the record (a hook's stage, runc's command).
func (e *Enforcer) Run(s Subject, attrs []any, prepare func() (Request, error)) (Result, error) {
	// The record's common fields, built only for a record to be written.
	base := func() []any { return slices.Clip(append(s.attrs(), attrs...)) }
	if e.polErr != nil {
		e.log.Error(MsgPolicyUnreadable, append(base(), "err", e.polErr.Error())...)
		return Result{Err: e.polErr}, nil
	}
	res, stack := e.run(s, base, prepare)
	if e.observe != nil {
		defer e.observe(s, res)
	}
	if pod := podAttrs(res.Plan.Pod); pod != nil {
		base = func() []any { return slices.Clip(append(append(s.attrs(), pod...), attrs...)) }
	}
	if res.Err == nil {
		e.logPlanned(res, base)
		return res, nil
	}
	rec := base()
	if res.Plan.Action != "" {
		rec = append(rec, "action", string(res.Plan.Action), "size_bytes", res.Plan.Size, "gpu", res.Plan.GPU, "reason", res.Plan.Reason)
	}
	rec = append(rec, sweepAttrs(res.Sweep)...)
	rec = append(rec, "err", res.Err.Error(), "cause", Cause(res.Err), "fail_closed", e.pol.FailClosed)
	if ref, refused := Refused(res.Err); ref != nil {
		rec = append(rec, "path", ref.Path, "refused", refused, "fix", ref.Fix)
	}
	if stack != "" {
		rec = append(rec, "stack", stack)
	}
	e.log.Error(MsgFailed, rec...)
	if e.pol.FailClosed {
		return res, &FailClosedError{Component: e.component, Subject: s, Err: res.Err, Policy: policySource(e.pol)}
	}
	return res, nil
}

// run is Run's work, with a panic turned into an error and its stack.
func (e *Enforcer) run(s Subject, base func() []any, prepare func() (Request, error)) (res Result, stack string) {
	defer func() {
		if r := recover(); r != nil {
			res.Err = fmt.Errorf("panic: %v", r)
			stack = string(debug.Stack())
		}
	}()
	req, err := prepare()
	if err != nil {
		res.Err = err
		return res, ""
	}
	e.enforce(s, base, req, &res)
	return res, ""
}

// enforce plans, sweeps the pod's /dev/shm of an earlier instance's
// leftovers, and acts, filling in res.
func (e *Enforcer) enforce(s Subject, base func() []any, req Request, res *Result) {
	facts, err := e.facts()
	if err != nil {
		e.log.Warn("host facts incomplete", append(base(), "err", err.Error())...)
	}
	pl := oci.Decide(oci.Input{Container: req.Container, Policy: e.pol, Facts: facts})
	res.Plan = pl
	if st, ok := e.sweepTarget(s, req, pl); ok {
		res.Sweep = e.sweep(st)
	}
	switch pl.Action {
	case oci.ActionNone:
	case oci.ActionRemount:
		g, err := e.growHost(req.Dirs, pl)
		if err != nil {
			res.Err = err
			return
		}
		res.Grown = &g
	default:
		if req.Carry == nil {
			res.Err = fmt.Errorf("plan %q (%s): this front door cannot carry it out", pl.Action, pl.Reason)
			return
		}
		res.Done, res.Err = req.Carry(pl)
	}
}

// growHost grows the engine-made host tmpfs of a remount plan: the one the
// engine named for the container, else one under the policy's engine_roots.
func (e *Enforcer) growHost(dirs dirs.Dirs, pl oci.Plan) (remount.Result, error) {
	src := pl.Shm.Source
	scope := remount.Scope{Roots: e.pol.EngineRoots}
	named, ok, err := dirs.Shm(pl.Shm, pl.Pod)
	if err != nil {
		return remount.Result{}, &RefusedError{Path: src, Err: err, Fix: e.fix(pl.Shm, false, err)}
	}
	if ok {
		scope = remount.Scope{Named: named, SameAs: dirs.Confirm(pl.Shm)}
	}
	g, err := e.grow(src, pl.Size, scope)
	if err != nil {
		return g, &RefusedError{Path: src, Err: err, Fix: e.fix(pl.Shm, ok, err)}
	}
	return g, nil
}

// fix says what makes a failed remount of sh work; named says the engine
// named the tmpfs. It goes by the refusal's type (dirs' and remount's
// errors), never by its message.
func (e *Enforcer) fix(sh oci.Shm, named bool, err error) string {
	root := dirs.Root(sh)
	where := root
	if where == "" {
		where = filepath.Dir(sh.Source)
	}
	pol := policySource(e.pol)
	var stale *dirs.StaleRootError
	switch {
	case errors.Is(err, dirs.ErrUnknownRoot):
		return fmt.Sprintf("if %s is the runtime's state dir, add %q to engine_roots in %s (a runtime that gives NRI plugins the pod's pid, containerd 1.7 and later, needs no entry when the plugin runs in the host's PID namespace)", where, where, pol)
	case errors.Is(err, remount.ErrUnproven):
		return fmt.Sprintf("add %q to engine_roots in %s, or run gpurun in the host's PID namespace (a DaemonSet needs hostPID: true) so that it reads the pod's own /dev/shm to prove the tmpfs is the pod's", where, pol)
	case errors.As(err, &stale):
		return fmt.Sprintf("run the install again, which tells gpurun-runtime dockerd's data-root as dockerd uses it now (%s; it was told %s): sudo gpurun install docker --reload", stale.Found, stale.Told)
	case errors.Is(err, dirs.ErrNotNamed):
		return "none to make: /dev/shm binds a tmpfs its engine did not make for this container (another pod's, or another engine's), and gpurun grows only that one; check the container's mounts"
	case errors.Is(err, remount.ErrSymlink):
		return fmt.Sprintf("point the engine at the real directory (resolve %s with readlink -f and configure that path): gpurun never remounts through a symbolic link", where)
	case errors.Is(err, remount.ErrNotUnderRoot) && sh.Engine == oci.EngineDocker:
		return fmt.Sprintf("tell gpurun-runtime dockerd's data-root %s: sudo gpurun install docker --reload (it passes the data-root in the runtime's runtimeArgs), or add %q to engine_roots in %s", where, where, pol)
	case errors.Is(err, remount.ErrNotUnderRoot):
		return fmt.Sprintf("the engine did not name this directory to gpurun (not a bundle layout gpurun knows): add %q to engine_roots in %s", where, pol)
	case errors.Is(err, remount.ErrHostShm):
		return "none to make: gpurun never resizes the host's /dev/shm"
	case named && !errors.Is(err, remount.ErrUnsafe):
		return fmt.Sprintf("run gpurun where %s is visible as the engine mounted it (a DaemonSet needs a hostPath volume of %s with mountPropagation HostToContainer)", sh.Source, where)
	}
	return fmt.Sprintf("check that %s is the engine's tmpfs for this container (findmnt %s)", sh.Source, sh.Source)
}

// logPlanned writes the record of a container whose plan was carried out.
func (e *Enforcer) logPlanned(res Result, base func() []any) {
	pl := res.Plan
	level := slog.LevelInfo
	sw := sweepAttrs(res.Sweep)
	if e.quietNone && pl.Action == oci.ActionNone && !pl.GPU && sw == nil {
		level = slog.LevelDebug
	}
	if !e.log.Enabled(context.Background(), level) {
		return // no record to build
	}
	rec := append(base(), "action", string(pl.Action), "size_bytes", pl.Size, "current_bytes", pl.Current,
		"target_bytes", pl.Target, "gpu", pl.GPU, "gpus", pl.GPUs, "reason", pl.Reason)
	if len(pl.Warnings) > 0 {
		msgs := make([]string, len(pl.Warnings))
		for i, w := range pl.Warnings {
			msgs[i] = w.Message
		}
		rec = append(rec, "warnings", msgs)
	}
	switch {
	case res.Grown != nil:
		rec = append(rec, "path", pl.Shm.Source, "before_bytes", res.Grown.Before, "after_bytes", res.Grown.After, "changed", res.Grown.Changed)
	case res.Done.Skipped != "":
		rec = append(rec, "skipped", res.Done.Skipped)
	case res.Done != Done{}:
		if res.Done.Path != "" {
			rec = append(rec, "path", res.Done.Path)
		}
		rec = append(rec, "before_bytes", res.Done.Before, "after_bytes", res.Done.After, "changed", res.Done.Changed)
	}
	rec = append(rec, sw...)
	e.log.Log(context.Background(), level, MsgPlanned, rec...)
}

func policySource(pol *policy.Policy) string {
	if pol.Source == "" {
		return "(defaults)"
	}
	return pol.Source
}
