package install

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/internal/hostpath"
	"github.com/gpurun/gpurun/policy"
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
	// NoAutoDropIn keeps the refusal of an install in place that a file
	// containerd reads later would hide: without it, Install takes the
	// layout that works (a drop-in directory of gpurun's own,
	// OwnDropInDir) and says so in one line.
	NoAutoDropIn bool
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
		return install[templateAdd](c.Options, containerdTemplate{c})
	}
	if c.DropInDir == "" && !c.NoAutoDropIn {
		// An install already recorded into a drop-in directory stays
		// there: in place, beside it, it would now verify (gpurun's own
		// drop-in makes it so) and move.
		st, err := loadState(c.statePath())
		if err != nil {
			return err
		}
		if rec, ok := st["containerd"][c.configPath()]; ok && rec.DropIn != "" {
			c.DropInDir = path.Dir(rec.DropIn)
		}
	}
	err := install[containerdEdit](c.Options, containerdConfig{c})
	var hidden *HiddenError
	if errors.As(err, &hidden) && hidden.DropIn != "" && c.DropInDir == "" && !c.NoAutoDropIn {
		// Nothing is written before verify refuses: install again, the
		// way that works.
		fmt.Fprintf(c.Out, "%s: %s would hide an install in place; installing into %s instead (a drop-in directory of gpurun's own, which containerd reads last; --no-auto-drop-in refuses instead)\n", c.configPath(), hidden.File, hidden.DropIn)
		c.DropInDir = hidden.DropIn
		return install[containerdEdit](c.Options, containerdConfig{c})
	}
	return err
}

// containerdConfig is Install and Uninstall of a config gpurun edits (not
// a distribution's template), in place or into c.DropInDir: containerd's
// editor, as an engine of the install sequence (see sequence.go).
type containerdConfig struct{ Containerd }

// key is containerd's engine in the state file.
func (containerdConfig) key() string { return "containerd" }

// edit reads the config and works the install out (editConfig).
func (c containerdConfig) edit(state) (change[containerdEdit], error) {
	path := c.configPath()
	before, existed, err := readConfig(path)
	if err != nil {
		return change[containerdEdit]{}, err
	}
	e, err := c.editConfig(path, before)
	if err != nil {
		return change[containerdEdit]{}, err
	}
	ch := change[containerdEdit]{path: path, files: []fileDiff{{path, before, e.after, existed}}, chain: e.ch.Chain, changed: e.ch.Changed, own: e}
	if e.dropHere != "" {
		ch.files = append(ch.files, fileDiff{e.dropHere, e.dropBefore, e.dropIn, e.dropExisted})
		ch.changed = ch.changed || e.dropChanged()
	}
	return ch, nil
}

// unchanged keeps the policy in step with the default gpurun stands in
// for (rechain), and else finishes or says there is nothing to do.
func (c containerdConfig) unchanged(st state, ch change[containerdEdit]) error {
	rechained, err := c.rechain(st, ch.path, ch.old, ch.hadOld, ch.own.ch, ch.pol.change)
	if err != nil {
		return err
	}
	if !rechained || (ch.hadOld && ch.old.Pending) {
		return c.nothingToDo(st, c.key(), ch.path, ch.old, ch.hadOld)
	}
	return nil
}

// keep merges the change with the recorded one; the main config is
// backed up before its own first change.
func (c containerdConfig) keep(ch change[containerdEdit]) (record, error) {
	rec, e := ch.old, ch.own
	if ch.hadOld && rec.Policy != nil && ch.pol.change != nil && rec.Policy.Value != ch.pol.change.Value {
		// The default gpurun stands in for changed (NVIDIA's toolkit
		// installed or removed since): chain the one there is now, and
		// keep what the policy had before the first chaining.
		kept := *rec.Policy
		kept.Value = ch.pol.change.Value
		rec.Policy = &kept
	}
	if ch.hadOld && !e.ch.Changed {
		return rec, nil
	}
	main := ch.files[0]
	return newRecord(c.Options, ch.path, main.before, main.existed && e.ch.Changed, rec, ch.hadOld, e.ch, mergeContainerd, record{DropIn: e.dropNode, Policy: ch.pol.change})
}

// report rechains (the policy as the new record says) and says what was
// written.
func (c containerdConfig) report(st state, ch change[containerdEdit], rec record) error {
	if _, err := c.rechain(st, ch.path, rec, true, ch.own.ch, ch.pol.change); err != nil {
		return err
	}
	e := ch.own
	if e.dropChanged() {
		fmt.Fprintf(c.Out, "%s: gpurun runtime tables written\n", e.dropHere)
	}
	what := "registered runtime handler " + RuntimeName
	if e.ch.SetDefault {
		what += " as the default"
	}
	c.reportLine(ch.path, fmt.Sprintf("%s (%s, config version %d)", what, c.RuntimePath, e.ch.Version), rec.Backup)
	return nil
}

// apply restarts containerd (or says how) after an install.
func (c containerdConfig) apply(_ change[containerdEdit], dryRun bool) error {
	if dryRun {
		return nil
	}
	return c.restart()
}

// containerdEdit is what containerd's editor makes of an install, before
// anything is written: the main config after it, and — into a drop-in —
// the drop-in's node and host paths, what it holds and would hold.
type containerdEdit struct {
	after              []byte
	dropNode, dropHere string
	dropBefore, dropIn []byte
	dropExisted        bool
	ch                 containerd.Change
}

// dropChanged says the install writes the drop-in.
func (e containerdEdit) dropChanged() bool {
	return e.dropHere != "" && string(e.dropBefore) != string(e.dropIn)
}

// editConfig works the install out on the config as containerd reads it now,
// imports included (gpurun stands in for its default runtime, wherever
// that is set), and verifies that containerd would see it as asked. It
// leaves gpurun's own drop-in out of what it reads, since it is written
// anew: on containerd 1.x it carries a copy of the CRI section another
// file may have changed since (NVIDIA's toolkit rewrites its drop-in
// whenever its pod starts).
func (c Containerd) editConfig(path string, before []byte) (containerdEdit, error) {
	var e containerdEdit
	var exclude []string
	if c.DropInDir != "" {
		e.dropNode, e.dropHere = c.dropIn()
		exclude = []string{e.dropNode}
	}
	effective, effErr := c.effective(nil, exclude...)
	opts := c.options()
	if effErr == nil {
		opts.Effective = effective
	}
	var err error
	if c.DropInDir != "" {
		if e.after, e.dropIn, e.ch, err = containerd.DropIn(before, e.dropNode, opts); err != nil {
			return e, fmt.Errorf("install into %s: %w", path, err)
		}
		if e.dropBefore, e.dropExisted, err = readConfig(e.dropHere); err != nil {
			return e, err
		}
	} else if e.after, e.ch, err = containerd.Install(before, opts); err != nil {
		return e, fmt.Errorf("install into %s: %w", path, err)
	}
	if effErr != nil {
		return e, fmt.Errorf("install into %s: containerd cannot read its configuration as it is: %w", path, effErr)
	}
	if err := c.verify(effective, e.after, e.dropNode, e.dropIn); err != nil {
		return e, fmt.Errorf("install into %s: %w", path, err)
	}
	return e, nil
}

// rechain keeps the runtime gpurun-runtime hands over to in step with
// the default handler gpurun stands in for, when an install that changed
// no config file made gpurun's handler anew (a drop-in is written anew
// each time: ch.AddedRuntime): a default that is now NVIDIA's runtime is
// chained (pc), and a chained runtime that is no longer the default is
// unchained, the policy's runtime going back to what it was. It reports
// whether it changed the policy.
func (c Containerd) rechain(st state, path string, rec record, hadRecord bool, ch containerd.Change, pc *policyChange) (bool, error) {
	cur := ""
	if data, existed, err := readConfig(c.policyPath()); err != nil {
		return false, err
	} else if existed {
		p, err := policy.Parse(c.policyPath(), data)
		if err != nil {
			return false, err
		}
		cur = p.Runtime
	}
	switch {
	case pc != nil && cur != pc.Value:
		if hadRecord && rec.Policy != nil {
			kept := *rec.Policy
			kept.Value = pc.Value
			pc = &kept
		}
		rec.Policy = pc
		if err := c.ensureChained(pc.Value); err != nil {
			return false, err
		}
	case pc == nil && ch.AddedRuntime && hadRecord && rec.Policy != nil && cur == rec.Policy.Value:
		fmt.Fprintf(c.Out, "%s: the default runtime gpurun stands in for is no longer %s\n", c.policyPath(), rec.Policy.Value)
		if err := c.unchain(rec.Policy); err != nil {
			return false, err
		}
		rec.Policy = nil
	default:
		return false, nil
	}
	if st["containerd"] == nil {
		st["containerd"] = map[string]record{}
	}
	if hadRecord {
		st["containerd"][path] = rec
		if err := st.save(c.statePath()); err != nil {
			return false, err
		}
	}
	return true, nil
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
func (c Containerd) effective(overlay map[string][]byte, exclude ...string) (*containerd.Config, error) {
	o := containerd.LoadOptions{Root: c.HostRoot, Overlay: overlay, Exclude: exclude, Containerd: c.binary()}
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
		return c.hidden(cfg, fmt.Sprintf("would not see runtime handler %s: the CRI plugin's section%s, which containerd reads after gpurun's change, replaces the whole section", RuntimeName, where(handlers[:2]...)), handlers[:2])
	case r.BinaryName != c.RuntimePath:
		bin := append(handlers, "runtimes", RuntimeName, "options", "BinaryName")
		return c.hidden(cfg, fmt.Sprintf("would run %q for runtime handler %s, not %s%s, which containerd reads after gpurun's change", r.BinaryName, RuntimeName, c.RuntimePath, where(bin...)), bin)
	case c.SetAsDefault && cfg.DefaultRuntime() != RuntimeName:
		def := append(handlers, "default_runtime_name")
		return c.hidden(cfg, fmt.Sprintf("would keep %s as its default runtime handler%s, which containerd reads after gpurun's change", cfg.DefaultRuntime(), where(def...)), def)
	}
	return nil
}

// HiddenError is an install that containerd would not see: a file it
// reads after gpurun's change (NVIDIA's toolkit's drop-in, say) sets the
// CRI section, the handler or the default otherwise. Instead names the
// install that works.
type HiddenError struct {
	Generation containerd.Generation
	What       string
	Instead    string
	// File is the file read later that sets it otherwise, "" when not
	// known; DropIn the drop-in directory of gpurun's own an install
	// into which works, "" when that is not the way.
	File, DropIn string
}

// Error says what containerd would read, and what to run instead.
func (e *HiddenError) Error() string {
	msg := fmt.Sprintf("containerd (%s) %s", e.Generation, e.What)
	if e.Instead != "" {
		msg += "; instead: " + e.Instead
	}
	return msg
}

// OwnDropInDir is the drop-in directory gpurun suggests next to a
// containerd config: a directory of its own, so that containerd reads it
// after the other tools' drop-ins (NVIDIA's conf.d/*.toml).
func OwnDropInDir(config string) string {
	return path.Join(path.Dir(config), "gpurun.d")
}

// hidden is the refusal of an install containerd would not see as made:
// what it would see, and the ways that work (alternatives).
func (c Containerd) hidden(cfg *containerd.Config, what string, p []string) *HiddenError {
	alts, file, dropIn := c.alternatives(cfg, p)
	return &HiddenError{Generation: cfg.Generation, What: what, Instead: strings.Join(alts, "; "), File: file, DropIn: dropIn}
}

// alternatives names the installs that work when a file read after
// gpurun's change sets p otherwise: gpurun's tables in a drop-in directory
// of their own, imported last (on containerd 1.x with a copy of the CRI
// section that file writes, its handlers included) — unless that is what
// was just tried; and the modes that need no containerd config. It also
// returns that file, and the drop-in directory where that is a way.
func (c Containerd) alternatives(cfg *containerd.Config, p []string) (alts []string, file, dropIn string) {
	file, _ = cfg.Defines(p...)
	own := OwnDropInDir(c.node())
	if file != "" && file != c.node() && (c.DropInDir == "" || path.Dir(file) == path.Clean(c.DropInDir)) {
		dropIn = own
		cmd := "gpurun install containerd"
		if c.ConfigPath != "" && c.ConfigPath != DefaultContainerdConfig {
			cmd += " --config " + c.ConfigPath
		}
		if c.SetAsDefault {
			cmd += " --set-as-default"
		}
		cmd += " --drop-in " + own
		alts = append(alts, fmt.Sprintf("%s (a directory of its own, imported after %s: containerd reads gpurun's tables last)", cmd, file))
	}
	alts = append(alts, "or gpurun's NRI plugin on containerd 2.x (deploy/kubernetes/overlays/nri), or the admission webhook: neither changes containerd's config (docs/nvidia.md)")
	return alts, file, dropIn
}

// Uninstall undoes what Install recorded for this config.
func (c Containerd) Uninstall() error {
	if c.Distribution.Templated() {
		c.ConfigPath = c.generatedNode()
		return uninstall[containerdRemoval](c.Options, containerdTemplate{c})
	}
	return uninstall[containerdRemoval](c.Options, containerdConfig{c})
}

// containerdRemoval is what an uninstall leaves of containerd's config,
// for the check that containerd no longer sees gpurun: the main config,
// the drop-in removed (a node path) and the other files written back.
type containerdRemoval struct {
	main     []byte
	dropNode string
	others   map[string][]byte
}

// undo works the uninstall out (removal): the main config without
// gpurun's tables or import, the copies other tools made taken out, the
// drop-in removed.
func (c containerdConfig) undo() (*undoPlan[containerdRemoval], error) {
	path := c.configPath()
	before, existed, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	st, rec, ch, recorded, err := recordFor[containerd.Change](c.Options, c.key(), path)
	if err != nil {
		return nil, err
	}
	if !recorded {
		fmt.Fprintf(c.Out, "%s: no install recorded in %s; removing what gpurun's marker shows\n", path, c.statePath())
	}
	if !existed {
		fmt.Fprintf(c.Out, "%s: does not exist; nothing to do\n", path)
		return nil, nil
	}
	dropNode := rec.DropIn
	if dropNode == "" && c.DropInDir != "" {
		dropNode, _ = c.dropIn()
	}
	after, changed, others, err := c.removal(path, before, dropNode, ch)
	if err != nil {
		return nil, err
	}
	f := fileUndo{path: path, before: before, after: after, write: changed, done: path + ": gpurun runtime not registered; nothing to do"}
	if changed {
		f.done = path + ": gpurun runtime removed"
	}
	files := []fileUndo{f}
	for _, node := range slices.Sorted(maps.Keys(others)) {
		old, _, _ := readConfig(c.host(node))
		files = append(files, fileUndo{path: c.host(node), before: old, after: others[node], write: true,
			done: c.host(node) + ": removed the copy of gpurun's runtime handler another tool wrote there"})
	}
	if dropNode != "" {
		files = append(files, fileUndo{path: c.host(dropNode), remove: true, would: "would remove " + c.host(dropNode)})
	}
	return &undoPlan[containerdRemoval]{st: st, path: path, rec: rec, recorded: recorded, files: files, own: containerdRemoval{after, dropNode, others}}, nil
}

// undone checks that containerd no longer sees gpurun's handler, and
// restarts it.
func (c containerdConfig) undone(u *undoPlan[containerdRemoval]) error {
	if err := c.stillRegistered(u.own.main, u.own.dropNode, u.own.others); err != nil {
		return err
	}
	return c.restart()
}

// removal works out an uninstall: the main config without gpurun's
// tables (or its drop-in's import), and whether that changed it; and the
// other files that still hold gpurun's handler — the main config
// rewritten by another tool (NVIDIA's toolkit drops comments), copies of
// it in other files containerd reads (the toolkit's drop-in copies the
// whole CRI section) — without it, by node path.
func (c Containerd) removal(path string, before []byte, dropNode string, ch containerd.Change) (after []byte, changed bool, others map[string][]byte, err error) {
	if dropNode != "" {
		after, changed, err = containerd.UninstallDropIn(before, dropNode, ch)
	} else {
		after, changed, err = containerd.Uninstall(before, c.options(), ch)
	}
	if err != nil {
		return nil, false, nil, fmt.Errorf("uninstall from %s: %w", path, err)
	}
	if others, err = c.removeCopies(after, dropNode, ch); err != nil {
		return nil, false, nil, fmt.Errorf("uninstall from %s: %w", path, err)
	}
	if main, ok := others[c.node()]; ok {
		after, changed = main, true
		delete(others, c.node())
	}
	return after, changed, others, nil
}

// removeCopies returns the files (node paths, the main config among them)
// that still hold gpurun's runtime handler, or a default naming it, once
// main is as the uninstall leaves it and the drop-in dropNode is gone,
// with the handler taken out (containerd.RemoveRuntime).
func (c Containerd) removeCopies(main []byte, dropNode string, ch containerd.Change) (map[string][]byte, error) {
	var exclude []string
	if dropNode != "" {
		exclude = []string{dropNode}
	}
	cfg, err := c.effective(map[string][]byte{c.node(): main}, exclude...)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, node := range cfg.Files {
		data := main
		if node != c.node() {
			if data, _, err = readConfig(c.host(node)); err != nil {
				return nil, err
			}
		}
		removed, changed, err := containerd.RemoveRuntime(data, c.options(), ch)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", node, err)
		}
		if changed {
			out[node] = removed
		}
	}
	return out, nil
}

// stillRegistered says where containerd would still find gpurun's
// handler, or a default naming it, after the uninstall wrote main and
// others and removed dropNode: nil when it would not.
func (c Containerd) stillRegistered(main []byte, dropNode string, others map[string][]byte) error {
	overlay := map[string][]byte{c.node(): main}
	maps.Copy(overlay, others)
	var exclude []string
	if dropNode != "" {
		exclude = []string{dropNode}
	}
	cfg, err := c.effective(overlay, exclude...)
	if err != nil {
		return fmt.Errorf("uninstall: containerd would not read its configuration: %w", err)
	}
	handlers := []string{"plugins", cfg.RuntimePluginID(), "containerd"}
	if _, ok := cfg.Runtime(RuntimeName); ok {
		file, line := cfg.Defines(append(handlers, "runtimes", RuntimeName)...)
		return fmt.Errorf("uninstall: containerd still reads runtime handler %s from %s:%d, which gpurun could not edit: remove that table there, then restart containerd", RuntimeName, file, line)
	}
	if cfg.DefaultRuntime() == RuntimeName {
		file, line := cfg.Defines(append(handlers, "default_runtime_name")...)
		return fmt.Errorf("uninstall: default_runtime_name in %s:%d still names %s, and containerd's CRI plugin does not start without that handler: set it to runc (or the runtime that was the default), then restart containerd", file, line, RuntimeName)
	}
	return nil
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
