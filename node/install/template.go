package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/internal/hostpath"
)

// BaseTemplateLine starts a template gpurun creates: it renders k3s's (and
// RKE2's) own default configuration, the template they name "base" (k3s
// and RKE2 define it since their September 2023 releases: v1.24.17+k3s1,
// v1.25.13+k3s1, v1.26.8+k3s1, v1.27.5+k3s1, v1.28.1+k3s1).
const BaseTemplateLine = `{{ template "base" . }}`

// TemplateChange is what an install added to a k3s or RKE2 containerd
// template: exactly the text appended, so that an uninstall takes out
// those bytes and no others.
type TemplateChange struct {
	// Path is the template (a node path).
	Path string `json:"path"`
	// Created says gpurun created the template: Added is then the whole
	// file, BaseTemplateLine and gpurun's block.
	Created bool `json:"created,omitempty"`
	// Added is the text appended (or the file written).
	Added string `json:"added"`
}

// block is the text of gpurun's tables in Added.
func (t TemplateChange) block() string {
	if t.Created {
		return strings.TrimPrefix(t.Added, BaseTemplateLine+"\n")
	}
	return t.Added
}

// AddToTemplate appends block (gpurun's marked TOML tables, as the
// containerd config editor appends them to the config the template
// renders) to a template, or makes a new template that extends k3s's base
// template with it when there is none. Every byte of an existing template
// stays; the rendered config is the template's rendering followed by
// block, since block holds no template actions.
func AddToTemplate(tmpl []byte, existed bool, block string) ([]byte, TemplateChange, error) {
	if strings.Contains(block, "{{") || strings.Contains(block, "}}") {
		return nil, TemplateChange{}, fmt.Errorf("gpurun's tables hold a template delimiter ({{ or }}): %q", block)
	}
	if !existed {
		added := BaseTemplateLine + "\n" + block
		return []byte(added), TemplateChange{Created: true, Added: added}, nil
	}
	out := make([]byte, 0, len(tmpl)+len(block))
	out = append(append(out, tmpl...), block...)
	return out, TemplateChange{Added: block}, nil
}

// RemoveFromTemplate undoes AddToTemplate: it takes the recorded text out
// of the template (the last place it occurs, where an administrator may
// have appended more since). remove says the file is to be removed:
// gpurun created it and nothing but the base line is left. found is false
// when the recorded text is not in the template (changed by hand): it is
// then returned as it is.
func RemoveFromTemplate(tmpl []byte, ch TemplateChange) (out []byte, remove, found bool) {
	s := string(tmpl)
	if ch.Created && s == ch.Added {
		return nil, true, true
	}
	b := ch.block()
	i := strings.LastIndex(s, b)
	if b == "" || i < 0 {
		return tmpl, false, false
	}
	rest := s[:i] + s[i+len(b):]
	if ch.Created && strings.TrimSpace(rest) == BaseTemplateLine {
		return nil, true, true
	}
	return []byte(rest), false, true
}

// layout is the distribution's file layout.
func (c Containerd) layout() Layout { return Layout{Distribution: c.Distribution} }

// generatedNode is the config.toml a k3s or RKE2 node generates: the
// ConfigPath when one other than containerd's default is given.
func (c Containerd) generatedNode() string {
	if c.ConfigPath != "" && c.ConfigPath != DefaultContainerdConfig {
		return c.ConfigPath
	}
	return c.layout().Config()
}

// templateNode picks the template to edit: the version 3 template where
// there is one, else the version 2 one where there is one, else the one
// for the version of the config the node generates now.
func (c Containerd) templateNode(generated []byte) (string, error) {
	l := c.layout()
	for _, t := range []string{l.TemplateV3(), l.Template()} {
		if _, err := os.Stat(c.host(t)); err == nil {
			return t, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("stat %s: %w", c.host(t), err)
		}
	}
	v, err := containerd.Version(generated)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", c.host(c.generatedNode()), err)
	}
	if v >= 3 {
		return l.TemplateV3(), nil
	}
	return l.Template(), nil
}

// recordedTemplate finds the template an install recorded.
func (c Containerd) recordedTemplate(st state) (string, record, bool) {
	l := c.layout()
	for _, t := range []string{l.TemplateV3(), l.Template()} {
		if rec, ok := st["containerd"][c.host(t)]; ok && rec.Template != nil {
			return c.host(t), rec, true
		}
	}
	return "", record{}, false
}

// containerdTemplate is Install and Uninstall of a k3s or RKE2 node's
// containerd: gpurun's tables go into the distribution's template, and the
// config.toml it generates is read, never written. As an engine of the
// install sequence (see sequence.go), its change is containerd's editor's
// change to that config, as the template's block.
type containerdTemplate struct{ Containerd }

// templateAdd is an install's change to a template: containerd's
// editor's change (ch), as the text added to the template (tc).
type templateAdd struct {
	ch containerd.Change
	tc TemplateChange
}

// key is containerd's engine in the state file.
func (containerdTemplate) key() string { return "containerd" }

// edit reads the generated config and the template and works the install
// out (templateEdit); a block the record names that is still in the
// template is no change.
func (c containerdTemplate) edit(st state) (change[templateAdd], error) {
	var none change[templateAdd]
	dist := string(c.Distribution)
	if c.DropInDir != "" {
		return none, fmt.Errorf("--drop-in does not apply to %s: gpurun's tables go into its containerd template", dist)
	}
	genPath := c.host(c.generatedNode())
	gen, existed, err := readConfig(genPath)
	if err != nil {
		return none, err
	}
	if !existed {
		return none, fmt.Errorf("%s does not exist: start %s once, so that it writes its containerd config, then install", genPath, dist)
	}
	tmplNode, err := c.templateNode(gen)
	if err != nil {
		return none, err
	}
	tmplPath := c.host(tmplNode)
	tmpl, tmplExisted, err := readConfig(tmplPath)
	if err != nil {
		return none, err
	}
	if rec, ok := st[c.key()][tmplPath]; ok && rec.Template != nil && strings.Contains(string(tmpl), rec.Template.block()) {
		return change[templateAdd]{path: tmplPath, files: []fileDiff{{tmplPath, tmpl, tmpl, tmplExisted}}}, nil
	}
	if bytes.Contains(tmpl, []byte(containerd.Marker)) {
		return none, fmt.Errorf("%s holds a block of gpurun's that %s does not record: take it out by hand, then install again", tmplPath, c.statePath())
	}
	out, ch, tc, err := c.templateEdit(gen, tmpl, tmplExisted, tmplPath)
	if err != nil {
		return none, err
	}
	tc.Path = tmplNode
	return change[templateAdd]{path: tmplPath, files: []fileDiff{{tmplPath, tmpl, out, tmplExisted}}, chain: ch.Chain, changed: true, own: templateAdd{ch, tc}}, nil
}

// unchanged is Options.nothingToDo.
func (c containerdTemplate) unchanged(st state, ch change[templateAdd]) error {
	return c.nothingToDo(st, c.key(), ch.path, ch.old, ch.hadOld)
}

// keep makes the template's record anew: an install that finds gpurun's
// block gone starts again (nothing of the old record is merged).
func (c containerdTemplate) keep(ch change[templateAdd]) (record, error) {
	f, tc := ch.files[0], ch.own.tc
	return newRecord[containerd.Change](c.Options, ch.path, f.before, f.existed, ch.old, ch.hadOld, ch.own.ch, nil, record{Template: &tc, Policy: ch.pol.change})
}

// report says what was added, and when the distribution renders it.
func (c containerdTemplate) report(_ state, ch change[templateAdd], rec record) error {
	what := "added to"
	if ch.own.tc.Created {
		what = "created"
	}
	c.reportLine(ch.path, fmt.Sprintf("%s with runtime handler %s (%s, config version %d); %s writes it into %s when it starts", what, RuntimeName, c.RuntimePath, ch.own.ch.Version, c.Distribution, c.generatedNode()), rec.Backup)
	return nil
}

// apply restarts the distribution (or says how) after an install.
func (c containerdTemplate) apply(_ change[templateAdd], dryRun bool) error {
	if dryRun {
		return nil
	}
	return c.restart()
}

// templateEdit works out what an install adds to a distribution's
// template: containerd's editor's change to the config the distribution
// renders now (gen), which must be tables added at its end, as the
// template's block; it verifies that containerd would see gpurun as
// asked in the config rendered with that block.
func (c Containerd) templateEdit(gen, tmpl []byte, tmplExisted bool, tmplPath string) ([]byte, containerd.Change, TemplateChange, error) {
	dist := string(c.Distribution)
	genNode := c.generatedNode()
	genPath := c.host(genNode)
	// The generated config may still hold gpurun's block, rendered from a
	// template an uninstall has taken it out of since, the distribution
	// not restarted (a rollout of the node agent: the old agent uninstalls
	// as it stops, the new one installs). gpurun never writes that file,
	// and the template holds no block of gpurun's now: the install is
	// worked out on the config the distribution renders from the template
	// as it is, which is the one without that block.
	var overlay map[string][]byte
	if bytes.Contains(gen, []byte(containerd.Marker)) {
		base, changed, err := containerd.Uninstall(gen, c.options(), containerd.Change{})
		if err != nil {
			return nil, containerd.Change{}, TemplateChange{}, fmt.Errorf("%s holds a block of gpurun's, rendered from a template that no longer has it: %w", genPath, err)
		}
		if changed {
			gen, overlay = base, map[string][]byte{genNode: base}
		}
	}
	effective, err := c.effective(overlay)
	if err != nil {
		return nil, containerd.Change{}, TemplateChange{}, fmt.Errorf("install into %s: containerd cannot read %s as it is: %w", tmplPath, genPath, err)
	}
	opts := c.options()
	opts.Effective = effective
	after, ch, err := containerd.Install(gen, opts)
	if err != nil {
		return nil, ch, TemplateChange{}, fmt.Errorf("install into %s (from %s): %w", tmplPath, genPath, err)
	}
	if !ch.Changed {
		return nil, ch, TemplateChange{}, fmt.Errorf("%s already defines runtime handler %s, which gpurun does not record: take it out of %s, restart %s, then install again", genPath, RuntimeName, tmplPath, dist)
	}
	if !bytes.HasPrefix(after, gen) {
		// The change is not an addition at the end: a template can only
		// add tables after what it renders.
		if c.SetAsDefault {
			return nil, ch, TemplateChange{}, fmt.Errorf("%s writes the CRI plugin's containerd table itself, so its template cannot add default_runtime_name to it: install without --set-as-default (RuntimeClass gpurun), or set default-runtime: %s in /etc/rancher/%s/config.yaml", dist, RuntimeName, dist)
		}
		return nil, ch, TemplateChange{}, fmt.Errorf("%s already defines runtime handler %s, which gpurun does not record: take it out of %s, restart %s, then install again", genPath, RuntimeName, tmplPath, dist)
	}
	out, tc, err := AddToTemplate(tmpl, tmplExisted, string(after[len(gen):]))
	if err != nil {
		return nil, ch, tc, fmt.Errorf("install into %s: %w", tmplPath, err)
	}
	// What the distribution will render: the config it renders now, then
	// gpurun's block.
	if err := c.verify(effective, after, "", nil); err != nil {
		return nil, ch, tc, fmt.Errorf("install into %s: %w", tmplPath, err)
	}
	return out, ch, tc, nil
}

// undo works out taking exactly what the install added out of the
// template the state records.
func (c containerdTemplate) undo() (*undoPlan[containerdRemoval], error) {
	st, err := loadState(c.statePath())
	if err != nil {
		return nil, err
	}
	tmplPath, rec, ok := c.recordedTemplate(st)
	if !ok {
		l := c.layout()
		if t := l.TemplateWithBlock(c.HostRoot); t != "" {
			fmt.Fprintf(c.Out, "%s: holds a block of gpurun's, but %s records no install: left as it is; take it out by hand\n", c.host(t), c.statePath())
			return nil, nil
		}
		fmt.Fprintf(c.Out, "%s: no gpurun install recorded in %s; nothing to do\n", l.ContainerdDir(), c.statePath())
		return nil, nil
	}
	tmpl, existed, err := readConfig(tmplPath)
	if err != nil {
		return nil, err
	}
	out, remove, found := RemoveFromTemplate(tmpl, *rec.Template)
	f := fileUndo{path: tmplPath, before: tmpl, after: out}
	switch {
	case remove:
		f.remove = true
		f.would = fmt.Sprintf("would remove %s (created by install)", tmplPath)
		f.done = fmt.Sprintf("removed %s (created by install)", tmplPath)
	case !existed || !found:
		f.done = tmplPath + ": gpurun's block is not there (changed by hand?); left as it is"
	default:
		f.write, f.done = true, tmplPath+": gpurun runtime removed"
	}
	return &undoPlan[containerdRemoval]{st: st, path: tmplPath, rec: rec, recorded: true, files: []fileUndo{f}}, nil
}

// undone restarts the distribution, which renders the template anew.
func (c containerdTemplate) undone(*undoPlan[containerdRemoval]) error { return c.restart() }

// TemplateWithBlock returns the k3s or RKE2 containerd template (a node
// path) that holds a block of gpurun's (containerd.Marker), "" when
// neither does: config-v3.toml.tmpl, then config.toml.tmpl.
func (l Layout) TemplateWithBlock(hostRoot string) string {
	for _, t := range []string{l.TemplateV3(), l.Template()} {
		if data, _, _ := readConfig(hostpath.Join(hostRoot, t)); bytes.Contains(data, []byte(containerd.Marker)) {
			return t
		}
	}
	return ""
}

// ConfigRecord returns the file an install of containerd edited (here,
// under HostRoot) and the backup it recorded: for k3s and RKE2 their
// template (TemplateRecord), else the config. ok is false when the state
// file records no install of it.
func (c Containerd) ConfigRecord() (path, backup string, ok bool) {
	if c.Distribution.Templated() {
		return c.TemplateRecord()
	}
	st, err := loadState(c.statePath())
	if err != nil {
		return c.configPath(), "", false
	}
	rec, ok := st["containerd"][c.configPath()]
	return c.configPath(), rec.Backup, ok
}

// TemplateRecord returns the template path (here, under HostRoot) and the
// backup a k3s or RKE2 install recorded, if any.
func (c Containerd) TemplateRecord() (path, backup string, ok bool) {
	st, err := loadState(c.statePath())
	if err != nil {
		return "", "", false
	}
	p, rec, ok := c.recordedTemplate(st)
	return p, rec.Backup, ok
}

// EmbeddedContainerd is what gpurun can tell about the containerd that
// k3s or RKE2 run on a node.
type EmbeddedContainerd struct {
	// Binary is the embedded containerd binary found (a node path; "":
	// none).
	Binary string
	// Release is the embedded containerd's release ("" when unknown).
	Release string
	// Generation says whose config rules apply (containerd 1.x or 2.x).
	Generation containerd.Generation
	// NRI is the NRI plugin's configuration as the generated config and
	// the release leave it.
	NRI containerd.NRI
}

// Binary returns the embedded containerd binary on the node under
// hostRoot (a node path), "" when there is none.
func (l Layout) Binary(hostRoot string) string {
	return Containerd{Options: Options{HostRoot: hostRoot}, Distribution: l.Distribution}.binary()
}

// Embedded reads the generated config of a k3s or RKE2 node to tell
// whether NRI is enabled. The containerd release decides the defaults:
// release, when known (a release recorded earlier), else the embedded
// binary is asked (containerd --version, chrooted into hostRoot).
func Embedded(ctx context.Context, hostRoot string, l Layout, release string) (EmbeddedContainerd, error) {
	e := EmbeddedContainerd{Binary: l.Binary(hostRoot)}
	o := containerd.LoadOptions{Root: hostRoot, Release: release}
	if release == "" {
		o.Containerd = e.Binary
	}
	cfg, err := containerd.Load(ctx, l.Config(), o)
	if err != nil {
		return e, err
	}
	if !cfg.Exists {
		return e, fmt.Errorf("%s does not exist: %s has not started on this node", l.Config(), l.Distribution)
	}
	e.Release, e.Generation, e.NRI = cfg.Release, cfg.Generation, cfg.NRI()
	return e, nil
}
