package containerd

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/gpurun/gpurun/internal/cfgtree"
	"github.com/gpurun/gpurun/internal/tomledit"
)

// Handler describes the runtime handler that Install and
// DropIn register in containerd's CRI plugin.
type Handler struct {
	// Name is the runtime handler name, normally "gpurun". It must be a TOML
	// bare key (ASCII letters, digits, '-' and '_') and must not be "runc".
	Name string
	// BinaryName is the absolute path of gpurun-runtime; it becomes
	// options.BinaryName of the runtime.
	BinaryName string
	// SetAsDefault also makes Name the CRI plugin's default_runtime_name.
	SetAsDefault bool
	// PodAnnotations are the pod annotations (globs such as "gpurun.io/*")
	// containerd passes to the runtime; they are merged with those of the
	// runtime whose settings are copied.
	PodAnnotations []string
	// Effective, when set, is the configuration as containerd reads it now
	// (the main config and the files it imports, engine/containerd):
	// the runtime gpurun stands in for is then its default handler, even
	// when a drop-in sets it, and that runtime's settings are copied from
	// wherever they are set. Without it only the edited file is read.
	Effective *Config
}

// Change records what an install did, for the report and for
// Uninstall. An install that changes nothing (Changed false)
// carries no undo information: keep the record of the install that made the
// change.
type Change struct {
	// Changed reports whether the output differs from the input. For
	// DropIn it reports whether the main config changed; compare
	// the drop-in with the file on disk.
	Changed bool
	// Version is the config version: 2 (containerd 1.x), 3 (containerd
	// 2.0-2.2) or 4 (containerd 2.3 and later). An empty config counts as 2.
	Version int
	// AddedRuntime reports that the runtimes.<Name> tables were added (in
	// the block Uninstall removes). A version 2 config that
	// defined no runtime also gets a runtimes.runc table there, because
	// containerd 1.x replaces its built-in runc with the config's runtimes.
	// When the runtime existed already, only its options.BinaryName was set.
	AddedRuntime bool
	// SetDefault reports that default_runtime_name was set to Name.
	SetDefault bool
	// PreviousDefault is the value default_runtime_name had, when
	// HadDefaultKey; without the key containerd's default is "runc".
	PreviousDefault string
	// HadDefaultKey reports whether default_runtime_name was present.
	HadDefaultKey bool
	// Chain is the low-level runtime gpurun-runtime must exec so that an
	// existing wrapper keeps working: the options.BinaryName of the runtime
	// whose settings were copied (for example
	// /usr/bin/nvidia-container-runtime when "nvidia" was the default), or
	// "" for plain runc.
	Chain string
	// CopiedFrom is the runtime whose settings were copied: the default
	// runtime handler when it is a runc-type runtime defined in the config,
	// else "runc" (containerd's built-in runc when the config does not
	// define it: nothing to copy).
	CopiedFrom string
}

// marker starts the block of tables an install appends, and ends the
// imports line it adds; uninstall looks for it.
const marker = "# added by gpurun install; remove with gpurun uninstall containerd"

// Marker is the comment that starts gpurun's block: a file that holds it
// holds gpurun's tables.
const Marker = marker

// copiedRuntimeKey reports whether a runtime setting other than options
// is copied from the runtime gpurun replaces. runtime_type is always
// io.containerd.runc.v2 and pod_annotations are merged; runtime_path,
// runtime_engine and runtime_root select other shims and are not copied.
func copiedRuntimeKey(k string) bool {
	switch k {
	case "privileged_without_host_devices",
		"privileged_without_host_devices_all_devices_allowed",
		"base_runtime_spec",
		"cni_conf_dir",
		"cni_max_conf_num",
		"container_annotations",
		"sandbox_mode",
		"sandboxer",
		"snapshotter",
		"cgroup_writable",
		"disable_pause_image_pull",
		"io_type",
		"treat_ro_mounts_as_rro":
		return true
	}
	return false
}

// Version returns the version of a containerd config: 2
// (containerd 1.x), 3 (containerd 2.0-2.2) or 4 (containerd 2.3 and later,
// same CRI layout as 3). An empty config (nothing but blank lines and
// comments) means containerd's defaults and counts as 2, the version both
// containerd 1.x and 2.x accept. A config without a version key is version 1,
// which is not supported.
func Version(data []byte) (int, error) {
	d, err := parse(data)
	if err != nil {
		return 0, err
	}
	return d.version, nil
}

// Install registers o.Name as a runc-type runtime handler running
// o.BinaryName in a containerd config, and with o.SetAsDefault makes it the
// default. New tables go to the end of the file after a marker comment;
// default_runtime_name is replaced in place, or inserted after the
// [... .containerd] header, or appended with the new tables. The settings of
// the runtime gpurun replaces (the default runtime handler, else runc) are
// copied, and its BinaryName becomes Chain. A runtime that exists already only
// gets its options.BinaryName set. Every other byte is kept, a second install
// is a no-op, and the result is checked to parse and to change nothing but
// gpurun's settings.
func Install(data []byte, o Handler) ([]byte, Change, error) {
	if err := o.validate(); err != nil {
		return nil, Change{}, err
	}
	d, err := parse(data)
	if err != nil {
		return nil, Change{}, err
	}
	return install(d, d, o)
}

// Uninstall undoes Install: it removes the block of
// tables the install appended (found by its marker comment) and, when
// default_runtime_name still names o.Name, restores c.PreviousDefault or
// removes the key when c.HadDefaultKey is false. It does so when c.SetDefault,
// or, when c records no change (lost, or that of a second install), when the
// runtime is removed: a default naming a missing runtime would stop the CRI
// plugin. A runtime that existed before the install keeps the BinaryName the
// install set. install followed by uninstall returns the original bytes.
func Uninstall(data []byte, o Handler, c Change) ([]byte, bool, error) {
	d, handlers, rt, err := forRemoval(data, o)
	if err != nil {
		return nil, false, err
	}
	if d == nil {
		return data, false, nil
	}
	runc := cfgtree.Join(handlers, "runtimes", "runc")
	ours := func(path []string) bool {
		return slices.Equal(path, handlers) || slices.Equal(path, rt) || slices.Equal(path, cfgtree.Join(rt, "options")) || slices.Equal(path, runc)
	}
	var edits []tomledit.Edit
	removedRuntime := false
	blocks := d.markerBlocks(ours, true)
	for _, b := range blocks {
		edits = append(edits, tomledit.Edit{Start: b.from, End: b.to})
		if b.hasTable(rt) {
			removedRuntime = true
		}
	}
	inBlock := func(off int) bool {
		for _, b := range blocks {
			if off >= b.from && off < b.to {
				return true
			}
		}
		return false
	}
	defPath := cfgtree.Join(handlers, "default_runtime_name")
	if i := d.FindKV(defPath); i >= 0 && !inBlock(d.KVs[i].Start) {
		kv := d.KVs[i]
		// Without a record of the install (c zero, or that of a second
		// install), a default naming the removed runtime goes too.
		if kv.Value.Kind == unstable.String && kv.Value.Str == o.Name && (c.SetDefault || removedRuntime && !c.Changed) {
			e, err := d.restoreDefault(kv, c.HadDefaultKey, c.PreviousDefault)
			if err != nil {
				return nil, false, err
			}
			edits = append(edits, e)
		}
	}
	if len(edits) == 0 {
		return data, false, nil
	}
	out, err := apply(d.Data, edits)
	if err != nil {
		return nil, false, err
	}
	allowed := [][]string{rt, defPath, {"version"}, {"imports"}}
	for _, b := range blocks {
		if b.hasTable(runc) {
			allowed = append(allowed, runc)
		}
	}
	if err := d.CheckOnly(out, allowed); err != nil {
		return nil, false, err
	}
	return out, !bytes.Equal(out, data), nil
}

// DropIn registers the runtime in a drop-in file instead: it returns
// the main config with an imports entry for dropInPath and the drop-in's
// content. The entry goes last in imports, so that containerd reads the
// drop-in after every other file: an entry already there that is not last
// is moved to the end (another tool's drop-in imported after it would
// otherwise override gpurun's default); a glob that covers dropInPath
// leaves imports as they are. containerd 2.x (version 3 and 4) merges
// imported files key by key, so the drop-in holds only gpurun's tables,
// with settings copied from the main config. containerd 1.x (version 2)
// replaces a plugin's whole section with the imported file's, so there the
// drop-in holds a copy of the whole CRI plugin section containerd reads
// without it plus gpurun's tables: the main config's, or, when o.Effective
// says another file read later replaces it (NVIDIA's toolkit writes
// conf.d/99-nvidia.toml with a copy of the section and its nvidia,
// nvidia-cdi and nvidia-legacy handlers), that file's — every handler it
// defines stays. An install run again after that file changed copies it
// again. The drop-in has the main config's version (containerd 2.x ignores
// a drop-in with a newer one).
func DropIn(main []byte, dropInPath string, o Handler) (newMain, dropIn []byte, c Change, err error) {
	if err := o.validate(); err != nil {
		return nil, nil, Change{}, err
	}
	if err := validImport(dropInPath); err != nil {
		return nil, nil, Change{}, err
	}
	m, err := parse(main)
	if err != nil {
		return nil, nil, Change{}, err
	}
	newMain, err = addImport(m, dropInPath)
	if err != nil {
		return nil, nil, Change{}, err
	}
	var base strings.Builder
	base.WriteString("# gpurun runtime handler for containerd, imported by the main config.\n")
	base.WriteString("# Written by gpurun install; gpurun uninstall containerd removes it.\n")
	fmt.Fprintf(&base, "version = %d\n", m.version)
	cri := []string{"plugins", RuntimePluginID(m.version)}
	from, fromName := m, "the main config"
	if e := o.Effective; m.version == 2 && e != nil && e.Generation == Containerd1 {
		if f, ok := e.lastDefining(cri...); ok && f.path != e.Path && f.path != dropInPath && (f.version == 0 || f.version == 2) {
			from, fromName = &doc{Doc: f.doc, version: 2}, f.path
		}
	}
	if m.version == 2 {
		sec, err := copySection(from, cri)
		if err != nil {
			return nil, nil, Change{}, err
		}
		if sec != "" {
			base.WriteString("\n# containerd 1.x replaces a plugin's whole section with an imported file's:\n")
			fmt.Fprintf(&base, "# this is a copy of the CRI plugin section of %s.\n", fromName)
			base.WriteString(sec)
		}
	}
	b, err := parse([]byte(base.String()))
	if err != nil {
		return nil, nil, Change{}, fmt.Errorf("containerd drop-in: %w", err)
	}
	src := m
	if m.version == 2 {
		want, _ := cfgtree.Get(from.Tree, cri...)
		got, _ := cfgtree.Get(b.Tree, cri...)
		if p, ok := cfgtree.Equal(want, got); !ok {
			return nil, nil, Change{}, fmt.Errorf("containerd config: cannot copy the CRI plugin section into a drop-in (differs at %s); install in place instead", tomledit.PathText(cfgtree.Join(cri, p...)))
		}
		// A copy of gpurun's own handler in that section (NVIDIA's
		// toolkit copies the whole section, gpurun's handler and default
		// included, into its drop-in) is not kept: gpurun's handler is
		// made anew, standing in for the default the section has.
		if stripped, changed, err := RemoveRuntime(b.Data, o, Change{}); err != nil {
			return nil, nil, Change{}, fmt.Errorf("containerd drop-in: %w", err)
		} else if changed {
			if b, err = parse(stripped); err != nil {
				return nil, nil, Change{}, fmt.Errorf("containerd drop-in: %w", err)
			}
		}
		src = b
	}
	dropIn, c, err = install(b, src, o)
	if err != nil {
		return nil, nil, Change{}, err
	}
	c.Changed = !bytes.Equal(newMain, main)
	return newMain, dropIn, c, nil
}

// UninstallDropIn removes dropInPath from the main config's
// imports (the line, when the install added it; a glob entry that covers the
// drop-in stays). The entry goes whenever present, because an import of a
// missing file stops containerd; c is not needed for that and is accepted for
// symmetry with Uninstall. Deleting the drop-in file is the
// caller's.
func UninstallDropIn(main []byte, dropInPath string, c Change) (newMain []byte, changed bool, err error) {
	_ = c
	d, err := parse(main)
	if err != nil {
		return nil, false, err
	}
	if d.empty {
		return main, false, nil
	}
	var edits []tomledit.Edit
	var blocks []block
	for _, b := range d.markerBlocks(func([]string) bool { return false }, true) {
		// Only the block written into an empty main config; not the
		// marker of tables Install added.
		if slices.Contains(b.rootKeys, "imports") {
			blocks = append(blocks, b)
			edits = append(edits, tomledit.Edit{Start: b.from, End: b.to})
		}
	}
	if i := d.FindKV([]string{"imports"}); i >= 0 {
		kv := d.KVs[i]
		inBlock := false
		for _, b := range blocks {
			if kv.Start >= b.from && kv.Start < b.to {
				inBlock = true
			}
		}
		if !inBlock && kv.Value.Kind == unstable.Array {
			if e := d.removeImport(i, dropInPath); e != nil {
				edits = append(edits, *e)
			}
		}
	}
	if len(edits) == 0 {
		return main, false, nil
	}
	out, err := apply(d.Data, edits)
	if err != nil {
		return nil, false, err
	}
	if err := d.CheckOnly(out, [][]string{{"imports"}, {"version"}}); err != nil {
		return nil, false, err
	}
	return out, !bytes.Equal(out, main), nil
}

// RemoveRuntime takes runtime handler o.Name out of a config file that
// holds it without gpurun's marker: a file another tool rewrote or wrote
// from containerd's configuration (NVIDIA's toolkit drops comments when
// it rewrites config.toml, and copies the whole CRI section, gpurun's
// handler included, into its drop-in). It removes every table and key
// under runtimes.<Name>, and a default_runtime_name naming it, which would
// stop the CRI plugin once the handler is gone: that key goes back to
// c.PreviousDefault when c.HadDefaultKey, else it is removed. Every other
// byte is kept; changed is false when the file does not hold the handler.
func RemoveRuntime(data []byte, o Handler, c Change) (out []byte, changed bool, err error) {
	d, handlers, rt, err := forRemoval(data, o)
	if err != nil {
		return nil, false, err
	}
	if d == nil {
		return data, false, nil
	}
	under := func(parts []tomledit.Part) bool {
		return len(parts) >= len(rt) && tomledit.NamesEqual(parts[:len(rt)], rt)
	}
	var edits []tomledit.Edit
	removed := map[int]bool{}
	for i, e := range d.Exprs {
		if (e.Kind != unstable.Table && e.Kind != unstable.ArrayTable) || !under(e.Path) {
			continue
		}
		end := len(d.Data)
		for j := i + 1; j < len(d.Exprs); j++ {
			if k := d.Exprs[j].Kind; k == unstable.Table || k == unstable.ArrayTable {
				end = d.Exprs[j].LineStart
				break
			}
		}
		edits = append(edits, tomledit.Edit{Start: e.LineStart, End: end})
		removed[i] = true
	}
	for _, kv := range d.KVs {
		if !under(kv.Path) && !tomledit.NamesEqual(kv.Path, rt) {
			continue
		}
		if h := d.Exprs[kv.Expr].Header; h >= 0 && removed[h] {
			continue
		}
		if kv.Nested {
			return nil, false, fmt.Errorf("containerd config line %d: %s is inside an inline table; remove it by hand", d.Line(kv.Start), tomledit.PathText(rt))
		}
		from, to := d.LineRemoval(kv.Expr)
		edits = append(edits, tomledit.Edit{Start: from, End: to})
	}
	defPath := cfgtree.Join(handlers, "default_runtime_name")
	if i := d.FindKV(defPath); i >= 0 && d.KVs[i].Value.Kind == unstable.String && d.KVs[i].Value.Str == o.Name {
		e, err := d.restoreDefault(d.KVs[i], c.HadDefaultKey && c.PreviousDefault != o.Name, c.PreviousDefault)
		if err != nil {
			return nil, false, err
		}
		edits = append(edits, e)
	}
	allowed := [][]string{rt, defPath}
	for _, kv := range d.copiedAnnotations(handlers, o.Name) {
		edits = append(edits, tomledit.Edit{Start: kv.Value.Start, End: kv.Value.End, Text: "[]"})
		allowed = append(allowed, names(kv.Path))
	}
	if len(edits) == 0 {
		return data, false, nil
	}
	if out, err = apply(d.Data, edits); err != nil {
		return nil, false, err
	}
	if err := d.CheckOnly(out, allowed); err != nil {
		return nil, false, err
	}
	return out, !bytes.Equal(out, data), nil
}

// copiedAnnotations finds the pod_annotations of other handlers that
// are a copy of handler name's, in a file that holds both: nvidia-ctk
// runtime configure --set-as-default copies the default handler's settings
// into its nvidia handler, and with gpurun the default, nvidia's then
// passes gpurun's annotations. The toolkit alone writes none (an empty
// list), which is what they go back to with gpurun's handler.
func (d *doc) copiedAnnotations(handlers []string, name string) []tomledit.KeyValue {
	runtimes := cfgtree.Join(handlers, "runtimes")
	ours, ok := cfgtree.Get(d.Tree, cfgtree.Join(runtimes, name, "pod_annotations")...)
	if list, isList := ours.([]any); !ok || !isList || len(list) == 0 {
		return nil
	}
	var copies []tomledit.KeyValue
	for _, kv := range d.KVs {
		p := kv.Path
		if kv.Nested || len(p) != len(runtimes)+2 || !tomledit.NamesEqual(p[:len(runtimes)], runtimes) || p[len(runtimes)].Name == name || p[len(p)-1].Name != "pod_annotations" {
			continue
		}
		if theirs, ok := cfgtree.Get(d.Tree, names(p)...); ok && reflect.DeepEqual(theirs, ours) {
			copies = append(copies, kv)
		}
	}
	return copies
}

// names are a key's parts by name.
func names(parts []tomledit.Part) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.Name
	}
	return out
}

// forRemoval parses data for taking handler o out of it, and returns the
// document, the path of the CRI plugin's containerd table and that of o's
// runtime table; a nil document (and no error) is a config with nothing in
// it, left as it is.
func forRemoval(data []byte, o Handler) (d *doc, handlers, rt []string, err error) {
	if err := validName(o.Name); err != nil {
		return nil, nil, nil, err
	}
	if d, err = parse(data); err != nil {
		return nil, nil, nil, err
	}
	if d.empty {
		return nil, nil, nil, nil
	}
	handlers = []string{"plugins", RuntimePluginID(d.version), "containerd"}
	return d, handlers, cfgtree.Join(handlers, "runtimes", o.Name), nil
}

// setString sets key in table to a string value: an edit of the value
// already there (keeping its quoting; none when it is value already) or a
// new line in the table. ok is false when the table has no body of its own
// to add the line to, and the caller writes one. A value there that is not
// a string is an error naming the line and what (the key as the admin
// knows it).
func (d *doc) setString(table []string, key, value, what string) (edits []tomledit.Edit, ok bool, err error) {
	if i := d.FindKV(cfgtree.Join(table, key)); i >= 0 {
		kv := d.KVs[i]
		if kv.Value.Kind != unstable.String {
			return nil, false, fmt.Errorf("containerd config line %d: %s is not a string", d.Line(kv.Start), what)
		}
		if kv.Value.Str == value {
			return nil, true, nil
		}
		old := string(d.Data[kv.Value.Start:kv.Value.End])
		return []tomledit.Edit{{Start: kv.Value.Start, End: kv.Value.End, Text: tomledit.QuoteLike(old, value)}}, true, nil
	}
	e, ok, err := d.SetKey(table, key, tomledit.Quote(value))
	if err != nil || !ok {
		return nil, ok, err
	}
	return []tomledit.Edit{e}, true, nil
}

// restoreDefault is the edit that takes default_runtime_name (kv, which
// names a handler being removed) back to what it was before the install:
// previous where restore says the install recorded one worth restoring,
// else the key's removal (it cannot be removed from an inline table).
func (d *doc) restoreDefault(kv tomledit.KeyValue, restore bool, previous string) (tomledit.Edit, error) {
	switch {
	case restore:
		old := string(d.Data[kv.Value.Start:kv.Value.End])
		return tomledit.Edit{Start: kv.Value.Start, End: kv.Value.End, Text: tomledit.QuoteLike(old, previous)}, nil
	case kv.Nested:
		return tomledit.Edit{}, fmt.Errorf("containerd config line %d: default_runtime_name is inside an inline table; remove it by hand", d.Line(kv.Start))
	default:
		from, to := d.LineRemoval(kv.Expr)
		return tomledit.Edit{Start: from, End: to}, nil
	}
}

// validate checks the options an install needs.
func (o Handler) validate() error {
	if err := validName(o.Name); err != nil {
		return err
	}
	if !filepath.IsAbs(o.BinaryName) {
		return fmt.Errorf("containerd: BinaryName %q is not an absolute path", o.BinaryName)
	}
	if !tomledit.PlainString(o.BinaryName) {
		return fmt.Errorf("containerd: BinaryName %q has invalid UTF-8 or control characters", o.BinaryName)
	}
	for _, a := range o.PodAnnotations {
		if a == "" || !tomledit.PlainString(a) {
			return fmt.Errorf("containerd: pod annotation %q is empty or has invalid characters", a)
		}
	}
	return nil
}

func validName(name string) error {
	if !tomledit.Bare(name) {
		return fmt.Errorf("containerd: runtime name %q must be letters, digits, '-' or '_'", name)
	}
	if name == "runc" {
		return errors.New(`containerd: runtime name "runc" would replace runc itself`)
	}
	return nil
}

func validImport(p string) error {
	if !filepath.IsAbs(p) || !tomledit.PlainString(p) {
		return fmt.Errorf("containerd: drop-in path %q must be an absolute path without control characters", p)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Install.

// table is a table to append: its path and its lines (without
// indentation or newline).
type table struct {
	path  []string
	lines []string
}

// install edits d, reading the runtime to copy and the current default
// from src (d itself, or the main config for a drop-in): gpurun's runtime
// (addRuntime), then the default (setDefault), each as edits in place or
// tables appended, checked against the tree it means to leave.
func install(d, src *doc, o Handler) ([]byte, Change, error) {
	e := &installEdit{d: d, c: Change{Version: d.version}, want: cfgtree.Copy(d.Tree).(map[string]any)}
	e.handlers = []string{"plugins", RuntimePluginID(d.version), "containerd"}
	if d.empty {
		e.root = append(e.root, "version = 2")
		e.want["version"] = int64(2)
	}
	current, hasDefault, err := currentDefault(src, e.handlers, o)
	if err != nil {
		return nil, e.c, err
	}
	if err := e.addRuntime(src, current, o); err != nil {
		return nil, e.c, err
	}
	if o.SetAsDefault && !(hasDefault && current == o.Name) {
		if err := e.setDefault(current, hasDefault, o); err != nil {
			return nil, e.c, err
		}
	}
	if len(e.edits) == 0 && len(e.tables) == 0 {
		return d.Data, e.c, nil
	}
	if len(e.tables) > 0 {
		e.edits = append(e.edits, tomledit.Edit{Start: len(d.Data), End: len(d.Data), Text: d.block(e.root, e.tables)})
	}
	out, err := apply(d.Data, e.edits)
	if err != nil {
		return nil, e.c, err
	}
	if err := d.CheckIntent(out, e.want); err != nil {
		return nil, e.c, err
	}
	e.c.Changed = !bytes.Equal(out, d.Data)
	return out, e.c, nil
}

// installEdit gathers an install's edits of d: edits in place, tables to
// append (after root's keys, for an empty file), the tree it means to
// leave, and the change to record.
type installEdit struct {
	d        *doc
	handlers []string
	edits    []tomledit.Edit
	tables   []table
	root     []string
	want     map[string]any
	c        Change
}

// currentDefault is the default runtime gpurun stands in for: src's
// default_runtime_name (runc when unset; hasDefault says it is set), or
// the one containerd reads when o.Effective knows.
func currentDefault(src *doc, handlers []string, o Handler) (current string, hasDefault bool, err error) {
	defPath := cfgtree.Join(handlers, "default_runtime_name")
	current = "runc"
	if v, ok := cfgtree.Get(src.Tree, defPath...); ok {
		s, ok := v.(string)
		if !ok {
			return "", false, fmt.Errorf("containerd config line %d: default_runtime_name is not a string", src.Line(src.KVStart(defPath)))
		}
		current, hasDefault = s, true
	}
	if o.Effective != nil {
		current = o.Effective.DefaultRuntime()
	}
	return current, hasDefault, nil
}

// addRuntime makes gpurun's runtime table: a table there already gets
// gpurun-runtime as its BinaryName; a new one is copied from the runtime
// it stands in for (sourcePlan), keeping runc on containerd 1.x.
func (e *installEdit) addRuntime(src *doc, current string, o Handler) error {
	d := e.d
	rt := cfgtree.Join(e.handlers, "runtimes", o.Name)
	opts := cfgtree.Join(rt, "options")
	if existing, ok := cfgtree.Get(d.Tree, rt...); ok {
		if _, isMap := existing.(map[string]any); !isMap {
			return fmt.Errorf("containerd config line %d: %s is not a table", d.Line(d.KVStart(rt)), tomledit.PathText(rt))
		}
		binPath := cfgtree.Join(opts, "BinaryName")
		edits, ok, err := d.setString(opts, "BinaryName", o.BinaryName, tomledit.PathText(binPath))
		switch {
		case err != nil:
			return err
		case ok:
			e.edits = append(e.edits, edits...)
		default:
			if def := d.Def(rt); def.Form == tomledit.Inline || def.Form == tomledit.NotTable {
				_, _, err := d.SetKey(rt, "options", "")
				return err
			}
			e.tables = append(e.tables, table{path: opts, lines: []string{"BinaryName = " + tomledit.Quote(o.BinaryName)}})
		}
		cfgtree.Set(e.want, binPath, o.BinaryName)
		return nil
	}
	if def := d.Def(rt); def.Form == tomledit.Inline || def.Form == tomledit.NotTable {
		_, _, err := d.SetKey(rt, "runtime_type", "")
		return err
	}
	plan, err := sourcePlan(src, e.handlers, current, o)
	if err != nil {
		return err
	}
	e.c.AddedRuntime = true
	e.c.Chain, e.c.CopiedFrom = plan.chain, plan.name
	if runc := cfgtree.Join(e.handlers, "runtimes", "runc"); d.version == 2 && !hasRuntimes(d.Tree, e.handlers) {
		// containerd 1.x replaces its built-in runtimes (runc) with
		// those of the config: keep runc, or its default would vanish.
		e.tables = append(e.tables, table{path: runc, lines: []string{"runtime_type = " + tomledit.Quote(RuncV2)}})
		cfgtree.Set(e.want, runc, map[string]any{"runtime_type": RuncV2})
	}
	e.tables = append(e.tables, table{path: rt, lines: plan.rtLines}, table{path: opts, lines: plan.optLines})
	cfgtree.Set(e.want, rt, plan.value)
	return nil
}

// setDefault makes gpurun's runtime the default, recording the one it
// replaces.
func (e *installEdit) setDefault(current string, hasDefault bool, o Handler) error {
	e.c.SetDefault, e.c.HadDefaultKey = true, hasDefault
	if hasDefault {
		e.c.PreviousDefault = current
	}
	edits, ok, err := e.d.setString(e.handlers, "default_runtime_name", o.Name, "default_runtime_name")
	switch {
	case err != nil:
		return err
	case ok:
		e.edits = append(e.edits, edits...)
	default:
		e.tables = append([]table{{path: e.handlers, lines: []string{"default_runtime_name = " + tomledit.Quote(o.Name)}}}, e.tables...)
	}
	cfgtree.Set(e.want, cfgtree.Join(e.handlers, "default_runtime_name"), o.Name)
	return nil
}

// hasRuntimes reports whether the config defines any runtime.
func hasRuntimes(tree map[string]any, handlers []string) bool {
	v, _ := cfgtree.Get(tree, cfgtree.Join(handlers, "runtimes")...)
	m, _ := v.(map[string]any)
	return len(m) > 0
}

// block renders the marker block appended at the end of d.
func (d *doc) block(root []string, tables []table) string {
	var b strings.Builder
	if len(d.Data) > 0 {
		b.WriteString(d.NL)
	}
	b.WriteString(marker + d.NL)
	for _, l := range root {
		b.WriteString(l + d.NL)
	}
	for i, t := range tables {
		if i > 0 || len(root) > 0 {
			b.WriteString(d.NL)
		}
		b.WriteString("[" + tomledit.KeyText(t.path) + "]" + d.NL)
		for _, l := range t.lines {
			b.WriteString("  " + l + d.NL)
		}
	}
	return b.String()
}

// runtimePlan is the runtime table an install adds.
type runtimePlan struct {
	name, chain string
	rtLines     []string
	optLines    []string
	value       map[string]any
}

// sourcePlan builds gpurun's runtime from the runtime it replaces: the
// current default when it is a runc-type runtime defined in src, else runc
// when defined, else nothing but gpurun's own keys.
func sourcePlan(src *doc, handlers []string, current string, o Handler) (runtimePlan, error) {
	plan := runtimePlan{name: "runc", value: map[string]any{}}
	name, srcMap, fromEffective := pickSource(src, handlers, current, o)
	if name != "" {
		plan.name = name
	}
	var rtCopied, optCopied []string
	var err error
	switch {
	case fromEffective:
		if rtCopied, optCopied, plan.chain, err = formatRuntime(srcMap, o); err != nil {
			return plan, fmt.Errorf("containerd config: runtime %s, as containerd reads it: %w", plan.name, err)
		}
	case srcMap != nil:
		if rtCopied, optCopied, plan.chain, err = copiedLines(src, cfgtree.Join(handlers, "runtimes", plan.name), o); err != nil {
			return plan, err
		}
	}
	annotations, optValues := copiedValues(srcMap, plan.value)
	for _, a := range o.PodAnnotations {
		if !slices.Contains(annotations, a) {
			annotations = append(annotations, a)
		}
	}
	plan.rtLines = append(plan.rtLines, "runtime_type = "+tomledit.Quote(RuncV2))
	plan.value["runtime_type"] = RuncV2
	if len(annotations) > 0 {
		q := make([]string, len(annotations))
		vals := make([]any, len(annotations))
		for i, a := range annotations {
			q[i], vals[i] = tomledit.Quote(a), a
		}
		plan.rtLines = append(plan.rtLines, "pod_annotations = ["+strings.Join(q, ", ")+"]")
		plan.value["pod_annotations"] = vals
	}
	plan.rtLines = append(plan.rtLines, rtCopied...)
	plan.optLines = append([]string{"BinaryName = " + tomledit.Quote(o.BinaryName)}, optCopied...)
	optValues["BinaryName"] = o.BinaryName
	plan.value["options"] = optValues
	return plan, nil
}

// pickSource finds the runtime gpurun's is copied from (see sourcePlan):
// its name and settings ("" and nil for none), and whether they are
// containerd's reading of them (o.Effective: it reads them elsewhere too,
// or only elsewhere) rather than src's.
func pickSource(src *doc, handlers []string, current string, o Handler) (string, map[string]any, bool) {
	for _, cand := range []string{current, "runc"} {
		if cand == o.Name {
			continue
		}
		v, ok := cfgtree.Get(src.Tree, cfgtree.Join(handlers, "runtimes", cand)...)
		m, isMap := v.(map[string]any)
		fromEffective := false
		if o.Effective != nil {
			if r, found := o.Effective.Runtime(cand); found {
				if _, same := cfgtree.Equal(m, r.Settings); !isMap || !same {
					m, ok, isMap, fromEffective = r.Settings, true, true, true
				}
			}
		}
		if !ok || !isMap {
			continue
		}
		if t, ok := m["runtime_type"]; ok && t != RuncV2 && t != "" {
			continue
		}
		return cand, m, fromEffective
	}
	return "", nil, false
}

// copiedLines are the lines of the source runtime's table srcRT in src
// that gpurun's copies, as written there (keys and values, comments
// aside): its runtime keys and its options but BinaryName, which is the
// runtime gpurun chains when it is not gpurun's.
func copiedLines(src *doc, srcRT []string, o Handler) (rtCopied, optCopied []string, chain string, err error) {
	for _, e := range src.Exprs {
		if e.Kind == unstable.ArrayTable && len(e.Path) > len(srcRT) && tomledit.NamesEqual(e.Path[:len(srcRT)], srcRT) {
			return nil, nil, "", fmt.Errorf("containerd config line %d: cannot copy the array of tables %s", src.Line(e.Start), tomledit.PathText(tomledit.Names(e.Path)))
		}
	}
	for _, kv := range src.KVs {
		if kv.Value.Kind == unstable.InlineTable || len(kv.Path) <= len(srcRT) || !tomledit.NamesEqual(kv.Path[:len(srcRT)], srcRT) {
			continue
		}
		rel := kv.Path[len(srcRT):]
		text := string(src.Data[kv.Value.Start:kv.Value.End])
		switch {
		case rel[0].Name == "options" && len(rel) == 1:
			return nil, nil, "", fmt.Errorf("containerd config line %d: %s.options is not a table", src.Line(kv.Start), tomledit.PathText(srcRT))
		case rel[0].Name == "options":
			if len(rel) == 2 && rel[1].Name == "BinaryName" {
				if kv.Value.Kind == unstable.String && kv.Value.Str != o.BinaryName {
					chain = kv.Value.Str
				}
				continue
			}
			optCopied = append(optCopied, tomledit.RawKey(rel[1:])+" = "+text)
		case copiedRuntimeKey(rel[0].Name):
			rtCopied = append(rtCopied, tomledit.RawKey(rel)+" = "+text)
		}
	}
	return rtCopied, optCopied, chain, nil
}

// copiedValues copies the source runtime's settings (nil: none) into
// value, gpurun's runtime as containerd will read it: its runtime keys,
// and its pod_annotations and options but BinaryName, which it returns.
func copiedValues(srcMap, value map[string]any) (annotations []string, options map[string]any) {
	annotations, options = []string{}, map[string]any{}
	if srcMap == nil {
		return annotations, options
	}
	if v, ok := srcMap["pod_annotations"].([]any); ok {
		for _, a := range v {
			if s, ok := a.(string); ok && !slices.Contains(annotations, s) {
				annotations = append(annotations, s)
			}
		}
	}
	for k, v := range srcMap {
		if copiedRuntimeKey(k) {
			value[k] = cfgtree.Copy(v)
		}
	}
	if m, ok := srcMap["options"].(map[string]any); ok {
		for k, v := range m {
			if k != "BinaryName" {
				options[k] = cfgtree.Copy(v)
			}
		}
	}
	return annotations, options
}

// formatRuntime writes the settings of a runtime that gpurun copies from
// the configuration containerd reads (not from the edited file's text):
// the lines of the runtime's table and of its options table, and the
// BinaryName to chain to.
func formatRuntime(m map[string]any, o Handler) (rtLines, optLines []string, chain string, err error) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !copiedRuntimeKey(k) {
			continue
		}
		text, err := tomledit.Format(m[k])
		if err != nil {
			return nil, nil, "", fmt.Errorf("%s: %w", k, err)
		}
		rtLines = append(rtLines, tomledit.KeyText([]string{k})+" = "+text)
	}
	opts, _ := m["options"].(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		if k == "BinaryName" {
			if s, ok := opts[k].(string); ok && s != o.BinaryName {
				chain = s
			}
			continue
		}
		text, err := tomledit.Format(opts[k])
		if err != nil {
			return nil, nil, "", fmt.Errorf("options.%s: %w", k, err)
		}
		optLines = append(optLines, tomledit.KeyText([]string{k})+" = "+text)
	}
	return rtLines, optLines, chain, nil
}

// ---------------------------------------------------------------------------
// Uninstall.

// block is an appended block of an install, and the range that removes
// it.
type block struct {
	from, to int
	tables   [][]string
	rootKeys []string
}

func (b block) hasTable(path []string) bool {
	for _, t := range b.tables {
		if slices.Equal(t, path) {
			return true
		}
	}
	return false
}

// markerBlocks finds the blocks an install appended: the marker comment, the
// root keys version and imports (written into an empty config) and then the
// tables for which ours is true with their keys. A block ends at any other
// comment line, table or key.
func (d *doc) markerBlocks(ours func([]string) bool, rootKeys bool) []block {
	var blocks []block
	for i := 0; i < len(d.Exprs); i++ {
		e := d.Exprs[i]
		if e.Kind != unstable.Comment || strings.TrimRight(e.Text, " \t") != marker {
			continue
		}
		b := block{}
		last, header := i, -1
	scan:
		for j := i + 1; j < len(d.Exprs); j++ {
			n := d.Exprs[j]
			switch n.Kind {
			case unstable.KeyValue:
				name := tomledit.Names(n.Path)
				rootKey := n.Header < 0 && header < 0 && rootKeys && len(name) == 1 && (name[0] == "version" || name[0] == "imports")
				if !rootKey && (header < 0 || n.Header != header) {
					break scan
				}
				if rootKey {
					b.rootKeys = append(b.rootKeys, name[0])
				}
			case unstable.Table:
				if !ours(tomledit.Names(n.Path)) {
					break scan
				}
				header = j
				b.tables = append(b.tables, tomledit.Names(n.Path))
			default:
				break scan
			}
			last = j
		}
		b.from, b.to = e.LineStart, d.Exprs[last].LineEnd
		if b.from > 0 {
			from := b.from - 1
			if from > 0 && d.Data[from-1] == '\r' {
				from--
			}
			// Take the newline the install added before the block, unless
			// that would join the line before with text after the block.
			if b.to == len(d.Data) || (from > 0 && d.Data[from-1] == '\n') {
				b.from = from
			}
		}
		blocks = append(blocks, b)
		i = last
	}
	return blocks
}

// ---------------------------------------------------------------------------
// Imports.

// addImport returns the main config with path in its imports.
func addImport(d *doc, path string) ([]byte, error) {
	if d.empty {
		block := marker + d.NL + "version = 2" + d.NL + "imports = [" + tomledit.Quote(path) + "]" + d.NL
		if len(d.Data) > 0 {
			block = d.NL + block
		}
		return append(slices.Clip(d.Data), block...), nil
	}
	var edit tomledit.Edit
	if i := d.FindKV([]string{"imports"}); i >= 0 {
		kv := d.KVs[i]
		if kv.Value.Kind != unstable.Array || kv.Nested {
			return nil, fmt.Errorf("containerd config line %d: imports is not an array", d.Line(kv.Start))
		}
		var last *tomledit.Value
		at := -1
		for k := range kv.Value.Elems {
			el := &kv.Value.Elems[k]
			if el.Kind != unstable.String {
				return nil, fmt.Errorf("containerd config line %d: imports has an element that is not a string", d.Line(kv.Start))
			}
			if el.Str == path {
				at = k
				continue
			}
			if filepath.IsAbs(el.Str) {
				if ok, _ := filepath.Match(el.Str, path); ok {
					return d.Data, nil
				}
			}
			last = el
		}
		switch {
		case at >= 0 && at == len(kv.Value.Elems)-1:
			return d.Data, nil
		case at >= 0:
			// Read last: out of its place, and after the last element.
			removal := d.RemoveArrayElement(i, at)
			out, err := apply(d.Data, []tomledit.Edit{removal})
			if err != nil {
				return nil, err
			}
			moved, err := parse(out)
			if err != nil {
				return nil, fmt.Errorf("containerd config: %w", err)
			}
			j := moved.FindKV([]string{"imports"})
			elems := moved.KVs[j].Value.Elems
			end := elems[len(elems)-1].End
			out, err = apply(moved.Data, []tomledit.Edit{{Start: end, End: end, Text: ", " + tomledit.Quote(path)}})
			if err != nil {
				return nil, err
			}
			if err := d.CheckOnly(out, [][]string{{"imports"}}); err != nil {
				return nil, err
			}
			return out, nil
		case last == nil:
			edit = tomledit.Edit{Start: kv.Value.Start + 1, End: kv.Value.Start + 1, Text: tomledit.Quote(path)}
		default:
			edit = tomledit.Edit{Start: last.End, End: last.End, Text: ", " + tomledit.Quote(path)}
		}
	} else {
		i := d.FindKV([]string{"version"})
		if i < 0 || d.KVs[i].Nested {
			return nil, errors.New("containerd config: no top-level version key to add imports after")
		}
		e := d.KVs[i].Expr
		edit = d.InsertAfter(e, d.Indent(d.Exprs[e]), "imports = ["+tomledit.Quote(path)+"] "+marker)
	}
	out, err := apply(d.Data, []tomledit.Edit{edit})
	if err != nil {
		return nil, err
	}
	if err := d.CheckOnly(out, [][]string{{"imports"}}); err != nil {
		return nil, err
	}
	return out, nil
}

// removeImport returns the edit that removes path from the imports
// key/value kvi, or nil when it is not there.
func (d *doc) removeImport(kvi int, path string) *tomledit.Edit {
	kv := d.KVs[kvi]
	at := -1
	for k, el := range kv.Value.Elems {
		if el.Kind == unstable.String && el.Str == path {
			at = k
			break
		}
	}
	if at < 0 {
		return nil
	}
	e := d.Exprs[kv.Expr]
	if len(kv.Value.Elems) == 1 && !kv.Nested && strings.TrimRight(e.Text, " \t") == marker {
		from, to := d.LineRemoval(kv.Expr)
		return &tomledit.Edit{Start: from, End: to}
	}
	edit := d.RemoveArrayElement(kvi, at)
	return &edit
}

// copySection returns the text of every table and key under prefix, for
// a drop-in that must carry the whole section.
func copySection(d *doc, prefix []string) (string, error) {
	var root, body strings.Builder
	emitted := map[int]bool{}
	line := func(b *strings.Builder, from, to int) {
		b.Write(d.Data[from:to])
		if to == len(d.Data) && (to == 0 || d.Data[to-1] != '\n') {
			b.WriteString(d.NL)
		}
	}
	for i, e := range d.Exprs {
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			if len(e.Path) < len(prefix) || !tomledit.NamesEqual(e.Path[:len(prefix)], prefix) {
				continue
			}
			end := len(d.Data)
			for j := i + 1; j < len(d.Exprs); j++ {
				if k := d.Exprs[j].Kind; k == unstable.Table || k == unstable.ArrayTable {
					end = d.Exprs[j].LineStart
					break
				}
			}
			line(&body, e.LineStart, end)
		case unstable.KeyValue:
			kv := d.KVs[e.KV]
			if e.Header >= 0 {
				h := d.Exprs[e.Header].Path
				if len(h) >= len(prefix) && tomledit.NamesEqual(h[:len(prefix)], prefix) {
					continue
				}
			}
			switch {
			case len(kv.Path) >= len(prefix) && tomledit.NamesEqual(kv.Path[:len(prefix)], prefix):
				if e.Header < 0 {
					line(&root, e.LineStart, e.LineEnd)
					continue
				}
				if !emitted[e.Header] {
					h := d.Exprs[e.Header]
					line(&body, h.LineStart, h.LineEnd)
					emitted[e.Header] = true
				}
				line(&body, e.LineStart, e.LineEnd)
			case tomledit.NamesEqual(kv.Path, prefix[:min(len(kv.Path), len(prefix))]):
				return "", fmt.Errorf("containerd config line %d: %s is written inside %s = {...}; gpurun cannot copy it into a drop-in: install in place instead", d.Line(kv.Start), tomledit.PathText(prefix), tomledit.PathText(tomledit.Names(kv.Path)))
			}
		}
	}
	return root.String() + body.String(), nil
}

// apply applies the edits, naming the config in an error.
func apply(data []byte, edits []tomledit.Edit) ([]byte, error) {
	out, err := tomledit.Apply(data, edits)
	if err != nil {
		return nil, fmt.Errorf("containerd config: %w", err)
	}
	return out, nil
}
