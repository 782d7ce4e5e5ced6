package shim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/internal/logfile"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/runtime/enforce"
	"github.com/gpurun/gpurun/runtime/specfile"
)

// Component names the shim in its log records and fail-closed errors.
const Component = "gpurun-runtime"

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

	runtimePath, err := s.lowLevel(pol.Runtime)
	if err != nil {
		log.Error("no low-level runtime", "err", err.Error())
		fmt.Fprintf(s.Stderr, "%s: %v\n", Component, err)
		return 1
	}

	if sizing {
		e := enforce.New(enforce.Config{Component: Component, Policy: pol, PolicyErr: polErr, Facts: s.Facts, Log: log})
		prep := func() (enforce.Request, error) { return prepare(inv) }
		if _, err := e.Run(enforce.Subject{ID: inv.ID, Bundle: inv.Bundle}, []any{"command", inv.Command}, prep); err != nil {
			fmt.Fprintln(s.Stderr, err)
			reportToEngine(inv, err.Error())
			return 1
		}
	}
	args := RuncArgs(s.Args)
	argv := append([]string{runtimePath}, args...)
	if err := s.Exec(runtimePath, argv, s.Environ); err != nil {
		log.Error("exec low-level runtime", "path", runtimePath, "err", err.Error())
		fmt.Fprintf(s.Stderr, "%s: exec %s: %v\n", Component, runtimePath, err)
		return 1
	}
	return 0 // only a replaced Exec returns without error
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

// lowLevel resolves the configured runtime to a path that is not this shim.
func (s *Shim) lowLevel(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("low-level runtime %q: %w", name, err)
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if s.Self != "" {
		// The same file, however reached (a symlink, a hard link).
		a, errA := os.Stat(p)
		b, errB := os.Stat(s.Self)
		if errA == nil && errB == nil && os.SameFile(a, b) {
			return "", fmt.Errorf("low-level runtime %q is gpurun-runtime itself; set runtime in the gpurun config to runc, crun or nvidia-container-runtime", name)
		}
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
