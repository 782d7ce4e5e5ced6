package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/internal/hostpath"
	"github.com/gpurun/gpurun/node/install"
)

// containerdState is what the agent can tell about the node's containerd.
type containerdState struct {
	// proc is the containerd that reads the config; nil: none does.
	proc *restart.Process
	// running are the containerd daemons on the node, each with the
	// files its config reads.
	running []RunningContainerd
	// loaded says proc has read the config (and drop-in) as they are now.
	loaded bool
	// configSHA, dropInSHA and changed describe the files now.
	configSHA, dropInSHA string
	changed              time.Time
}

// RunningContainerd is a containerd daemon running on the node.
type RunningContainerd struct {
	PID int `json:"pid"`
	// Config is its --config (or the default), as it sees it.
	Config string `json:"config"`
	// Files are the files that config reads: it and what it imports.
	Files []string `json:"files,omitempty"`
	// ReadsGPURun says it reads the config gpurun installed into.
	ReadsGPURun bool `json:"reads_gpurun_config"`
}

// dropInPath is the drop-in file of the record, "" without one.
func dropInPath(rec *Record) string {
	if rec.Containerd.DropInDir == "" {
		return ""
	}
	return filepath.Join(rec.Containerd.DropInDir, install.DropInName)
}

// containerdState finds the containerd that reads the record's config (as
// its main config or an import) and tells whether it has read the files as
// they are now: it started after they last changed, or it is the run
// recorded as having read this content.
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
	want, err := os.Stat(a.host(rec.Containerd.Config))
	if err != nil {
		return st, fmt.Errorf("find containerd: %w", err)
	}
	all, err := restart.ListContainerd(a.HostRoot)
	if err != nil {
		return st, err
	}
	var ours []restart.Process
	for _, p := range all {
		r := RunningContainerd{PID: p.PID, Config: p.Config}
		if read, err := p.ConfigFiles(context.Background()); err == nil {
			r.Files = read
		}
		if p.Reads(context.Background(), want) {
			r.ReadsGPURun = true
			ours = append(ours, p)
		}
		st.running = append(st.running, r)
	}
	switch len(ours) {
	case 0:
		return st, nil
	case 1:
	default:
		pids := make([]string, len(ours))
		for i, p := range ours {
			pids[i] = fmt.Sprint(p.PID)
		}
		return st, fmt.Errorf("%d containerd processes (pids %s) read %s", len(ours), strings.Join(pids, ", "), rec.Containerd.Config)
	}
	p := ours[0]
	st.proc = &p
	l := rec.Loaded
	// Loaded only when it surely started after the change: where the two
	// are too close to order (restart.StartUncertainty), it is not, so
	// readiness waits and uninstall keeps gpurun-runtime. A restart that
	// gpurun made itself is recognised by the record instead.
	st.loaded = p.Started.After(st.changed.Add(restart.StartUncertainty)) ||
		l != nil && l.PID == p.PID && l.StartTicks == p.StartTicks && l.ConfigSHA == st.configSHA && l.DropInSHA == st.dropInSHA
	if rec.Containerd.Distribution.Templated() {
		// k3s and RKE2 write config.toml from the template, then start
		// containerd: containerd has what gpurun left in the template when
		// config.toml says the same (gpurun's handler in both, or in
		// neither) and containerd did not start before config.toml was
		// written.
		handler, _, err := a.registered(rec)
		if err != nil {
			return st, err
		}
		st.loaded = handler == a.inTemplate(rec) && !p.Started.Before(st.changed.Add(-restart.StartUncertainty))
	}
	return st, nil
}

// inTemplate reports whether a k3s or RKE2 template holds gpurun's block.
func (a *Agent) inTemplate(rec *Record) bool {
	return install.Layout{Distribution: rec.Containerd.Distribution}.TemplateWithBlock(a.HostRoot) != ""
}

// embedded says whether a k3s or RKE2 node's embedded containerd runs
// NRI, as its generated config and its release leave it. The release the
// record holds is used while the binary is the file it came from.
func (a *Agent) embedded(ctx context.Context, rec *Record) string {
	d := rec.Containerd.Distribution
	l := install.Layout{Distribution: d}
	release := a.recorded(rec.Containerd.Embedded)
	name := string(d)
	version := a.recorded(rec.Containerd.Program)
	if version == "" {
		if p := l.Program(a.HostRoot); p != "" {
			version, _ = l.Version(ctx, a.HostRoot, p)
		}
	}
	if version != "" {
		name += " " + version
	}
	e, err := install.Embedded(ctx, a.HostRoot, l, release)
	if err != nil {
		return fmt.Sprintf("%s: cannot tell whether its embedded containerd runs NRI: %v", name, err)
	}
	rel := e.Release
	if rel == "" {
		rel = "release unknown, " + e.Generation.String()
	}
	if e.NRI.Enabled {
		return fmt.Sprintf("%s: NRI enabled in the embedded containerd (%s; socket %s): the nri mode works here", name, rel, e.NRI.Socket)
	}
	return fmt.Sprintf("%s: NRI disabled in the embedded containerd (%s): the nri mode does not work here; use the runtime handler (runtime-class or default-runtime mode)", name, rel)
}

// recorded is the release of a recorded binary while the file is the one
// it came from, else "".
func (a *Agent) recorded(b *EmbeddedBinary) string {
	if b == nil {
		return ""
	}
	if cur, err := statFile(a.host(b.Path)); err == nil && b.Stat.vouches(cur) {
		return b.Release
	}
	return ""
}

// binaryRecord records a binary's release with its file identity (nil
// where either cannot be had).
func (a *Agent) binaryRecord(path, release string) *EmbeddedBinary {
	if path == "" || release == "" {
		return nil
	}
	// The file itself: k3s and RKE2 reach it through a link to the
	// current release's directory.
	if p, err := hostpath.Resolve(a.HostRoot, path); err == nil {
		path = p
	}
	st, err := statFile(a.host(path))
	if err != nil {
		return nil
	}
	st.Seen = time.Now()
	return &EmbeddedBinary{Path: path, Release: release, Stat: st}
}

// noteEmbedded records the embedded containerd's release (asking its
// binary) and logs whether it runs NRI.
func (a *Agent) noteEmbedded(ctx context.Context, rec *Record) {
	rec.Containerd.Embedded, rec.Containerd.Program = nil, nil
	l := install.Layout{Distribution: rec.Containerd.Distribution}
	if e, err := install.Embedded(ctx, a.HostRoot, l, ""); err == nil {
		rec.Containerd.Embedded = a.binaryRecord(e.Binary, e.Release)
	}
	if p := l.Program(a.HostRoot); p != "" {
		v, err := l.Version(ctx, a.HostRoot, p)
		if err != nil {
			a.log().Warn("cannot tell the "+string(l.Distribution)+" version", "err", err)
		}
		rec.Containerd.Program = a.binaryRecord(p, v)
	}
	a.log().Info(a.embedded(ctx, rec))
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
	// Containerd lists the containerd daemons running on the node and
	// the config each reads.
	Containerd []RunningContainerd `json:"containerd,omitempty"`
	// Problems lists what differs from the record.
	Problems []string `json:"problems,omitempty"`
	// Repairable says the agent repairs the problems by installing
	// gpurun's registration again (another tool changed containerd's
	// config under it; see Run).
	Repairable bool `json:"repairable,omitempty"`
	// Warnings are what does not keep gpurun from being in effect but
	// should be fixed (NVIDIA's runtime calling gpurun-runtime back).
	Warnings []string `json:"warnings,omitempty"`
	// Distribution is k3s or RKE2 when gpurun is in their template.
	Distribution install.Distribution `json:"distribution,omitempty"`
	// Embedded says whether their embedded containerd runs NRI.
	Embedded string `json:"embedded,omitempty"`
}

// Status reports the node's state from the record, the files and the
// running containerd. It changes nothing. It reads the binaries only
// where the record cannot vouch for them unchanged, and then in small
// pieces: it is the readiness probe, running next to the agent within the
// pod's memory limit.
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
	if d := rec.Containerd.Distribution; d.Templated() {
		s.Distribution = d
		s.Embedded = a.embedded(context.Background(), rec)
	}
	for i := range rec.Binaries {
		b := &rec.Binaries[i]
		ok, missing, err := checkBinary(a.host(b.Path), b)
		switch {
		case err != nil:
			s.Problems = append(s.Problems, err.Error())
		case missing:
			s.Problems = append(s.Problems, b.Path+" is missing")
		case !ok:
			s.Problems = append(s.Problems, b.Path+" is not the file gpurun copied")
		}
	}
	handler, isDefault, err := a.registered(rec)
	s.Default = isDefault
	templated := rec.Containerd.Distribution.Templated()
	switch {
	case templated && !a.inTemplate(rec):
		s.Problems = append(s.Problems, fmt.Sprintf("the %s containerd template does not hold gpurun's runtime handler", rec.Containerd.Distribution))
	case templated && err == nil && !handler && len(s.Problems) == 0:
		s.Reason = fmt.Sprintf("%s has not written gpurun's template into %s yet: restart it (%s)", rec.Containerd.Distribution, rec.Containerd.Config, a.restartHint(rec))
		return s, nil
	case err != nil:
		s.Problems = append(s.Problems, err.Error())
	case !handler && !templated:
		d := a.coexistence(rec)
		if len(d.problems) == 0 {
			d.problems = []string{fmt.Sprintf("%s does not register runtime handler %s with %s", rec.Containerd.Config, install.RuntimeName, rec.Containerd.RuntimePath)}
			d.repairable = false
		}
		s.Problems = append(s.Problems, d.problems...)
		s.Repairable, s.Warnings = d.repairable, d.warnings
	case !handler:
		s.Problems = append(s.Problems, fmt.Sprintf("%s does not register runtime handler %s with %s", rec.Containerd.Config, install.RuntimeName, rec.Containerd.RuntimePath))
	case templated && rec.Containerd.SetAsDefault && !isDefault:
		s.Problems = append(s.Problems, fmt.Sprintf("%s: %s is not the default runtime handler", rec.Containerd.Config, install.RuntimeName))
	case !templated:
		d := a.coexistence(rec)
		s.Problems = append(s.Problems, d.problems...)
		s.Repairable, s.Warnings = d.repairable, d.warnings
	}
	if len(s.Problems) > 0 {
		s.Reason = "not installed as recorded: " + strings.Join(s.Problems, "; ")
		if s.Repairable {
			s.Reason += " (the agent installs gpurun's registration again)"
		}
		return s, nil
	}
	ctd, err := a.containerdState(rec)
	s.Containerd = ctd.running
	switch {
	case err != nil:
		s.Reason = "cannot tell whether containerd runs with gpurun: " + err.Error()
		return s, nil
	case ctd.proc == nil && len(ctd.running) == 0:
		s.Reason = "containerd is not running"
		return s, &ctd
	case ctd.proc == nil:
		s.Reason = otherContainerd(rec, ctd.running)
		return s, &ctd
	}
	s.ContainerdPID = ctd.proc.PID
	if !ctd.loaded {
		s.Reason = fmt.Sprintf("containerd (pid %d, --config %s, started %s) has not read the configuration changed at %s: restart containerd",
			ctd.proc.PID, ctd.proc.Config, ctd.proc.Started.UTC().Format(time.RFC3339), ctd.changed.UTC().Format(time.RFC3339))
		return s, &ctd
	}
	s.Ready = true
	what := "an extra runtime handler (RuntimeClass gpurun)"
	if s.Default {
		what = "the default runtime handler"
	}
	s.Reason = fmt.Sprintf("gpurun-runtime is %s of containerd (pid %d, --config %s)", what, ctd.proc.PID, ctd.proc.Config)
	return s, &ctd
}

// otherContainerd says that containerd runs, but reads none of the files
// gpurun installed into, and which it reads instead.
func otherContainerd(rec *Record, running []RunningContainerd) string {
	var b strings.Builder
	b.WriteString("containerd is running, but not with " + rec.Containerd.Config + ", which gpurun installed into: ")
	for i, r := range running {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "containerd (pid %d, --config %s) reads ", r.PID, r.Config)
		switch len(r.Files) {
		case 0:
			b.WriteString(r.Config)
		case 1:
			b.WriteString(r.Files[0])
		default:
			b.WriteString(r.Files[0] + " and its imports " + strings.Join(r.Files[1:], ", "))
		}
	}
	fmt.Fprintf(&b, ". Set containerd-config (ConfigMap gpurun-node) to the config it reads, or have it read %s", rec.Containerd.Config)
	return b.String()
}

// registered reports whether the record's config, read as containerd
// reads it (its imports, the drop-in, included), registers the handler
// with the recorded binary, and whether it is the default.
func (a *Agent) registered(rec *Record) (handler, isDefault bool, err error) {
	c, err := containerd.Load(context.Background(), rec.Containerd.Config, containerd.LoadOptions{Root: a.HostRoot})
	if err != nil {
		return false, false, err
	}
	if !c.Exists {
		return false, false, fmt.Errorf("%s does not exist", rec.Containerd.Config)
	}
	r, ok := c.Runtime(install.RuntimeName)
	return ok && r.BinaryName == rec.Containerd.RuntimePath, c.DefaultRuntime() == install.RuntimeName, nil
}

// containerdStateDir is the state directory of the containerd that reads
// the record's config, else containerd's default.
func (a *Agent) containerdStateDir(rec *Record) string {
	if d := rec.Containerd.Distribution; d.Templated() {
		// k3s and RKE2 give containerd its state dir on the command line.
		return install.Layout{Distribution: d}.State()
	}
	c, err := containerd.Load(context.Background(), rec.Containerd.Config, containerd.LoadOptions{Root: a.HostRoot})
	if err != nil {
		return containerd.DefaultState
	}
	return c.State()
}

// runningWith lists the containers whose shim runs binary: containerd's
// runc shim writes the BinaryName it calls into <bundle>/runtime, and
// bundles live in <state>/io.containerd.runtime.v2.task/<namespace>/<id>.
// names are the paths the shim may know the binary by.
func (a *Agent) runningWith(stateDir string, names ...string) ([]string, error) {
	pattern := filepath.Join(a.host(stateDir), dirs.ContainerdTaskDir, "*", "*", "runtime")
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
