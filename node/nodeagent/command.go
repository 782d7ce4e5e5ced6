package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/policy"
)

// Settings are a gpurun node command's: the agent as its flags set it,
// and the flags that still need reading.
type Settings struct {
	Agent Agent
	// Restart is --restart (restart.ParseMode); Distribution is
	// --distribution (install.ParseDistribution).
	Restart, Distribution string
	// DryRun is gpurun's --dry-run, which the node commands refuse.
	DryRun bool
	// Executable is this program's path (os.Executable): the binaries are
	// copied from its directory unless Agent.SourceDir names one.
	Executable func() (string, error)
	// Log gets the agent's log (stderr).
	Log io.Writer
}

// Configure returns the agent s describes. Its errors carry exit status 2
// (exitcode).
func Configure(s Settings) (*Agent, error) {
	if s.DryRun {
		return nil, exitcode.New(2, errors.New("gpurun node has no --dry-run: see the change with gpurun --dry-run install containerd --host-root DIR"))
	}
	mode, err := restart.ParseMode(s.Restart)
	if err != nil {
		return nil, exitcode.New(2, fmt.Errorf("--restart: %w", err))
	}
	a := s.Agent
	a.Restart = mode
	if a.Distribution, err = install.ParseDistribution(s.Distribution); err != nil {
		return nil, exitcode.New(2, fmt.Errorf("--distribution: %w", err))
	}
	if a.SourceDir == "" {
		self, err := s.Executable()
		if err != nil {
			return nil, exitcode.New(2, fmt.Errorf("--from: cannot find this gpurun: %w", err))
		}
		a.SourceDir = filepath.Dir(self)
	}
	a.Log = slog.New(slog.NewTextHandler(s.Log, nil))
	return &a, nil
}

// WriteStatus is gpurun node status: it prints the node's state, as JSON
// or a line or two, and returns an error with exit status 1 (exitcode)
// unless gpurun is in effect (the DaemonSet's readiness probe).
func (a *Agent) WriteStatus(out io.Writer, asJSON bool) error {
	st := a.Status()
	if asJSON {
		data, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return fmt.Errorf("node status: %w", err)
		}
		fmt.Fprintln(out, string(data))
	} else {
		if st.Ready {
			fmt.Fprintln(out, "ready: "+st.Reason)
		} else {
			fmt.Fprintln(out, "not ready: "+st.Reason)
		}
		if st.Embedded != "" {
			fmt.Fprintln(out, st.Embedded)
		}
	}
	if !st.Ready {
		return exitcode.New(1, errors.New("not ready"))
	}
	return nil
}

// NodePolicy is the policy the node's front doors go by: the DaemonSet's
// source when given, else the node's file, else the defaults. A file that
// exists but cannot be loaded is passed over, and said: the error names
// each such file (the policy returned is still the next one's, so that the
// metrics keep running while the agent reports the node not ready).
func (a *Agent) NodePolicy() (*policy.Policy, error) {
	var errs []error
	for _, path := range []string{a.PolicySource, filepath.Join(a.HostRoot, a.PolicyPath)} {
		if path == "" {
			continue
		}
		pol, err := policy.Load(path, false)
		if err == nil {
			return pol, errors.Join(errs...)
		}
		errs = append(errs, fmt.Errorf("policy %s: %w", path, err))
	}
	return policy.Default(), errors.Join(errs...)
}
