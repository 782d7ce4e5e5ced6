package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/internal/logfile"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// Component names the shim in its log records and fail-closed errors.
const Component = "gpurun-runtime"

// CallerEnv marks the environment of the low-level runtime gpurun-runtime
// execs, with that runtime's path. A gpurun-runtime that finds it set was
// called back through the runtime it chains to: NVIDIA's runtime, once the
// GPU Operator's toolkit has restarted, lists containerd's default runtime
// binary — gpurun-runtime — as its own low-level runtime, and the two would
// call each other for ever. It then breaks the cycle (BreakCycle).
const CallerEnv = "GPURUN_RUNTIME_CALLER"

// MsgCycle is the record of a cycle gpurun-runtime broke; doctor and the
// node agent read it back.
const MsgCycle = "runtime cycle: called back through the runtime gpurun-runtime chains to"

// MsgRuntimeMissing is the record of a start whose configured low-level
// runtime is not there (the policy chains NVIDIA's runtime, and the GPU
// Operator's toolkit was removed with its files): gpurun-runtime ran runc
// or crun instead. doctor reads it back.
const MsgRuntimeMissing = "low-level runtime missing: ran runc instead"

// realRuntimes are the low-level runtimes a broken cycle falls back to, in
// order: the first on PATH that is neither gpurun-runtime nor the runtime
// that called back.
func realRuntimes() []string { return []string{"runc", "crun"} }

// Shim is one invocation of gpurun-runtime. Its fields are the process's
// effects, so tests can replace them.
type Shim struct {
	Args   []string // the command line, without the program name
	Cwd    string
	Getenv func(string) string
	Stderr io.Writer
	// Exec replaces the process with the low-level runtime.
	Exec func(path string, argv []string, env []string) error
	// Environ is passed to the low-level runtime unchanged.
	Environ []string
	// Self names this executable, so the low-level runtime never resolves
	// to it; New uses /proc/self/exe, which stat follows to the file.
	Self string
	// Facts returns the host's facts (nil: sysinfo.Facts).
	Facts func() (oci.Facts, error)
	// Fallback is the policy used (for its log_file) when the policy file
	// cannot be read; nil means policy.Default().
	Fallback *policy.Policy
	// LookPath finds a program on PATH (nil: exec.LookPath).
	LookPath func(string) (string, error)
	// Sweep says where the restart sweep keeps its records and finds the
	// node's processes and cgroups (zero: the node's defaults).
	Sweep shmsweep.Options
}

// New returns a Shim for this process.
func New() *Shim {
	// One getcwd(2): os.Getwd stats "." and $PWD first, and the path is
	// only joined to a relative --bundle.
	cwd, _ := unix.Getwd()
	return &Shim{
		Args:    os.Args[1:],
		Cwd:     cwd,
		Getenv:  os.Getenv,
		Stderr:  os.Stderr,
		Exec:    syscall.Exec,
		Environ: os.Environ(),
		Self:    "/proc/self/exe",
	}
}

// Main runs the shim and returns the exit status when it did not exec.
// On create and run it hands the bundle to the enforcer; the low-level
// runtime then gets the command line without gpurun-runtime's own flags.
func (s *Shim) Main() int {
	inv := ParseArgs(s.Args, s.Cwd)
	sizing := inv.Command == "create" || inv.Command == "run"
	path, explicit := policy.ResolvePath("", s.Getenv)
	pol, polErr := enforce.LoadPolicy(path, explicit, s.Fallback)
	log, closeLog := logfile.Open(pol.LogFile, Component)
	defer closeLog()

	if via := s.Getenv(CallerEnv); via != "" {
		return s.breakCycle(inv, via, log)
	}
	runtimePath, err := s.lowLevel(pol.Runtime)
	var missing *missingRuntimeError
	if errors.As(err, &missing) && !pol.FailClosed {
		// Fail open, loudly: a chained runtime that went away (NVIDIA's,
		// with the toolkit that installed it) must not stop every
		// container of the node.
		if p, ok := s.fallback(); ok {
			fix := "point runtime in the gpurun policy (" + path + ") at an installed runtime, or run gpurun install again: it chains the engine's default runtime as it is now"
			log.Error(MsgRuntimeMissing, "command", inv.Command, "id", inv.ID, "runtime", pol.Runtime, "err", err.Error(), "exec", p, "fix", fix)
			fmt.Fprintf(s.Stderr, "%s: %v; running %s instead (fix: %s)\n", Component, err, p, fix)
			runtimePath, err = p, nil
		}
	}
	if err != nil {
		log.Error("no low-level runtime", "err", err.Error())
		fmt.Fprintf(s.Stderr, "%s: %v\n", Component, err)
		return 1
	}

	if inv.Command == "delete" && pol.Sweep == policy.SweepRestart {
		// A pod sandbox's delete ends its pod: the sweep's records of it go.
		if err := enforce.ForgetSandbox(s.Sweep, inv.ID); err != nil {
			log.Warn("dropping the sweep records of a deleted pod", "id", inv.ID, "err", err.Error())
		}
	}
	if sizing {
		e := enforce.New(enforce.Config{Component: Component, Policy: pol, PolicyErr: polErr, Facts: s.Facts, Log: log, SweepOptions: s.Sweep})
		prep := func() (enforce.Request, error) { return prepare(inv) }
		if _, err := e.Run(enforce.Subject{ID: inv.ID, Bundle: inv.Bundle}, []any{"command", inv.Command}, prep); err != nil {
			fmt.Fprintln(s.Stderr, err)
			reportToEngine(inv, err.Error())
			return 1
		}
	}
	return s.exec(runtimePath, log)
}

// exec replaces the process with the low-level runtime at path, given the
// command line less gpurun-runtime's own flags and an environment that
// names it in CallerEnv.
func (s *Shim) exec(path string, log *slog.Logger) int {
	argv := append([]string{path}, RuncArgs(s.Args)...)
	env := append(slices.Clip(s.Environ), CallerEnv+"="+path)
	if err := s.Exec(path, argv, env); err != nil {
		log.Error("exec low-level runtime", "path", path, "err", err.Error())
		fmt.Fprintf(s.Stderr, "%s: exec %s: %v\n", Component, path, err)
		return 1
	}
	return 0 // only a replaced Exec returns without error
}

// breakCycle is gpurun-runtime called back through the runtime it chains
// to (via, from CallerEnv): the gpurun-runtime that called via has already
// planned the container, so this one plans nothing and execs the first of
// realRuntimes that is neither itself nor via — failing open, loudly: an
// error record (MsgCycle) and a line on stderr name the runtime that calls
// back and the fix. With none found it fails the command: running via
// again would only go round once more.
func (s *Shim) breakCycle(inv Invocation, via string, log *slog.Logger) int {
	fix := "point the low-level runtimes of " + via + " at runc, not at gpurun-runtime (NVIDIA's toolkit: runtimes in /etc/nvidia-container-runtime/config.toml, or /usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml under the GPU Operator); gpurun doctor checks it"
	for _, name := range realRuntimes() {
		p, err := s.lookPath(name)
		if err != nil || s.same(p, s.Self) || s.same(p, via) {
			continue
		}
		log.Error(MsgCycle, "command", inv.Command, "id", inv.ID, "bundle", inv.Bundle, "via", via, "exec", p, "fix", fix)
		fmt.Fprintf(s.Stderr, "%s: %s %s calls gpurun-runtime back; running %s directly (fix: %s)\n", Component, inv.Command, via, p, fix)
		return s.exec(p, log)
	}
	log.Error(MsgCycle, "command", inv.Command, "id", inv.ID, "bundle", inv.Bundle, "via", via, "err", "no runc or crun on PATH", "fix", fix)
	fmt.Fprintf(s.Stderr, "%s: %s calls gpurun-runtime back, and there is no runc or crun on PATH to run instead (fix: %s)\n", Component, via, fix)
	return 1
}

func (s *Shim) lookPath(name string) (string, error) {
	if s.LookPath != nil {
		return s.LookPath(name)
	}
	return exec.LookPath(name)
}

// same reports whether paths a and b name the same file, however reached
// (a symbolic link, a hard link).
func (s *Shim) same(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	x, errA := os.Stat(a)
	y, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(x, y)
}

// prepare reads the bundle's config.json into the one form, names the dirs
// the engine handed over (the bundle path, dockerd's data-root), and
// carries out the plans that change the spec by rewriting config.json.
func prepare(inv Invocation) (enforce.Request, error) {
	cfgPath := filepath.Join(inv.Bundle, "config.json")
	cfg, err := specfile.Load(cfgPath)
	if err != nil {
		return enforce.Request{}, err
	}
	dirs := dirs.FromBundle(inv.Bundle, inv.ID)
	dirs.DockerRoot = inv.DockerRoot
	return enforce.Request{
		Container: oci.FromSpec(cfg.Spec),
		Dirs:      dirs,
		Carry: func(pl oci.Plan) (enforce.Done, error) {
			changed, err := cfg.Apply(pl)
			if err != nil {
				return enforce.Done{}, err
			}
			if err := cfg.WriteFile(cfgPath); err != nil {
				return enforce.Done{}, err
			}
			return enforce.Done{Path: cfgPath, Before: pl.Current, After: pl.Size, Changed: changed}, nil
		},
	}, nil
}

// missingRuntimeError is a configured low-level runtime that is not there.
type missingRuntimeError struct {
	name string
	err  error
}

func (e *missingRuntimeError) Error() string {
	return fmt.Sprintf("low-level runtime %q: %v", e.name, e.err)
}

func (e *missingRuntimeError) Unwrap() error { return e.err }

// fallback returns the first of realRuntimes on PATH that is not this
// shim.
func (s *Shim) fallback() (string, bool) {
	for _, name := range realRuntimes() {
		if p, err := s.lookPath(name); err == nil && !s.same(p, s.Self) {
			return p, true
		}
	}
	return "", false
}

// lowLevel resolves the configured runtime to a path that is not this shim.
func (s *Shim) lowLevel(name string) (string, error) {
	p, err := s.lookPath(name)
	if err != nil {
		return "", &missingRuntimeError{name: name, err: err}
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if s.same(p, s.Self) {
		return "", fmt.Errorf("low-level runtime %q is gpurun-runtime itself; set runtime in the gpurun config to runc, crun or nvidia-container-runtime", name)
	}
	return p, nil
}

// reportToEngine writes an error where the engine reads a runtime's errors:
// runc's --log file, in its --log-format. containerd's shim and dockerd show
// that message ("OCI runtime create failed: ...").
func reportToEngine(inv Invocation, msg string) {
	if inv.Log == "" {
		return
	}
	f, err := os.OpenFile(inv.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if inv.LogFormat == "json" {
		line, _ := json.Marshal(map[string]string{"level": "error", "msg": msg, "time": now})
		_, _ = f.Write(append(line, '\n'))
		return
	}
	_, _ = fmt.Fprintf(f, "time=%q level=error msg=%q\n", now, msg)
}
