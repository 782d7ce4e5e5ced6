package shim

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/runtime/logfile"
	"github.com/gpurun/gpurun/runtime/remount"
	"github.com/gpurun/gpurun/runtime/sysinfo"
)

// PanicEnv, when set to "plan" in the shim's environment, makes planning
// panic: a test hook that shows the shim fails open.
const PanicEnv = "GPURUN_TEST_PANIC"

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
	// Self is this executable, so the low-level runtime never resolves to it.
	Self string
}

// New returns a Shim for this process.
func New() *Shim {
	cwd, _ := os.Getwd()
	self, _ := os.Executable()
	return &Shim{
		Args:    os.Args[1:],
		Cwd:     cwd,
		Getenv:  os.Getenv,
		Stderr:  os.Stderr,
		Exec:    syscall.Exec,
		Environ: os.Environ(),
		Self:    self,
	}
}

// Main runs the shim and returns the exit status when it did not exec.
func (s *Shim) Main() int {
	inv := ParseArgs(s.Args, s.Cwd)
	path, explicit := policy.ResolvePath("", s.Getenv)
	pol, polErr := policy.Load(path, explicit)
	if polErr != nil {
		// Without a policy there is no fail_closed to honour: pass through.
		pol = policy.Default()
	}
	log, closeLog := logfile.Open(pol.LogFile, "gpurun-runtime")
	defer closeLog()
	if polErr != nil {
		log.Error("policy unreadable; passing through unchanged", "err", polErr.Error(), "command", inv.Command, "id", inv.ID)
	}

	runtimePath, err := s.lowLevel(pol.Runtime)
	if err != nil {
		log.Error("no low-level runtime", "err", err.Error())
		fmt.Fprintf(s.Stderr, "gpurun-runtime: %v\n", err)
		return 1
	}

	if (inv.Command == "create" || inv.Command == "run") && polErr == nil {
		if err := s.prepare(inv, pol, log); err != nil {
			log.Error("could not size /dev/shm", "id", inv.ID, "bundle", inv.Bundle, "err", err.Error(), "fail_closed", pol.FailClosed)
			if pol.FailClosed {
				msg := fmt.Sprintf("gpurun-runtime: %v (fail_closed is set in %s)", err, path)
				fmt.Fprintln(s.Stderr, msg)
				reportToEngine(inv, msg)
				return 1
			}
		}
	}
	argv := append([]string{runtimePath}, s.Args...)
	if err := s.Exec(runtimePath, argv, s.Environ); err != nil {
		log.Error("exec low-level runtime", "path", runtimePath, "err", err.Error())
		fmt.Fprintf(s.Stderr, "gpurun-runtime: exec %s: %v\n", runtimePath, err)
		return 1
	}
	return 0 // only a replaced Exec returns without error
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
		a, errA := filepath.EvalSymlinks(p)
		b, errB := filepath.EvalSymlinks(s.Self)
		if errA == nil && errB == nil && a == b {
			return "", fmt.Errorf("low-level runtime %q is gpurun-runtime itself; set runtime in the gpurun config to runc, crun or nvidia-container-runtime", name)
		}
	}
	return p, nil
}

// prepare plans the bundle's /dev/shm and carries the plan out. A panic is
// turned into an error, so the caller can fail open.
func (s *Shim) prepare(inv Invocation, pol *policy.Policy, log *slog.Logger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	cfgPath := filepath.Join(inv.Bundle, "config.json")
	cfg, err := oci.LoadConfig(cfgPath)
	if err != nil {
		return err
	}
	if s.Getenv(PanicEnv) == "plan" {
		panic("test hook " + PanicEnv + "=plan")
	}
	facts, err := sysinfo.Facts()
	if err != nil {
		log.Warn("host facts incomplete", "err", err.Error())
	}
	pl := oci.Decide(oci.Input{Container: oci.FromSpec(cfg.Spec), Policy: pol, Facts: facts})
	attrs := []any{"id", inv.ID, "command", inv.Command, "action", string(pl.Action),
		"size_bytes", pl.Size, "current_bytes", pl.Current, "gpu", pl.GPU, "reason", pl.Reason}
	switch pl.Action {
	case oci.ActionNone:
	case oci.ActionRemount:
		res, err := remount.Grow(pl.Shm.Source, pl.Size, remount.Scope{Roots: pol.EngineRoots})
		if err != nil {
			return fmt.Errorf("grow %s: %w", pl.Shm.Source, err)
		}
		attrs = append(attrs, "before_bytes", res.Before, "after_bytes", res.After, "changed", res.Changed)
	default:
		if _, err := cfg.Apply(pl); err != nil {
			return err
		}
		if err := cfg.WriteFile(cfgPath); err != nil {
			return err
		}
	}
	log.Info("planned /dev/shm", attrs...)
	return nil
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
