// Package nodeagent sets gpurun up on the Kubernetes node it runs on, from a
// privileged DaemonSet pod that mounts the node's root at a host root
// ("/host"): it copies gpurun-runtime, gpurun and gpurun-full from the image onto the
// node (atomically, backing up files it replaces), keeps the node's policy
// file in step with a source file (the DaemonSet's ConfigMap), registers
// gpurun-runtime as containerd's runtime handler with node/install, and
// restarts containerd as its restart mode says (engine/restart). It
// records all of that on the node, reports whether containerd runs with it,
// and uninstalls exactly what it installed: the config restored byte for
// byte, its files removed or their previous versions put back, the
// directories it created removed when empty. gpurun-runtime stays while a
// running container's shim or containerd itself may still call it.
package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/internal/atomicfile"
	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/policy"
)

// Defaults (node paths).
const (
	// DefaultBinDir is where the binaries go on the node.
	DefaultBinDir = "/usr/local/bin"
	// DefaultStatePath is the agent's record of what it installed.
	DefaultStatePath = "/var/lib/gpurun/node-agent.json"
)

// The binaries the agent copies, by their names in the image and on the
// node. gpurun hands its heavier commands (doctor, plan, ...) to
// gpurun-full, so the node gets both.
const (
	RuntimeBinary = "gpurun-runtime"
	CLIBinary     = "gpurun"
	FullCLIBinary = "gpurun-full"
)

// Binaries are the names of the binaries the agent copies, in order.
func Binaries() []string { return []string{RuntimeBinary, CLIBinary, FullCLIBinary} }

// backupSuffix is added to a file the agent replaces.
const backupSuffix = ".gpurun-node.bak"

// Agent installs gpurun on one node. Paths are node paths unless said
// otherwise; HostRoot is added to reach them.
type Agent struct {
	// HostRoot is where the node's root is mounted ("" or "/": this host).
	HostRoot string
	// SourceDir holds the Binaries to copy (a path here: the
	// image's directory).
	SourceDir string
	// BinDir is where they go ("" means DefaultBinDir).
	BinDir string
	// PolicyPath is the node's policy file ("" means policy.DefaultConfigPath).
	PolicyPath string
	// PolicySource, when set, is the policy file (a path here, the
	// ConfigMap's) the node's policy file is kept equal to, except for a
	// `runtime` line gpurun install chained when the source sets none.
	PolicySource string
	// ContainerdConfig is containerd's config.toml ("" means
	// install.DefaultContainerdConfig).
	ContainerdConfig string
	// DropInDir puts gpurun's tables in a drop-in there. On a node whose
	// distribution is detected (Distribution auto) as k3s or RKE2 it does
	// not apply and is left out: their containerd template takes gpurun's
	// tables (the default-runtime overlay sets it for every node).
	DropInDir string
	// Distribution is whose containerd the node runs ("" or
	// install.DistAuto: detected, see install.ResolveDistribution). For
	// k3s and RKE2 gpurun's tables go into their containerd template, and
	// ContainerdConfig, when left at containerd's default, means the
	// config.toml they generate.
	Distribution install.Distribution
	// SetAsDefault makes gpurun containerd's default runtime handler.
	SetAsDefault bool
	// PodAnnotations are passed to gpurun-runtime (nil: install's default).
	PodAnnotations []string
	// InstallState is gpurun install's state file ("" means
	// install.DefaultStatePath).
	InstallState string
	// StatePath is the agent's record ("" means DefaultStatePath).
	StatePath string
	// Restart is how containerd is restarted when it has not read the
	// configuration yet.
	Restart restart.Mode
	// Log receives what the agent does (nil: discarded).
	Log *slog.Logger
	// Now stamps records (nil: time.Now).
	Now func() time.Time

	// repaired is the content of containerd's files (configKey) the last
	// repair ran for: Run repairs once per change.
	repaired string
}

func (a *Agent) host(p string) string {
	if a.HostRoot == "" || a.HostRoot == "/" {
		return p
	}
	return filepath.Join(a.HostRoot, p)
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func (a *Agent) binDir() string       { return or(a.BinDir, DefaultBinDir) }
func (a *Agent) statePath() string    { return or(a.StatePath, DefaultStatePath) }
func (a *Agent) policyPath() string   { return or(a.PolicyPath, policy.DefaultConfigPath) }
func (a *Agent) configPath() string   { return or(a.ContainerdConfig, install.DefaultContainerdConfig) }
func (a *Agent) installState() string { return or(a.InstallState, install.DefaultStatePath) }

// distribution resolves the agent's distribution on the node.
func (a *Agent) distribution() install.Distribution {
	return install.ResolveDistribution(a.Distribution, a.HostRoot, a.configPath())
}

// dropInDir is the drop-in directory gpurun's tables go into on a node
// of distribution d: DropInDir, except on k3s and RKE2, whose template
// takes them.
func (a *Agent) dropInDir(d install.Distribution) string {
	if d.Templated() {
		return ""
	}
	return a.DropInDir
}

// distributionNamed says whether the distribution was given rather than
// detected.
func (a *Agent) distributionNamed() bool {
	return a.Distribution != "" && a.Distribution != install.DistAuto
}

// containerdConfig is the config.toml containerd reads: for k3s and RKE2
// the one they generate, unless another is given.
func (a *Agent) containerdConfig(d install.Distribution) string {
	if d.Templated() && a.configPath() == install.DefaultContainerdConfig {
		return install.Layout{Distribution: d}.Config()
	}
	return a.configPath()
}

// restarter restarts the record's containerd: for k3s and RKE2 their
// service, which renders the template and starts containerd again.
func (a *Agent) restarter(rec *Record) restart.Containerd {
	r := restart.Containerd{HostRoot: a.HostRoot, Mode: rec.Containerd.Restart, ConfigPath: rec.Containerd.Config, Out: a.lineLog("restart")}
	if d := rec.Containerd.Distribution; d.Templated() {
		r.Unit = install.Layout{Distribution: d}.Unit(a.HostRoot)
	}
	return r
}

// restartHint says how to restart the record's containerd by hand.
func (a *Agent) restartHint(rec *Record) string {
	unit := "containerd"
	if d := rec.Containerd.Distribution; d.Templated() {
		unit = strings.TrimSuffix(install.Layout{Distribution: d}.Unit(a.HostRoot), ".service")
	}
	return "systemctl restart " + unit
}

func (a *Agent) log() *slog.Logger {
	if a.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return a.Log
}

func (a *Agent) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// check validates the agent's settings.
func (a *Agent) check() error {
	if _, err := restart.ParseMode(string(a.Restart)); err != nil {
		return err
	}
	if _, err := install.ParseDistribution(string(a.Distribution)); err != nil {
		return err
	}
	if d := a.distribution(); d.Templated() {
		switch {
		case a.Restart == restart.Signal:
			return fmt.Errorf("--restart=signal restarts containerd alone, and %s writes containerd's config from its template only when it starts itself: use --restart=systemd (restarts %s) or none", d, install.Layout{Distribution: d}.Unit(a.HostRoot))
		case a.DropInDir != "" && a.distributionNamed():
			// Detected, a drop-in setting meant for the cluster's other
			// nodes is left out (Install logs it).
			return fmt.Errorf("--drop-in does not apply to %s: gpurun's tables go into its containerd template", d)
		}
	}
	for _, p := range []struct{ flag, path string }{
		{"--bin-dir", a.binDir()}, {"--policy", a.policyPath()}, {"--containerd-config", a.configPath()},
		{"--install-state", a.installState()}, {"--state", a.statePath()},
	} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s %q: want an absolute path on the node", p.flag, p.path)
		}
	}
	if a.DropInDir != "" && !filepath.IsAbs(a.DropInDir) {
		return fmt.Errorf("--drop-in %q: want an absolute path on the node", a.DropInDir)
	}
	return nil
}

// Install copies the binaries, writes the policy, registers the runtime
// handler and restarts containerd when it has not read the configuration
// (and the restart mode allows). Running it again changes only what
// differs.
func (a *Agent) Install(ctx context.Context) error {
	if err := a.check(); err != nil {
		return err
	}
	if a.PolicySource != "" {
		// A bad source stops the install before anything changes.
		src, err := os.ReadFile(a.PolicySource)
		if err != nil {
			return fmt.Errorf("read the policy source (--policy-source): %w", err)
		}
		if _, err := policy.Parse(a.PolicySource, src); err != nil {
			return err
		}
	}
	rec, statePath, unlock, err := a.lockAndLoad(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	dist := a.distribution()
	if a.DropInDir != "" && dist.Templated() {
		a.log().Info("--drop-in does not apply to "+string(dist)+": gpurun's tables go into its containerd template", "drop-in", a.DropInDir)
	}
	if rec, err = a.reconcile(rec, dist); err != nil {
		return err
	}
	a.describe(rec, dist)
	for _, d := range []string{a.statePath(), a.installState()} {
		if err := a.mkdirs(rec, filepath.Dir(d)); err != nil {
			return err
		}
	}
	save := func() error { return rec.save(statePath) }
	for _, name := range Binaries() {
		if err := a.installBinary(rec, name); err != nil {
			return errors.Join(err, save())
		}
	}
	if err := save(); err != nil {
		return err
	}
	if a.PolicySource != "" {
		if _, err := a.syncPolicy(rec); err != nil {
			return errors.Join(err, save())
		}
		if err := save(); err != nil {
			return err
		}
	}
	if err := a.containerd(rec, a.lineLog("install")).Install(); err != nil {
		return errors.Join(err, save())
	}
	if err := save(); err != nil {
		return err
	}
	a.log().Info("installed", "handler", install.RuntimeName, "default", a.SetAsDefault, "runtime", rec.Containerd.RuntimePath, "config", rec.Containerd.Config)
	if rec.Containerd.Distribution.Templated() {
		a.noteEmbedded(ctx, rec)
		if err := save(); err != nil {
			return err
		}
	}
	return a.applyRestart(ctx, rec, statePath)
}

// lockAndLoad takes the node's lock (one install or uninstall at a time,
// whatever starts it) and reads the agent's record of the node (nil for
// none), at statePath; unlock gives the lock back.
func (a *Agent) lockAndLoad(ctx context.Context) (rec *Record, statePath string, unlock func(), err error) {
	if unlock, err = a.lockNode(ctx); err != nil {
		return nil, "", nil, err
	}
	statePath = a.host(a.statePath())
	if rec, err = loadRecord(statePath); err != nil {
		unlock()
		return nil, "", nil, err
	}
	return rec, statePath, unlock, nil
}

// describe writes into rec what this install sets up: this release, and
// the containerd registration as the agent's settings say.
func (a *Agent) describe(rec *Record, dist install.Distribution) {
	rec.Version = version.String()
	rec.Pending = ""
	prev := rec.Containerd
	if !dist.Templated() {
		dist = ""
	}
	rec.Containerd = ContainerdRecord{
		Distribution:        dist,
		Config:              a.containerdConfig(dist),
		DropInDir:           a.dropInDir(dist),
		SetAsDefault:        a.SetAsDefault,
		RuntimePath:         filepath.Join(a.binDir(), RuntimeBinary),
		Policy:              a.policyPath(),
		InstallState:        a.installState(),
		CreatedInstallState: prev.CreatedInstallState,
		Restart:             a.Restart,
	}
	if len(rec.Binaries) == 0 && !exists(a.host(a.installState())) {
		rec.Containerd.CreatedInstallState = true
	}
}

// reconcile takes an earlier install's record (nil for none) to this
// one's: it refuses node paths that differ (compatible), and takes out a
// registration this install would not put back as it is — one in another
// drop-in directory, or one as the default when this install is not —
// since an install only adds. Without a record it starts one.
func (a *Agent) reconcile(rec *Record, dist install.Distribution) (*Record, error) {
	if rec == nil {
		return &Record{InstalledAt: a.now().UTC(), BinDir: a.binDir()}, nil
	}
	if err := a.compatible(rec); err != nil {
		return nil, err
	}
	switch drop := a.dropInDir(dist); {
	case rec.Containerd.Config != "" && rec.Containerd.DropInDir != drop:
		// The drop-in setting changed (an upgrade to a release whose
		// default-runtime mode uses a drop-in directory, say): take
		// the registration out where it is and put it where it goes.
		a.log().Info("gpurun's registration moves to another drop-in directory", "was", or(rec.Containerd.DropInDir, "(none: "+rec.Containerd.Config+")"), "now", or(drop, "(none: "+rec.Containerd.Config+")"))
		if err := a.containerd(rec, a.lineLog("uninstall")).Uninstall(); err != nil {
			return nil, err
		}
	case rec.Containerd.SetAsDefault && !a.SetAsDefault:
		// From default-runtime to runtime-class: an install only adds,
		// so take the registration out and put it back without the
		// default.
		a.log().Info("gpurun was containerd's default runtime handler; registering it as an extra handler only")
		if err := a.containerd(rec, a.lineLog("uninstall")).Uninstall(); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// compatible refuses an install whose node paths differ from the record's:
// those files would be orphaned.
func (a *Agent) compatible(rec *Record) error {
	differ := func(flag, was, now string) error {
		return fmt.Errorf("this node was set up with %s %q (record %s), not %q: run `gpurun node uninstall` first, or keep %s", flag, was, a.statePath(), now, flag)
	}
	switch {
	case rec.BinDir != a.binDir():
		return differ("--bin-dir", rec.BinDir, a.binDir())
	case rec.Containerd.Config != "" && rec.Containerd.Config != a.containerdConfig(a.distribution()):
		return differ("--containerd-config", rec.Containerd.Config, a.containerdConfig(a.distribution()))
	case rec.Containerd.Config != "" && rec.Containerd.Distribution.Templated() != a.distribution().Templated():
		return differ("--distribution", string(or(string(rec.Containerd.Distribution), string(install.DistContainerd))), string(a.distribution()))
	case rec.Policy != nil && a.PolicySource != "" && rec.Policy.Path != a.policyPath():
		return differ("--policy", rec.Policy.Path, a.policyPath())
	}
	return nil
}

// containerd is gpurun install's containerd installer for the record; it
// never restarts containerd (the agent decides that), and it never moves
// to a layout of its own (NoAutoDropIn): the agent installs what its
// DaemonSet says, again on every start, and its record must say where.
func (a *Agent) containerd(rec *Record, out io.Writer) install.Containerd {
	c := rec.Containerd
	return install.Containerd{
		Options: install.Options{
			HostRoot:    a.HostRoot,
			RuntimePath: c.RuntimePath,
			StatePath:   c.InstallState,
			PolicyPath:  or(c.Policy, a.policyPath()),
			Out:         out,
			Now:         a.Now,
		},
		ConfigPath:     c.Config,
		Distribution:   c.Distribution,
		DropInDir:      c.DropInDir,
		NoAutoDropIn:   true,
		SetAsDefault:   c.SetAsDefault,
		PodAnnotations: a.PodAnnotations,
		Restart:        restart.None,
	}
}

// installBinary copies one binary onto the node, atomically; a file that
// was there before the first install is kept as a backup. The files are
// streamed, never held in memory whole.
func (a *Agent) installBinary(rec *Record, name string) error {
	src := filepath.Join(a.SourceDir, name)
	want, err := fileSHA(src)
	if err == nil && want == "" {
		err = fmt.Errorf("open %s: %w", src, fs.ErrNotExist)
	}
	if err != nil {
		return fmt.Errorf("read %s to copy onto the node (--from): %w", name, err)
	}
	node := filepath.Join(rec.BinDir, name)
	dst := a.host(node)
	b := rec.binary(name)
	if b == nil {
		nb := Binary{Name: name, Path: node}
		if _, err := os.Lstat(dst); err == nil {
			nb.Backup = node + backupSuffix
			if err := copyFile(dst, a.host(nb.Backup), modeOf(dst)); err != nil {
				return fmt.Errorf("back up %s: %w", dst, err)
			}
			a.log().Info("kept the file gpurun replaces", "path", node, "backup", nb.Backup)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("read %s: %w", dst, err)
		}
		if err := a.mkdirs(rec, rec.BinDir); err != nil {
			return err
		}
		rec.Binaries = append(rec.Binaries, nb)
		b = &rec.Binaries[len(rec.Binaries)-1]
	}
	if b.SHA256 != want {
		b.SHA256, b.Stat = want, nil
	}
	if verify(dst, b) {
		a.log().Info("binary up to date", "path", node)
		return nil
	}
	if err := copyFile(src, dst, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dst, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", dst, err)
	}
	b.Stat = nil
	a.log().Info("copied binary onto the node", "path", node, "sha256", want[:12])
	return nil
}

// copyFile copies src over dst atomically, streaming it (atomicfile keeps
// the mode of a file it replaces, else gives mode).
func copyFile(src, dst string, mode os.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	return atomicfile.WriteFrom(dst, f, mode)
}

// mkdirs creates a node directory and its missing parents, recording those
// it created.
func (a *Agent) mkdirs(rec *Record, dir string) error {
	var created []string
	for d := filepath.Clean(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		if exists(a.host(d)) {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(a.host(dir), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", a.host(dir), err)
	}
	for _, d := range created {
		if !slices.Contains(rec.Dirs, d) {
			rec.Dirs = append(rec.Dirs, d)
		}
	}
	return nil
}

// syncPolicy writes the node's policy file from the source when it
// differs, and reports whether it wrote.
func (a *Agent) syncPolicy(rec *Record) (bool, error) {
	src, err := os.ReadFile(a.PolicySource)
	if err != nil {
		return false, fmt.Errorf("read the policy source (--policy-source): %w", err)
	}
	node := a.policyPath()
	dst := a.host(node)
	cur, err := os.ReadFile(dst)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("read %s: %w", dst, err)
	}
	out, err := renderPolicy(a.PolicySource, src, cur)
	if err != nil {
		return false, err
	}
	if rec.Policy == nil {
		pr := &PolicyRecord{Path: node, Created: !existed}
		if existed {
			pr.Backup = node + backupSuffix
			if err := atomicfile.Write(a.host(pr.Backup), cur, modeOf(dst)); err != nil {
				return false, fmt.Errorf("back up %s: %w", dst, err)
			}
		}
		if err := a.mkdirs(rec, filepath.Dir(node)); err != nil {
			return false, err
		}
		rec.Policy = pr
	}
	if existed && bytes.Equal(cur, out) {
		return false, nil
	}
	if err := atomicfile.Write(dst, out, 0o644); err != nil {
		return false, err
	}
	a.log().Info("wrote the node's policy", "path", node, "from", a.PolicySource)
	return true, nil
}

// applyRestart restarts containerd when it runs without the current
// configuration and the mode allows, and records the run that has it.
func (a *Agent) applyRestart(ctx context.Context, rec *Record, statePath string) error {
	ctd, err := a.containerdState(rec)
	switch {
	case err != nil && rec.Containerd.Restart != restart.Systemd:
		a.log().Warn("cannot tell whether containerd runs with gpurun's configuration", "err", err)
		if rec.Containerd.Restart == restart.Signal {
			return fmt.Errorf("restart containerd: %w", err)
		}
		return nil
	case err == nil && ctd.proc == nil:
		a.log().Info("containerd is not running; it reads the configuration when it starts")
		return nil
	case err == nil && ctd.loaded:
		a.log().Info("containerd runs with this configuration", "pid", ctd.proc.PID)
		return a.noteLoaded(rec, ctd, statePath)
	case rec.Containerd.Restart == restart.None || rec.Containerd.Restart == "":
		a.log().Warn("containerd has not read the new configuration: restart it on the node ("+a.restartHint(rec)+"), or run the agent with --restart=systemd",
			"pid", ctd.proc.PID, "started", ctd.proc.Started.UTC().Format(time.RFC3339))
		return nil
	}
	if err := a.restarter(rec).Restart(ctx); err != nil {
		return err
	}
	ctd, err = a.containerdState(rec)
	if err != nil || ctd.proc == nil {
		a.log().Warn("containerd restarted, but the new process cannot be seen", "err", err)
		return nil
	}
	ctd.loaded = true
	return a.noteLoaded(rec, ctd, statePath)
}

// noteLoaded records the containerd run that has read the configuration.
func (a *Agent) noteLoaded(rec *Record, ctd containerdState, statePath string) error {
	l := ctd.loadedRecord()
	if rec.Loaded != nil && *rec.Loaded == *l {
		return nil
	}
	rec.Loaded = l
	return rec.save(statePath)
}

// loadedRecord identifies the containerd run st saw and the configuration
// it read.
func (st containerdState) loadedRecord() *Loaded {
	return &Loaded{PID: st.proc.PID, StartTicks: st.proc.StartTicks, ConfigSHA: st.configSHA, DropInSHA: st.dropInSHA}
}

// lineLog returns a writer that logs each line installers print.
func (a *Agent) lineLog(step string) io.Writer {
	return &lineWriter{log: a.log(), step: step}
}

// lineWriter logs each complete line written to it (installers print
// whole lines).
type lineWriter struct {
	log  *slog.Logger
	step string
	buf  []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		// The installers' hint about restarting is the agent's to give.
		if line == "" || strings.HasPrefix(line, "restart containerd to apply:") {
			continue
		}
		w.log.Info(line, "step", w.step)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// modeOf returns a file's permissions (0o644 when it cannot be read).
func modeOf(p string) os.FileMode {
	fi, err := os.Stat(p)
	if err != nil {
		return 0o644
	}
	return fi.Mode().Perm()
}
