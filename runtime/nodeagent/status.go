package nodeagent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/gpurun/gpurun/runtime/engineconf/containerd"
	"github.com/gpurun/gpurun/runtime/install"
	"github.com/gpurun/gpurun/runtime/restart"
)

// containerdState is what the agent can tell about the node's containerd.
type containerdState struct {
	// proc is the containerd that reads the config; nil: none runs.
	proc *restart.Process
	// loaded says proc has read the config (and drop-in) as they are now.
	loaded bool
	// configSHA, dropInSHA and changed describe the files now.
	configSHA, dropInSHA string
	changed              time.Time
}

// dropInPath is the drop-in file of the record, "" without one.
func dropInPath(rec *Record) string {
	if rec.Containerd.DropInDir == "" {
		return ""
	}
	return filepath.Join(rec.Containerd.DropInDir, install.DropInName)
}

// containerdState finds the containerd that reads the record's config and
// tells whether it has read the files as they are now: it started after
// they last changed, or it is the run recorded as having read this content.
func (a *Agent) containerdState(rec *Record) (containerdState, error) {
	var st containerdState
	files := []string{rec.Containerd.Config}
	if d := dropInPath(rec); d != "" {
		files = append(files, d)
	}
	for i, f := range files {
		data, err := os.ReadFile(a.host(f))
		if err != nil && !(i > 0 && errors.Is(err, fs.ErrNotExist)) {
			return st, fmt.Errorf("read %s: %w", a.host(f), err)
		}
		if err == nil {
			if fi, err := os.Stat(a.host(f)); err == nil && fi.ModTime().After(st.changed) {
				st.changed = fi.ModTime()
			}
		}
		if i == 0 {
			st.configSHA = sha(data)
		} else if data != nil {
			st.dropInSHA = sha(data)
		}
	}
	procs, err := restart.FindContainerd(a.HostRoot, rec.Containerd.Config)
	if err != nil {
		return st, err
	}
	switch len(procs) {
	case 0:
		return st, nil
	case 1:
	default:
		return st, fmt.Errorf("%d containerd processes read %s", len(procs), rec.Containerd.Config)
	}
	p := procs[0]
	st.proc = &p
	l := rec.Loaded
	// Loaded only when it surely started after the change: where the two
	// are too close to order (restart.StartUncertainty), it is not, so
	// readiness waits and uninstall keeps gpurun-runtime. A restart that
	// gpurun made itself is recognised by the record instead.
	st.loaded = p.Started.After(st.changed.Add(restart.StartUncertainty)) ||
		l != nil && l.PID == p.PID && l.StartTicks == p.StartTicks && l.ConfigSHA == st.configSHA && l.DropInSHA == st.dropInSHA
	return st, nil
}

// Status is the node's state as the agent sees it.
type Status struct {
	// Ready says gpurun is in effect: installed as recorded, and the
	// running containerd has read the configuration.
	Ready bool `json:"ready"`
	// Reason says why not, or what is in effect.
	Reason string `json:"reason"`
	// Handler is the runtime handler name; Default says it is the default.
	Handler string `json:"handler,omitempty"`
	Default bool   `json:"default,omitempty"`
	// ContainerdPID is the containerd that reads the config (0: none).
	ContainerdPID int `json:"containerd_pid,omitempty"`
	// Problems lists what differs from the record.
	Problems []string `json:"problems,omitempty"`
}

// Status reports the node's state from the record, the files and the
// running containerd. It changes nothing.
func (a *Agent) Status() Status {
	st, _ := a.status(nil)
	return st
}

// status computes the status; with rec nil it loads the record. It returns
// the containerd state for callers that record it.
func (a *Agent) status(rec *Record) (Status, *containerdState) {
	if rec == nil {
		var err error
		if rec, err = loadRecord(a.host(a.statePath())); err != nil {
			return Status{Reason: err.Error()}, nil
		}
		if rec == nil {
			return Status{Reason: fmt.Sprintf("gpurun is not installed on this node (no record at %s)", a.statePath())}, nil
		}
	}
	if rec.Pending != "" {
		return Status{Reason: "uninstalled, but " + rec.Pending}, nil
	}
	s := Status{Handler: install.RuntimeName}
	for _, b := range rec.Binaries {
		got, err := fileSHA(a.host(b.Path))
		switch {
		case err != nil:
			s.Problems = append(s.Problems, err.Error())
		case got == "":
			s.Problems = append(s.Problems, b.Path+" is missing")
		case got != b.SHA256:
			s.Problems = append(s.Problems, b.Path+" is not the file gpurun copied")
		}
	}
	handler, isDefault, err := a.registered(rec)
	s.Default = isDefault
	switch {
	case err != nil:
		s.Problems = append(s.Problems, err.Error())
	case !handler:
		s.Problems = append(s.Problems, fmt.Sprintf("%s does not register runtime handler %s with %s", rec.Containerd.Config, install.RuntimeName, rec.Containerd.RuntimePath))
	case rec.Containerd.SetAsDefault && !isDefault:
		s.Problems = append(s.Problems, fmt.Sprintf("%s: %s is not the default runtime handler", rec.Containerd.Config, install.RuntimeName))
	}
	if len(s.Problems) > 0 {
		s.Reason = "not installed as recorded: " + strings.Join(s.Problems, "; ")
		return s, nil
	}
	ctd, err := a.containerdState(rec)
	switch {
	case err != nil:
		s.Reason = "cannot tell whether containerd runs with gpurun: " + err.Error()
		return s, nil
	case ctd.proc == nil:
		s.Reason = "containerd is not running"
		return s, &ctd
	}
	s.ContainerdPID = ctd.proc.PID
	if !ctd.loaded {
		s.Reason = fmt.Sprintf("containerd (pid %d, started %s) has not read the configuration changed at %s: restart containerd",
			ctd.proc.PID, ctd.proc.Started.UTC().Format(time.RFC3339), ctd.changed.UTC().Format(time.RFC3339))
		return s, &ctd
	}
	s.Ready = true
	what := "an extra runtime handler (RuntimeClass gpurun)"
	if s.Default {
		what = "the default runtime handler"
	}
	s.Reason = fmt.Sprintf("gpurun-runtime is %s of containerd (pid %d)", what, ctd.proc.PID)
	return s, &ctd
}

// registered reports whether the record's config (or drop-in) registers the
// handler with the recorded binary, and whether it is the default.
func (a *Agent) registered(rec *Record) (handler, isDefault bool, err error) {
	files := []string{rec.Containerd.Config}
	if d := dropInPath(rec); d != "" {
		files = append(files, d)
	}
	for _, f := range files {
		data, err := os.ReadFile(a.host(f))
		if err != nil {
			return false, false, fmt.Errorf("read %s: %w", a.host(f), err)
		}
		h, d, err := handlerIn(data, install.RuntimeName, rec.Containerd.RuntimePath)
		if err != nil {
			return false, false, fmt.Errorf("%s: %w", f, err)
		}
		handler, isDefault = handler || h, isDefault || d
	}
	return handler, isDefault, nil
}

// handlerIn looks up the runtime handler name in a containerd config.
func handlerIn(data []byte, name, binary string) (handler, isDefault bool, err error) {
	v, err := containerd.Version(data)
	if err != nil {
		return false, false, err
	}
	plugin := "io.containerd.grpc.v1.cri"
	if v >= 3 {
		plugin = "io.containerd.cri.v1.runtime"
	}
	var cfg map[string]any
	if err := toml.Unmarshal(data, &cfg); err != nil {
		return false, false, err
	}
	ctd, _ := dig(cfg, "plugins", plugin, "containerd").(map[string]any)
	if ctd == nil {
		return false, false, nil
	}
	got, _ := dig(ctd, "runtimes", name, "options", "BinaryName").(string)
	def, _ := ctd["default_runtime_name"].(string)
	return got == binary, def == name, nil
}

// dig returns the value at a path of nested tables, or nil.
func dig(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

// containerdStateDir is the state directory the config names (top-level
// state), else containerd's default.
func containerdStateDir(data []byte) string {
	var cfg struct {
		State string `toml:"state"`
	}
	if err := toml.Unmarshal(data, &cfg); err != nil || cfg.State == "" {
		return "/run/containerd"
	}
	return cfg.State
}

// runningWith lists the containers whose shim runs binary: containerd's
// runc shim writes the BinaryName it calls into <bundle>/runtime, and
// bundles live in <state>/io.containerd.runtime.v2.task/<namespace>/<id>.
// names are the paths the shim may know the binary by.
func (a *Agent) runningWith(stateDir string, names ...string) ([]string, error) {
	pattern := filepath.Join(a.host(stateDir), "io.containerd.runtime.v2.task", "*", "*", "runtime")
	files, err := filepath.Glob(pattern)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the container went away
		}
		got := strings.TrimSpace(string(data))
		for _, n := range names {
			if got == n {
				ids = append(ids, filepath.Base(filepath.Dir(f)))
				break
			}
		}
	}
	sort.Strings(ids)
	return ids, nil
}
