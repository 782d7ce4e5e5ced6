package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/internal/atomicfile"
	"github.com/gpurun/gpurun/internal/hostpath"
)

// DefaultContainerdConfig is containerd's configuration file.
const DefaultContainerdConfig = containerd.DefaultConfigPath

// DropInName is the file a drop-in install writes in the drop-in directory.
const DropInName = "99-gpurun.toml"

// DefaultPodAnnotations are passed from pods to gpurun-runtime: a size a
// pod asks for, and CDI device requests (GPU evidence).
var DefaultPodAnnotations = []string{"gpurun.io/*", "cdi.k8s.io/*"}

// Containerd registers gpurun-runtime as a CRI runtime handler.
type Containerd struct {
	Options
	// ConfigPath is config.toml (a node path).
	ConfigPath string
	// DropInDir, when set, holds gpurun's tables in DropInDir/99-gpurun.toml
	// and adds it to the main config's imports, instead of editing the
	// main config's tables.
	DropInDir string
	// SetAsDefault makes gpurun the default runtime handler, so every pod
	// gets it without a RuntimeClass.
	SetAsDefault bool
	// PodAnnotations are passed to the runtime; nil means
	// DefaultPodAnnotations.
	PodAnnotations []string
	// Restart says how containerd is restarted after the change
	// (containerd reads its config only at start; running containers keep
	// running): "" or restart.None prints the command, restart.Systemd asks
	// the node's systemd (through PID 1 under a HostRoot), restart.Signal
	// stops containerd for its supervisor to start again.
	Restart restart.Mode
	// Distribution says whose containerd this is. For DistK3s and
	// DistRKE2, ConfigPath is the config.toml they generate (default:
	// their layout's), which is read and never written; gpurun's tables go
	// into their template (Layout.Template, Layout.TemplateV3), and a
	// restart restarts their service. "" and DistContainerd edit
	// ConfigPath; DistAuto is resolved by the caller (DetectDistribution).
	Distribution Distribution
}

func (c Containerd) configPath() string {
	if c.ConfigPath == "" {
		return c.host(DefaultContainerdConfig)
	}
	return c.host(c.ConfigPath)
}

func (c Containerd) options() containerd.Handler {
	ann := c.PodAnnotations
	if ann == nil {
		ann = DefaultPodAnnotations
	}
	return containerd.Handler{Name: RuntimeName, BinaryName: c.RuntimePath, SetAsDefault: c.SetAsDefault, PodAnnotations: ann}
}

// dropIn returns the drop-in's node path (as containerd's imports name it)
// and its path here.
func (c Containerd) dropIn() (node, here string) {
	node = filepath.Join(c.DropInDir, DropInName)
	return node, c.host(node)
}

// Install registers gpurun-runtime. A second install changes nothing.
func (c Containerd) Install() error {
	if c.Distribution.Templated() {
		c.ConfigPath = c.generatedNode()
		return c.installTemplate()
	}
	path := c.configPath()
	before, existed, err := readConfig(path)
	if err != nil {
		return err
	}
	// The configuration as containerd reads it now, imports included:
	// gpurun stands in for its default runtime, wherever that is set.
	effective, effErr := c.effective(nil)
	opts := c.options()
	if effErr == nil {
		opts.Effective = effective
	}
	var after, dropIn, dropBefore []byte
	var ch containerd.Change
	dropNode, dropHere := "", ""
	if c.DropInDir != "" {
		dropNode, dropHere = c.dropIn()
		if after, dropIn, ch, err = containerd.DropIn(before, dropNode, opts); err != nil {
			return fmt.Errorf("install into %s: %w", path, err)
		}
		if dropBefore, _, err = readConfig(dropHere); err != nil {
			return err
		}
	} else if after, ch, err = containerd.Install(before, opts); err != nil {
		return fmt.Errorf("install into %s: %w", path, err)
	}
	if effErr != nil {
		return fmt.Errorf("install into %s: containerd cannot read its configuration as it is: %w", path, effErr)
	}
	if err := c.verify(effective, after, dropNode, dropIn); err != nil {
		return fmt.Errorf("install into %s: %w", path, err)
	}
	dropChanged := dropHere != "" && string(dropBefore) != string(dropIn)
	var pc *policyChange
	var polBefore, polAfter []byte
	if ch.Chain != "" {
		if pc, polBefore, polAfter, err = c.chain(ch.Chain); err != nil {
			return err
		}
	}
	if c.DryRun {
		c.showDiff(path, before, after)
		if dropHere != "" {
			c.showDiff(dropHere, dropBefore, dropIn)
		}
		if pc != nil {
			c.showDiff(c.policyPath(), polBefore, polAfter)
		}
		return nil
	}
	st, err := loadState(c.statePath())
	if err != nil {
		return err
	}
	rec, hadRecord := st["containerd"][path]
	if !ch.Changed && !dropChanged {
		if hadRecord && rec.Pending {
			if err := c.finish(st, "containerd", path, rec); err != nil {
				return err
			}
			fmt.Fprintf(c.Out, "%s: finished the install an earlier run left half done\n", path)
		} else {
			fmt.Fprintf(c.Out, "%s: gpurun runtime already registered; nothing to do\n", path)
		}
		return c.restart()
	}
	var writes []fileWrite
	if dropChanged {
		writes = append(writes, fileWrite{dropHere, dropIn})
	}
	backup := rec.Backup
	if ch.Changed {
		if backup, err = c.backup(path, before, existed, rec.Backup); err != nil {
			return err
		}
		writes = append(writes, fileWrite{path, after})
	}
	if !hadRecord || ch.Changed {
		raw, err := json.Marshal(ch)
		if err != nil {
			return err
		}
		if rec, err = mergeRecord(rec, hadRecord, ch, mergeContainerd, record{Change: raw, DropIn: dropNode, Policy: pc, Backup: backup, InstalledAt: c.now().UTC()}); err != nil {
			return fmt.Errorf("install state %s: %w", c.statePath(), err)
		}
	}
	if err := c.commit(st, "containerd", path, rec, writes); err != nil {
		return err
	}
	if dropChanged {
		fmt.Fprintf(c.Out, "%s: gpurun runtime tables written\n", dropHere)
	}
	what := "registered runtime handler " + RuntimeName
	if ch.SetDefault {
		what += " as the default"
	}
	fmt.Fprintf(c.Out, "%s: %s (%s, config version %d)", path, what, c.RuntimePath, ch.Version)
	if backup != "" {
		fmt.Fprintf(c.Out, "; backup %s", backup)
	}
	fmt.Fprintln(c.Out)
	return c.restart()
}

// node is the config's node path.
func (c Containerd) node() string {
	if c.ConfigPath == "" {
		return DefaultContainerdConfig
	}
	return c.ConfigPath
}

// containerdBinaries are where a node's containerd usually is.
func containerdBinaries() []string {
	return []string{"/usr/bin/containerd", "/usr/local/bin/containerd", "/usr/sbin/containerd", "/opt/bin/containerd"}
}

// binary is the node's containerd binary (a node path), "" when none is
// found.
func (c Containerd) binary() string {
	bins := containerdBinaries()
	if c.Distribution.Templated() {
		bins = c.layout().Binaries()
	}
	for _, b := range bins {
		if fi, err := hostpath.Stat(c.HostRoot, b); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return b
		}
	}
	return ""
}

// effective reads the configuration as containerd reads it (the main
// config and its imports), with the files of overlay (node paths) in
// place of the disk's. The node's containerd binary, when there is one,
// tells its release (containerd 1.x or 2.x merge the files differently).
func (c Containerd) effective(overlay map[string][]byte) (*containerd.Config, error) {
	o := containerd.LoadOptions{Root: c.HostRoot, Overlay: overlay, Containerd: c.binary()}
	return containerd.Load(context.Background(), c.node(), o)
}

// verify checks that containerd, reading the config as the install leaves
// it (after, and the drop-in when there is one), sees gpurun's runtime
// handler with gpurun-runtime, and as the default when asked: a file that
// containerd reads later (an import) may set them otherwise.
func (c Containerd) verify(before *containerd.Config, after []byte, dropNode string, dropIn []byte) error {
	overlay := map[string][]byte{c.node(): after}
	if dropNode != "" {
		overlay[dropNode] = dropIn
	}
	cfg, err := containerd.Load(context.Background(), c.node(), containerd.LoadOptions{
		Root: c.HostRoot, Overlay: overlay, Generation: before.Generation, Release: before.Release,
	})
	if err != nil {
		return fmt.Errorf("containerd would not read the result: %w", err)
	}
	where := func(path ...string) string {
		if file, line := cfg.Defines(path...); file != "" {
			return fmt.Sprintf(", set in %s:%d", file, line)
		}
		return ""
	}
	handlers := []string{"plugins", cfg.RuntimePluginID(), "containerd"}
	r, ok := cfg.Runtime(RuntimeName)
	switch {
	case !ok:
		return fmt.Errorf("containerd (%s) would not see runtime handler %s: the CRI plugin's section%s, which containerd reads after gpurun's change, replaces the whole section: add gpurun's tables there, or change that file", cfg.Generation, RuntimeName, where(handlers[:2]...))
	case r.BinaryName != c.RuntimePath:
		return fmt.Errorf("containerd (%s) would run %q for runtime handler %s, not %s%s, which containerd reads after gpurun's change: change it there", cfg.Generation, r.BinaryName, RuntimeName, c.RuntimePath, where(append(handlers, "runtimes", RuntimeName, "options", "BinaryName")...))
	case c.SetAsDefault && cfg.DefaultRuntime() != RuntimeName:
		return fmt.Errorf("containerd (%s) would keep %s as its default runtime handler%s, which containerd reads after gpurun's change: change it there", cfg.Generation, cfg.DefaultRuntime(), where(append(handlers, "default_runtime_name")...))
	}
	return nil
}

// Uninstall undoes what Install recorded for this config.
func (c Containerd) Uninstall() error {
	if c.Distribution.Templated() {
		c.ConfigPath = c.generatedNode()
		return c.uninstallTemplate()
	}
	path := c.configPath()
	before, existed, err := readConfig(path)
	if err != nil {
		return err
	}
	st, rec, ch, recorded, err := recordFor[containerd.Change](c.Options, "containerd", path)
	if err != nil {
		return err
	}
	if !recorded {
		fmt.Fprintf(c.Out, "%s: no install recorded in %s; removing what gpurun's marker shows\n", path, c.statePath())
	}
	if !existed {
		fmt.Fprintf(c.Out, "%s: does not exist; nothing to do\n", path)
		return nil
	}
	dropNode := rec.DropIn
	if dropNode == "" && c.DropInDir != "" {
		dropNode, _ = c.dropIn()
	}
	var after []byte
	var changed bool
	if dropNode != "" {
		after, changed, err = containerd.UninstallDropIn(before, dropNode, ch)
	} else {
		after, changed, err = containerd.Uninstall(before, c.options(), ch)
	}
	if err != nil {
		return fmt.Errorf("uninstall from %s: %w", path, err)
	}
	if c.DryRun {
		c.showDiff(path, before, after)
		if dropNode != "" {
			fmt.Fprintf(c.Out, "would remove %s\n", c.host(dropNode))
		}
		return nil
	}
	if changed {
		if err := atomicfile.Write(path, after, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(c.Out, "%s: gpurun runtime removed\n", path)
	} else {
		fmt.Fprintf(c.Out, "%s: gpurun runtime not registered; nothing to do\n", path)
	}
	if dropNode != "" {
		if err := os.Remove(c.host(dropNode)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", c.host(dropNode), err)
		}
	}
	if err := c.forget(st, "containerd", path, rec, recorded); err != nil {
		return err
	}
	return c.restart()
}

// restart restarts containerd as asked, else says how. k3s and RKE2
// render their template only when their service starts, so their service
// is restarted (containerd with it; running containers keep running), and
// a signal to containerd alone would not do.
func (c Containerd) restart() error {
	r := restart.Containerd{HostRoot: c.HostRoot, Mode: c.Restart, ConfigPath: c.node(), Out: c.Out}
	if c.Distribution.Templated() {
		if c.Restart == restart.Signal {
			return fmt.Errorf("restart %s: --restart=signal restarts containerd alone, and %s writes %s from its template only when it starts itself: use --restart=systemd or restart %s by hand", c.Distribution, c.Distribution, c.node(), c.layout().Unit(c.HostRoot))
		}
		r.Unit = c.layout().Unit(c.HostRoot)
	}
	return r.Restart(context.Background())
}
