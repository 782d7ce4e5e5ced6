package engineconf

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// ContainerdOptions describes the runtime handler that InstallContainerd and
// ContainerdDropIn register in containerd's CRI plugin.
type ContainerdOptions struct {
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
}

// ContainerdChange records what an install did, for the report and for
// UninstallContainerd. An install that changes nothing (Changed false)
// carries no undo information: keep the record of the install that made the
// change.
type ContainerdChange struct {
	// Changed reports whether the output differs from the input. For
	// ContainerdDropIn it reports whether the main config changed; compare
	// the drop-in with the file on disk.
	Changed bool
	// Version is the config version: 2 (containerd 1.x), 3 (containerd
	// 2.0-2.2) or 4 (containerd 2.3 and later). An empty config counts as 2.
	Version int
	// AddedRuntime reports that the runtimes.<Name> tables were added (in
	// the block UninstallContainerd removes). A version 2 config that
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

// ctdMarker starts the block of tables an install appends, and ends the
// imports line it adds; uninstall looks for it.
const ctdMarker = "# added by gpurun install; remove with gpurun uninstall containerd"

const ctdRuncV2 = "io.containerd.runc.v2"

// ctdCopiedRuntimeKey reports whether a runtime setting other than options
// is copied from the runtime gpurun replaces. runtime_type is always
// io.containerd.runc.v2 and pod_annotations are merged; runtime_path,
// runtime_engine and runtime_root select other shims and are not copied.
func ctdCopiedRuntimeKey(k string) bool {
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

// ctdPluginID is the plugin whose section holds the CRI runtimes.
func ctdPluginID(version int) string {
	if version == 2 {
		return "io.containerd.grpc.v1.cri"
	}
	return "io.containerd.cri.v1.runtime"
}

// ContainerdVersion returns the version of a containerd config: 2
// (containerd 1.x), 3 (containerd 2.0-2.2) or 4 (containerd 2.3 and later,
// same CRI layout as 3). An empty config (nothing but blank lines and
// comments) means containerd's defaults and counts as 2, the version both
// containerd 1.x and 2.x accept. A config without a version key is version 1,
// which is not supported.
func ContainerdVersion(data []byte) (int, error) {
	d, err := ctdParse(data)
	if err != nil {
		return 0, err
	}
	return d.version, nil
}

// InstallContainerd registers o.Name as a runc-type runtime handler running
// o.BinaryName in a containerd config, and with o.SetAsDefault makes it the
// default. New tables go to the end of the file after a marker comment;
// default_runtime_name is replaced in place, or inserted after the
// [... .containerd] header, or appended with the new tables. The settings of
// the runtime gpurun replaces (the default runtime handler, else runc) are
// copied, and its BinaryName becomes Chain. A runtime that exists already only
// gets its options.BinaryName set. Every other byte is kept, a second install
// is a no-op, and the result is checked to parse and to change nothing but
// gpurun's settings.
func InstallContainerd(data []byte, o ContainerdOptions) ([]byte, ContainerdChange, error) {
	if err := o.validate(); err != nil {
		return nil, ContainerdChange{}, err
	}
	d, err := ctdParse(data)
	if err != nil {
		return nil, ContainerdChange{}, err
	}
	return ctdInstall(d, d, o)
}

// UninstallContainerd undoes InstallContainerd: it removes the block of
// tables the install appended (found by its marker comment) and, when
// default_runtime_name still names o.Name, restores c.PreviousDefault or
// removes the key when c.HadDefaultKey is false. It does so when c.SetDefault,
// or, when c records no change (lost, or that of a second install), when the
// runtime is removed: a default naming a missing runtime would stop the CRI
// plugin. A runtime that existed before the install keeps the BinaryName the
// install set. install followed by uninstall returns the original bytes.
func UninstallContainerd(data []byte, o ContainerdOptions, c ContainerdChange) ([]byte, bool, error) {
	if err := ctdValidName(o.Name); err != nil {
		return nil, false, err
	}
	d, err := ctdParse(data)
	if err != nil {
		return nil, false, err
	}
	if d.empty {
		return data, false, nil
	}
	ctd := []string{"plugins", ctdPluginID(d.version), "containerd"}
	rt := ctdJoin(ctd, "runtimes", o.Name)
	runc := ctdJoin(ctd, "runtimes", "runc")
	ours := func(path []string) bool {
		return slices.Equal(path, ctd) || slices.Equal(path, rt) || slices.Equal(path, ctdJoin(rt, "options")) || slices.Equal(path, runc)
	}
	var edits []ctdEdit
	removedRuntime := false
	blocks := d.markerBlocks(ours, true)
	for _, b := range blocks {
		edits = append(edits, ctdEdit{start: b.from, end: b.to})
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
	defPath := ctdJoin(ctd, "default_runtime_name")
	if i := d.findKV(defPath); i >= 0 && !inBlock(d.kvs[i].start) {
		kv := d.kvs[i]
		// Without a record of the install (c zero, or that of a second
		// install), a default naming the removed runtime goes too.
		if kv.val.kind == unstable.String && kv.val.str == o.Name && (c.SetDefault || removedRuntime && !c.Changed) {
			switch {
			case c.HadDefaultKey:
				old := string(d.data[kv.val.start:kv.val.end])
				edits = append(edits, ctdEdit{start: kv.val.start, end: kv.val.end, text: ctdQuoteLike(old, c.PreviousDefault)})
			case kv.nested:
				return nil, false, fmt.Errorf("containerd config line %d: default_runtime_name is inside an inline table; remove it by hand", d.line(kv.start))
			default:
				from, to := d.lineRemoval(kv.expr)
				edits = append(edits, ctdEdit{start: from, end: to})
			}
		}
	}
	if len(edits) == 0 {
		return data, false, nil
	}
	out, err := ctdApply(d.data, edits)
	if err != nil {
		return nil, false, err
	}
	allowed := [][]string{rt, defPath, {"version"}, {"imports"}}
	for _, b := range blocks {
		if b.hasTable(runc) {
			allowed = append(allowed, runc)
		}
	}
	if err := ctdCheckOnly(d, out, allowed); err != nil {
		return nil, false, err
	}
	return out, !bytes.Equal(out, data), nil
}

// ContainerdDropIn registers the runtime in a drop-in file instead: it returns
// the main config with an imports entry for dropInPath (unchanged when an
// entry or glob already covers it) and the drop-in's content. containerd 2.x
// (version 3 and 4) merges imported files key by key, so the drop-in holds
// only gpurun's tables, with settings copied from the main config.
// containerd 1.x (version 2) replaces a plugin's whole section with the
// imported file's, so there the drop-in holds a copy of the main config's
// whole CRI plugin section plus gpurun's tables; later edits of that section
// must then be made in the drop-in. The drop-in has the main config's version
// (containerd 2.x ignores a drop-in with a newer one).
func ContainerdDropIn(main []byte, dropInPath string, o ContainerdOptions) (newMain, dropIn []byte, c ContainerdChange, err error) {
	if err := o.validate(); err != nil {
		return nil, nil, ContainerdChange{}, err
	}
	if err := ctdValidImport(dropInPath); err != nil {
		return nil, nil, ContainerdChange{}, err
	}
	m, err := ctdParse(main)
	if err != nil {
		return nil, nil, ContainerdChange{}, err
	}
	newMain, err = ctdAddImport(m, dropInPath)
	if err != nil {
		return nil, nil, ContainerdChange{}, err
	}
	var base strings.Builder
	base.WriteString("# gpurun runtime handler for containerd, imported by the main config.\n")
	base.WriteString("# Written by gpurun install; gpurun uninstall containerd removes it.\n")
	fmt.Fprintf(&base, "version = %d\n", m.version)
	cri := []string{"plugins", ctdPluginID(m.version)}
	if m.version == 2 {
		sec, err := ctdCopySection(m, cri)
		if err != nil {
			return nil, nil, ContainerdChange{}, err
		}
		if sec != "" {
			base.WriteString("\n# containerd 1.x replaces a plugin's whole section with an imported file's:\n")
			base.WriteString("# this is a copy of the CRI plugin section of the main config.\n")
			base.WriteString(sec)
		}
	}
	b, err := ctdParse([]byte(base.String()))
	if err != nil {
		return nil, nil, ContainerdChange{}, fmt.Errorf("containerd drop-in: %w", err)
	}
	src := m
	if m.version == 2 {
		want, _ := ctdGet(m.tree, cri...)
		got, _ := ctdGet(b.tree, cri...)
		if p, ok := ctdEqual(want, got, cri); !ok {
			return nil, nil, ContainerdChange{}, fmt.Errorf("containerd config: cannot copy the CRI plugin section into a drop-in (differs at %s); use InstallContainerd", ctdPathText(p))
		}
		src = b
	}
	dropIn, c, err = ctdInstall(b, src, o)
	if err != nil {
		return nil, nil, ContainerdChange{}, err
	}
	c.Changed = !bytes.Equal(newMain, main)
	return newMain, dropIn, c, nil
}

// UninstallContainerdDropIn removes dropInPath from the main config's
// imports (the line, when the install added it; a glob entry that covers the
// drop-in stays). The entry goes whenever present, because an import of a
// missing file stops containerd; c is not needed for that and is accepted for
// symmetry with UninstallContainerd. Deleting the drop-in file is the
// caller's.
func UninstallContainerdDropIn(main []byte, dropInPath string, c ContainerdChange) (newMain []byte, changed bool, err error) {
	_ = c
	d, err := ctdParse(main)
	if err != nil {
		return nil, false, err
	}
	if d.empty {
		return main, false, nil
	}
	var edits []ctdEdit
	var blocks []ctdBlock
	for _, b := range d.markerBlocks(func([]string) bool { return false }, true) {
		// Only the block written into an empty main config; not the
		// marker of tables InstallContainerd added.
		if slices.Contains(b.rootKeys, "imports") {
			blocks = append(blocks, b)
			edits = append(edits, ctdEdit{start: b.from, end: b.to})
		}
	}
	if i := d.findKV([]string{"imports"}); i >= 0 {
		kv := d.kvs[i]
		inBlock := false
		for _, b := range blocks {
			if kv.start >= b.from && kv.start < b.to {
				inBlock = true
			}
		}
		if !inBlock && kv.val.kind == unstable.Array {
			if e := d.removeImport(i, dropInPath); e != nil {
				edits = append(edits, *e)
			}
		}
	}
	if len(edits) == 0 {
		return main, false, nil
	}
	out, err := ctdApply(d.data, edits)
	if err != nil {
		return nil, false, err
	}
	if err := ctdCheckOnly(d, out, [][]string{{"imports"}, {"version"}}); err != nil {
		return nil, false, err
	}
	return out, !bytes.Equal(out, main), nil
}

// validate checks the options an install needs.
func (o ContainerdOptions) validate() error {
	if err := ctdValidName(o.Name); err != nil {
		return err
	}
	if !filepath.IsAbs(o.BinaryName) {
		return fmt.Errorf("containerd: BinaryName %q is not an absolute path", o.BinaryName)
	}
	if !ctdPlainString(o.BinaryName) {
		return fmt.Errorf("containerd: BinaryName %q has invalid UTF-8 or control characters", o.BinaryName)
	}
	for _, a := range o.PodAnnotations {
		if a == "" || !ctdPlainString(a) {
			return fmt.Errorf("containerd: pod annotation %q is empty or has invalid characters", a)
		}
	}
	return nil
}

func ctdValidName(name string) error {
	if !ctdBare(name) {
		return fmt.Errorf("containerd: runtime name %q must be letters, digits, '-' or '_'", name)
	}
	if name == "runc" {
		return errors.New(`containerd: runtime name "runc" would replace runc itself`)
	}
	return nil
}

func ctdValidImport(p string) error {
	if !filepath.IsAbs(p) || !ctdPlainString(p) {
		return fmt.Errorf("containerd: drop-in path %q must be an absolute path without control characters", p)
	}
	return nil
}

// ctdPlainString reports whether s is valid UTF-8 without control characters.
func ctdPlainString(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// ctdBare reports whether s can be written as a TOML bare key.
func ctdBare(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Document model: positions from go-toml's unstable parser, meaning from its
// decoder.

// ctdPart is one part of a dotted key: as written (quotes included) and as
// decoded.
type ctdPart struct {
	raw, name string
}

// ctdVal is a value and where its text lies.
type ctdVal struct {
	kind       unstable.Kind
	start, end int
	str        string   // decoded, for strings
	elems      []ctdVal // array elements that are strings (start, end and str); others have start -1
}

// ctdKV is a key/value at any depth: top level, or inside an inline table.
type ctdKV struct {
	path       []ctdPart // full path: table header, then its own key
	own        int       // how many trailing parts of path its own key wrote
	start, end int       // `key = value`
	val        ctdVal
	expr       int  // index of the top-level expression holding it
	nested     bool // inside an inline table
}

// ctdExpr is a top-level expression: a comment line, a [table] or
// [[array]] header, or a key/value.
type ctdExpr struct {
	kind       unstable.Kind
	start      int // first byte
	lineStart  int // start of its first line
	contentEnd int // end of its last line, before the newline
	lineEnd    int // after the newline (or the end of the data)
	path       []ctdPart
	header     int    // key/value: index of its table header, -1 at the root
	kv         int    // key/value: index in ctdDoc.kvs
	text       string // comment: the comment; others: their trailing comment
}

type ctdDoc struct {
	data    []byte
	nl      string
	exprs   []ctdExpr
	kvs     []ctdKV
	tree    map[string]any
	version int
	empty   bool // no key and no table: containerd runs on its defaults
}

// ctdParse parses and checks a containerd config.
func ctdParse(data []byte) (*ctdDoc, error) {
	d := &ctdDoc{data: data, nl: "\n"}
	if i := bytes.IndexByte(data, '\n'); i > 0 && data[i-1] == '\r' {
		d.nl = "\r\n"
	}
	if err := toml.Unmarshal(data, &d.tree); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("containerd config line %d, column %d: %w", row, col, err)
		}
		return nil, fmt.Errorf("containerd config: %w", err)
	}
	if d.tree == nil {
		d.tree = map[string]any{}
	}
	if err := d.scan(); err != nil {
		return nil, err
	}
	d.empty = true
	for _, e := range d.exprs {
		if e.kind != unstable.Comment {
			d.empty = false
		}
	}
	if d.empty {
		d.version = 2
		return d, nil
	}
	v, ok := d.tree["version"]
	if !ok {
		return nil, errors.New("containerd config: no version key: version 1 configs are not supported; run containerd config migrate")
	}
	n, ok := v.(int64)
	if !ok {
		return nil, fmt.Errorf("containerd config line %d: version %v is not an integer", d.line(d.kvStart([]string{"version"})), v)
	}
	switch n {
	case 2, 3, 4:
		d.version = int(n)
	case 1:
		return nil, errors.New("containerd config: version 1 configs are not supported; run containerd config migrate")
	default:
		return nil, fmt.Errorf("containerd config line %d: unsupported config version %d (gpurun knows 2, 3 and 4)", d.line(d.kvStart([]string{"version"})), n)
	}
	return d, nil
}

// scan records every top-level expression and every key/value with its
// position.
func (d *ctdDoc) scan() error {
	var p unstable.Parser
	p.KeepComments = true
	p.Reset(d.data)
	var table []ctdPart
	header := -1
	for p.NextExpression() {
		n := p.Expression()
		idx := len(d.exprs)
		switch n.Kind {
		case unstable.Comment:
			start := int(n.Raw.Offset)
			e := ctdExpr{kind: unstable.Comment, start: start, header: header, text: string(n.Data)}
			d.lines(&e, start, start+int(n.Raw.Length))
			d.exprs = append(d.exprs, e)
		case unstable.Table, unstable.ArrayTable:
			parts, first, last := ctdKeyParts(&p, n.Key())
			e := ctdExpr{kind: n.Kind, path: parts, header: -1}
			d.lines(&e, first, last)
			e.start = e.lineStart
			for e.start < len(d.data) && (d.data[e.start] == ' ' || d.data[e.start] == '\t') {
				e.start++
			}
			if c := n.Next(); c != nil && c.Kind == unstable.Comment {
				e.text = string(c.Data)
			}
			d.exprs = append(d.exprs, e)
			table, header = parts, idx
		case unstable.KeyValue:
			k, err := d.keyValue(&p, n, table, idx, false)
			if err != nil {
				return err
			}
			kv := d.kvs[k]
			e := ctdExpr{kind: unstable.KeyValue, start: kv.start, path: kv.path, header: header, kv: k}
			d.lines(&e, kv.start, kv.end)
			if c := n.Next(); c != nil && c.Kind == unstable.Comment {
				e.text = string(c.Data)
			}
			d.exprs = append(d.exprs, e)
		}
	}
	if err := p.Error(); err != nil {
		return fmt.Errorf("containerd config: %w", err)
	}
	return nil
}

// keyValue records the key/value n (under table) and, for inline tables,
// the ones inside it, and returns its index in d.kvs.
func (d *ctdDoc) keyValue(p *unstable.Parser, n *unstable.Node, table []ctdPart, expr int, nested bool) (int, error) {
	own, _, last := ctdKeyParts(p, n.Key())
	kv := ctdKV{
		path:   append(slices.Clone(table), own...),
		own:    len(own),
		start:  int(n.Raw.Offset),
		end:    int(n.Raw.Offset + n.Raw.Length),
		expr:   expr,
		nested: nested,
	}
	// The value starts after the '=' following the last key part.
	i := last
	for i < kv.end && (d.data[i] == ' ' || d.data[i] == '\t') {
		i++
	}
	if i >= kv.end || d.data[i] != '=' {
		return -1, fmt.Errorf("containerd config line %d: cannot find the '=' of key %s", d.line(kv.start), ctdPathText(ctdNames(kv.path)))
	}
	i++
	for i < kv.end && (d.data[i] == ' ' || d.data[i] == '\t') {
		i++
	}
	v := n.Value()
	kv.val = ctdVal{kind: v.Kind, start: i, end: kv.end}
	switch v.Kind {
	case unstable.String:
		kv.val.str = string(v.Data)
	case unstable.Array:
		it := v.Children()
		for it.Next() {
			c := it.Node()
			switch c.Kind {
			case unstable.Comment:
			case unstable.String:
				kv.val.elems = append(kv.val.elems, ctdVal{kind: c.Kind, start: int(c.Raw.Offset), end: int(c.Raw.Offset + c.Raw.Length), str: string(c.Data)})
			default:
				kv.val.elems = append(kv.val.elems, ctdVal{kind: c.Kind, start: -1, end: -1})
			}
		}
	}
	idx := len(d.kvs)
	d.kvs = append(d.kvs, kv)
	if v.Kind == unstable.InlineTable {
		it := v.Children()
		for it.Next() {
			if c := it.Node(); c.Kind == unstable.KeyValue {
				if _, err := d.keyValue(p, c, kv.path, expr, true); err != nil {
					return -1, err
				}
			}
		}
	}
	return idx, nil
}

// ctdKeyParts returns the parts of a key, the offset of its first byte and
// the offset after its last byte.
func ctdKeyParts(p *unstable.Parser, it unstable.Iterator) (parts []ctdPart, first, last int) {
	first = -1
	for it.Next() {
		k := it.Node()
		if first < 0 {
			first = int(k.Raw.Offset)
		}
		last = int(k.Raw.Offset + k.Raw.Length)
		parts = append(parts, ctdPart{raw: string(p.Raw(k.Raw)), name: string(k.Data)})
	}
	return parts, first, last
}

// lines sets the line positions of an expression spanning [start, end).
func (d *ctdDoc) lines(e *ctdExpr, start, end int) {
	e.lineStart = bytes.LastIndexByte(d.data[:start], '\n') + 1
	j := bytes.IndexByte(d.data[end:], '\n')
	if j < 0 {
		e.contentEnd, e.lineEnd = len(d.data), len(d.data)
		return
	}
	e.lineEnd = end + j + 1
	e.contentEnd = end + j
	if e.contentEnd > end && d.data[e.contentEnd-1] == '\r' {
		e.contentEnd--
	}
}

// line returns the 1-based line of an offset.
func (d *ctdDoc) line(off int) int {
	if off < 0 {
		return 0
	}
	return bytes.Count(d.data[:off], []byte{'\n'}) + 1
}

func (d *ctdDoc) kvStart(path []string) int {
	if i := d.findKV(path); i >= 0 {
		return d.kvs[i].start
	}
	return -1
}

// findKV returns the index of the key/value at path, or -1.
func (d *ctdDoc) findKV(path []string) int {
	for i, kv := range d.kvs {
		if ctdNamesEqual(kv.path, path) {
			return i
		}
	}
	return -1
}

// indent returns the indentation of an expression's line.
func (d *ctdDoc) indent(e ctdExpr) string {
	return string(d.data[e.lineStart:e.start])
}

// lineRemoval returns the range that removes a one-line expression together
// with the newline before it, the inverse of ctdDoc.insertAfter.
func (d *ctdDoc) lineRemoval(expr int) (int, int) {
	e := d.exprs[expr]
	if e.lineStart == 0 {
		return 0, e.lineEnd
	}
	from := e.lineStart - 1
	if from > 0 && d.data[from-1] == '\r' {
		from--
	}
	return from, e.contentEnd
}

// insertAfter returns the edit that adds line (without indentation or
// newline) after an expression's line, with the given indentation.
func (d *ctdDoc) insertAfter(expr int, indent, line string) ctdEdit {
	e := d.exprs[expr]
	return ctdEdit{start: e.contentEnd, end: e.contentEnd, text: d.nl + indent + line}
}

// ctdForm says how a table is defined.
type ctdForm int

const (
	ctdAbsent   ctdForm = iota // nowhere
	ctdImplicit                // only as the parent of other tables
	ctdHeader                  // by a [table] header
	ctdDotted                  // by dotted keys
	ctdInline                  // it or a parent is an inline table
	ctdNotTable                // it or a parent is a value or an array of tables
)

// ctdDef locates the definition of a table.
type ctdDef struct {
	form ctdForm
	expr int // ctdHeader: the header; ctdDotted: the last key/value defining it
	off  int // where, for errors
}

// def finds how the table at path is defined.
func (d *ctdDoc) def(path []string) ctdDef {
	for _, kv := range d.kvs {
		if len(kv.path) <= len(path) && ctdNamesEqual(kv.path, path[:len(kv.path)]) {
			if kv.val.kind == unstable.InlineTable {
				return ctdDef{form: ctdInline, expr: kv.expr, off: kv.start}
			}
			return ctdDef{form: ctdNotTable, expr: kv.expr, off: kv.start}
		}
	}
	for i, e := range d.exprs {
		if e.kind == unstable.ArrayTable && len(e.path) <= len(path) && ctdNamesEqual(e.path, path[:len(e.path)]) {
			return ctdDef{form: ctdNotTable, expr: i, off: e.start}
		}
	}
	for i, e := range d.exprs {
		if e.kind == unstable.Table && ctdNamesEqual(e.path, path) {
			return ctdDef{form: ctdHeader, expr: i, off: e.start}
		}
	}
	def := ctdDef{form: ctdAbsent, expr: -1, off: -1}
	for i, e := range d.exprs {
		switch e.kind {
		case unstable.KeyValue:
			kv := d.kvs[e.kv]
			if len(kv.path) > len(path) && ctdNamesEqual(kv.path[:len(path)], path) && len(kv.path)-kv.own < len(path) {
				def = ctdDef{form: ctdDotted, expr: i, off: e.start}
			}
		case unstable.Table, unstable.ArrayTable:
			if def.form == ctdAbsent && len(e.path) > len(path) && ctdNamesEqual(e.path[:len(path)], path) {
				def = ctdDef{form: ctdImplicit, expr: i, off: e.start}
			}
		}
	}
	return def
}

// dottedPrefix returns how the key/value of expression expr writes the key of
// the table at path, for a sibling key such as `containerd.x = 1`.
func (d *ctdDoc) dottedPrefix(expr int, path []string) string {
	kv := d.kvs[d.exprs[expr].kv]
	from := len(kv.path) - kv.own
	raws := make([]string, 0, len(path)-from)
	for _, p := range kv.path[from:len(path)] {
		raws = append(raws, p.raw)
	}
	return strings.Join(raws, ".")
}

// headerIndent returns the indentation for a key inserted after header expr:
// that of the key/value after it, else the header's plus two spaces.
func (d *ctdDoc) headerIndent(expr int) string {
	if expr+1 < len(d.exprs) {
		if n := d.exprs[expr+1]; n.kind == unstable.KeyValue && n.header == expr {
			return d.indent(n)
		}
	}
	return d.indent(d.exprs[expr]) + "  "
}

// setKey returns the edit that gives the key at table+key the value text,
// where the key does not exist yet, or reports that the table must be
// appended (ok false) because it is not defined by a header or dotted keys.
func (d *ctdDoc) setKey(table []string, key, value string) (e ctdEdit, ok bool, err error) {
	def := d.def(table)
	switch def.form {
	case ctdHeader:
		return d.insertAfter(def.expr, d.headerIndent(def.expr), key+" = "+value), true, nil
	case ctdDotted:
		prefix := d.dottedPrefix(def.expr, table)
		return d.insertAfter(def.expr, d.indent(d.exprs[def.expr]), prefix+"."+key+" = "+value), true, nil
	case ctdInline:
		return ctdEdit{}, false, fmt.Errorf("containerd config line %d: %s is (inside) an inline table; gpurun will not rewrite it: write it as a [%s] table", d.line(def.off), ctdPathText(table), ctdPathText(table))
	case ctdNotTable:
		return ctdEdit{}, false, fmt.Errorf("containerd config line %d: %s is not a table", d.line(def.off), ctdPathText(table))
	}
	return ctdEdit{}, false, nil
}

// ---------------------------------------------------------------------------
// Install.

// ctdTable is a table to append: its path and its lines (without
// indentation or newline).
type ctdTable struct {
	path  []string
	lines []string
}

// ctdInstall edits d, reading the runtime to copy and the current default
// from src (d itself, or the main config for a drop-in).
func ctdInstall(d, src *ctdDoc, o ContainerdOptions) ([]byte, ContainerdChange, error) {
	c := ContainerdChange{Version: d.version}
	ctd := []string{"plugins", ctdPluginID(d.version), "containerd"}
	rt := ctdJoin(ctd, "runtimes", o.Name)
	opts := ctdJoin(rt, "options")
	want := ctdCopy(d.tree).(map[string]any)
	var edits []ctdEdit
	var tables []ctdTable
	var root []string
	if d.empty {
		root = append(root, "version = 2")
		want["version"] = int64(2)
	}

	// The current default, from the config gpurun-runtime is added to.
	defPath := ctdJoin(ctd, "default_runtime_name")
	current, hasDefault := "runc", false
	if v, ok := ctdGet(src.tree, defPath...); ok {
		s, ok := v.(string)
		if !ok {
			return nil, c, fmt.Errorf("containerd config line %d: default_runtime_name is not a string", src.line(src.kvStart(defPath)))
		}
		current, hasDefault = s, true
	}

	// The runtime.
	if existing, ok := ctdGet(d.tree, rt...); ok {
		if _, isMap := existing.(map[string]any); !isMap {
			return nil, c, fmt.Errorf("containerd config line %d: %s is not a table", d.line(d.kvStart(rt)), ctdPathText(rt))
		}
		binPath := ctdJoin(opts, "BinaryName")
		if i := d.findKV(binPath); i >= 0 {
			kv := d.kvs[i]
			if kv.val.kind != unstable.String {
				return nil, c, fmt.Errorf("containerd config line %d: %s is not a string", d.line(kv.start), ctdPathText(binPath))
			}
			if kv.val.str != o.BinaryName {
				old := string(d.data[kv.val.start:kv.val.end])
				edits = append(edits, ctdEdit{start: kv.val.start, end: kv.val.end, text: ctdQuoteLike(old, o.BinaryName)})
			}
		} else {
			e, ok, err := d.setKey(opts, "BinaryName", ctdQuote(o.BinaryName))
			if err != nil {
				return nil, c, err
			}
			if ok {
				edits = append(edits, e)
			} else {
				if def := d.def(rt); def.form == ctdInline || def.form == ctdNotTable {
					_, _, err := d.setKey(rt, "options", "")
					return nil, c, err
				}
				tables = append(tables, ctdTable{path: opts, lines: []string{"BinaryName = " + ctdQuote(o.BinaryName)}})
			}
		}
		ctdSet(want, binPath, o.BinaryName)
	} else {
		if def := d.def(rt); def.form == ctdInline || def.form == ctdNotTable {
			_, _, err := d.setKey(rt, "runtime_type", "")
			return nil, c, err
		}
		plan, err := ctdSourcePlan(src, ctd, current, o)
		if err != nil {
			return nil, c, err
		}
		c.AddedRuntime = true
		c.Chain, c.CopiedFrom = plan.chain, plan.name
		if runc := ctdJoin(ctd, "runtimes", "runc"); d.version == 2 && !ctdHasRuntimes(d.tree, ctd) {
			// containerd 1.x replaces its built-in runtimes (runc) with
			// those of the config: keep runc, or its default would vanish.
			tables = append(tables, ctdTable{path: runc, lines: []string{"runtime_type = " + ctdQuote(ctdRuncV2)}})
			ctdSet(want, runc, map[string]any{"runtime_type": ctdRuncV2})
		}
		tables = append(tables, ctdTable{path: rt, lines: plan.rtLines}, ctdTable{path: opts, lines: plan.optLines})
		ctdSet(want, rt, plan.value)
	}

	// The default.
	if o.SetAsDefault && !(hasDefault && current == o.Name) {
		c.SetDefault, c.HadDefaultKey = true, hasDefault
		if hasDefault {
			c.PreviousDefault = current
		}
		if i := d.findKV(defPath); i >= 0 {
			kv := d.kvs[i]
			if kv.val.kind != unstable.String {
				return nil, c, fmt.Errorf("containerd config line %d: default_runtime_name is not a string", d.line(kv.start))
			}
			old := string(d.data[kv.val.start:kv.val.end])
			edits = append(edits, ctdEdit{start: kv.val.start, end: kv.val.end, text: ctdQuoteLike(old, o.Name)})
		} else {
			e, ok, err := d.setKey(ctd, "default_runtime_name", ctdQuote(o.Name))
			if err != nil {
				return nil, c, err
			}
			if ok {
				edits = append(edits, e)
			} else {
				tables = append([]ctdTable{{path: ctd, lines: []string{"default_runtime_name = " + ctdQuote(o.Name)}}}, tables...)
			}
		}
		ctdSet(want, defPath, o.Name)
	}

	if len(edits) == 0 && len(tables) == 0 {
		return d.data, c, nil
	}
	if len(tables) > 0 {
		edits = append(edits, ctdEdit{start: len(d.data), end: len(d.data), text: d.block(root, tables)})
	}
	out, err := ctdApply(d.data, edits)
	if err != nil {
		return nil, c, err
	}
	got, err := ctdDecode(out)
	if err != nil {
		return nil, c, fmt.Errorf("containerd config: gpurun's edit does not parse (a bug; nothing written): %w", err)
	}
	if p, ok := ctdEqual(want, got, nil); !ok {
		return nil, c, fmt.Errorf("containerd config: refusing to edit: the result would differ at %s from what gpurun intends", ctdPathText(p))
	}
	c.Changed = !bytes.Equal(out, d.data)
	return out, c, nil
}

// ctdHasRuntimes reports whether the config defines any runtime.
func ctdHasRuntimes(tree map[string]any, ctd []string) bool {
	v, _ := ctdGet(tree, ctdJoin(ctd, "runtimes")...)
	m, _ := v.(map[string]any)
	return len(m) > 0
}

// block renders the marker block appended at the end of d.
func (d *ctdDoc) block(root []string, tables []ctdTable) string {
	var b strings.Builder
	if len(d.data) > 0 {
		b.WriteString(d.nl)
	}
	b.WriteString(ctdMarker + d.nl)
	for _, l := range root {
		b.WriteString(l + d.nl)
	}
	for i, t := range tables {
		if i > 0 || len(root) > 0 {
			b.WriteString(d.nl)
		}
		b.WriteString("[" + ctdKeyText(t.path) + "]" + d.nl)
		for _, l := range t.lines {
			b.WriteString("  " + l + d.nl)
		}
	}
	return b.String()
}

// ctdPlan is the runtime table an install adds.
type ctdPlan struct {
	name, chain string
	rtLines     []string
	optLines    []string
	value       map[string]any
}

// ctdSourcePlan builds gpurun's runtime from the runtime it replaces: the
// current default when it is a runc-type runtime defined in src, else runc
// when defined, else nothing but gpurun's own keys.
func ctdSourcePlan(src *ctdDoc, ctd []string, current string, o ContainerdOptions) (ctdPlan, error) {
	plan := ctdPlan{name: "runc", value: map[string]any{}}
	var srcMap map[string]any
	for _, cand := range []string{current, "runc"} {
		if cand == o.Name {
			continue
		}
		v, ok := ctdGet(src.tree, ctdJoin(ctd, "runtimes", cand)...)
		m, isMap := v.(map[string]any)
		if !ok || !isMap {
			continue
		}
		if t, ok := m["runtime_type"]; ok && t != ctdRuncV2 && t != "" {
			continue
		}
		plan.name, srcMap = cand, m
		break
	}
	annotations := []string{}
	var rtCopied, optCopied []string
	optValues := map[string]any{}
	if srcMap != nil {
		srcRT := ctdJoin(ctd, "runtimes", plan.name)
		for _, e := range src.exprs {
			if e.kind == unstable.ArrayTable && len(e.path) > len(srcRT) && ctdNamesEqual(e.path[:len(srcRT)], srcRT) {
				return plan, fmt.Errorf("containerd config line %d: cannot copy the array of tables %s", src.line(e.start), ctdPathText(ctdNames(e.path)))
			}
		}
		for _, kv := range src.kvs {
			if kv.val.kind == unstable.InlineTable || len(kv.path) <= len(srcRT) || !ctdNamesEqual(kv.path[:len(srcRT)], srcRT) {
				continue
			}
			rel := kv.path[len(srcRT):]
			text := string(src.data[kv.val.start:kv.val.end])
			switch {
			case rel[0].name == "options" && len(rel) == 1:
				return plan, fmt.Errorf("containerd config line %d: %s.options is not a table", src.line(kv.start), ctdPathText(srcRT))
			case rel[0].name == "options":
				if len(rel) == 2 && rel[1].name == "BinaryName" {
					if kv.val.kind == unstable.String && kv.val.str != o.BinaryName {
						plan.chain = kv.val.str
					}
					continue
				}
				optCopied = append(optCopied, ctdRawKey(rel[1:])+" = "+text)
			case ctdCopiedRuntimeKey(rel[0].name):
				rtCopied = append(rtCopied, ctdRawKey(rel)+" = "+text)
			}
		}
		if v, ok := srcMap["pod_annotations"].([]any); ok {
			for _, a := range v {
				if s, ok := a.(string); ok && !slices.Contains(annotations, s) {
					annotations = append(annotations, s)
				}
			}
		}
		for k, v := range srcMap {
			if ctdCopiedRuntimeKey(k) {
				plan.value[k] = ctdCopy(v)
			}
		}
		if m, ok := srcMap["options"].(map[string]any); ok {
			for k, v := range m {
				if k != "BinaryName" {
					optValues[k] = ctdCopy(v)
				}
			}
		}
	}
	for _, a := range o.PodAnnotations {
		if !slices.Contains(annotations, a) {
			annotations = append(annotations, a)
		}
	}
	plan.rtLines = append(plan.rtLines, "runtime_type = "+ctdQuote(ctdRuncV2))
	plan.value["runtime_type"] = ctdRuncV2
	if len(annotations) > 0 {
		q := make([]string, len(annotations))
		vals := make([]any, len(annotations))
		for i, a := range annotations {
			q[i], vals[i] = ctdQuote(a), a
		}
		plan.rtLines = append(plan.rtLines, "pod_annotations = ["+strings.Join(q, ", ")+"]")
		plan.value["pod_annotations"] = vals
	}
	plan.rtLines = append(plan.rtLines, rtCopied...)
	plan.optLines = append([]string{"BinaryName = " + ctdQuote(o.BinaryName)}, optCopied...)
	optValues["BinaryName"] = o.BinaryName
	plan.value["options"] = optValues
	return plan, nil
}

// ---------------------------------------------------------------------------
// Uninstall.

// ctdBlock is an appended block of an install, and the range that removes
// it.
type ctdBlock struct {
	from, to int
	tables   [][]string
	rootKeys []string
}

func (b ctdBlock) hasTable(path []string) bool {
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
func (d *ctdDoc) markerBlocks(ours func([]string) bool, rootKeys bool) []ctdBlock {
	var blocks []ctdBlock
	for i := 0; i < len(d.exprs); i++ {
		e := d.exprs[i]
		if e.kind != unstable.Comment || strings.TrimRight(e.text, " \t") != ctdMarker {
			continue
		}
		b := ctdBlock{}
		last, header := i, -1
	scan:
		for j := i + 1; j < len(d.exprs); j++ {
			n := d.exprs[j]
			switch n.kind {
			case unstable.KeyValue:
				name := ctdNames(n.path)
				rootKey := n.header < 0 && header < 0 && rootKeys && len(name) == 1 && (name[0] == "version" || name[0] == "imports")
				if !rootKey && (header < 0 || n.header != header) {
					break scan
				}
				if rootKey {
					b.rootKeys = append(b.rootKeys, name[0])
				}
			case unstable.Table:
				if !ours(ctdNames(n.path)) {
					break scan
				}
				header = j
				b.tables = append(b.tables, ctdNames(n.path))
			default:
				break scan
			}
			last = j
		}
		b.from, b.to = e.lineStart, d.exprs[last].lineEnd
		if b.from > 0 {
			from := b.from - 1
			if from > 0 && d.data[from-1] == '\r' {
				from--
			}
			// Take the newline the install added before the block, unless
			// that would join the line before with text after the block.
			if b.to == len(d.data) || (from > 0 && d.data[from-1] == '\n') {
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

// ctdAddImport returns the main config with path in its imports.
func ctdAddImport(d *ctdDoc, path string) ([]byte, error) {
	if d.empty {
		block := ctdMarker + d.nl + "version = 2" + d.nl + "imports = [" + ctdQuote(path) + "]" + d.nl
		if len(d.data) > 0 {
			block = d.nl + block
		}
		return append(slices.Clip(d.data), block...), nil
	}
	var edit ctdEdit
	if i := d.findKV([]string{"imports"}); i >= 0 {
		kv := d.kvs[i]
		if kv.val.kind != unstable.Array || kv.nested {
			return nil, fmt.Errorf("containerd config line %d: imports is not an array", d.line(kv.start))
		}
		var last *ctdVal
		for k := range kv.val.elems {
			el := &kv.val.elems[k]
			if el.kind != unstable.String {
				return nil, fmt.Errorf("containerd config line %d: imports has an element that is not a string", d.line(kv.start))
			}
			if el.str == path {
				return d.data, nil
			}
			if filepath.IsAbs(el.str) {
				if ok, _ := filepath.Match(el.str, path); ok {
					return d.data, nil
				}
			}
			last = el
		}
		if last == nil {
			edit = ctdEdit{start: kv.val.start + 1, end: kv.val.start + 1, text: ctdQuote(path)}
		} else {
			edit = ctdEdit{start: last.end, end: last.end, text: ", " + ctdQuote(path)}
		}
	} else {
		i := d.findKV([]string{"version"})
		if i < 0 || d.kvs[i].nested {
			return nil, errors.New("containerd config: no top-level version key to add imports after")
		}
		e := d.kvs[i].expr
		edit = d.insertAfter(e, d.indent(d.exprs[e]), "imports = ["+ctdQuote(path)+"] "+ctdMarker)
	}
	out, err := ctdApply(d.data, []ctdEdit{edit})
	if err != nil {
		return nil, err
	}
	if err := ctdCheckOnly(d, out, [][]string{{"imports"}}); err != nil {
		return nil, err
	}
	return out, nil
}

// removeImport returns the edit that removes path from the imports
// key/value kvi, or nil when it is not there.
func (d *ctdDoc) removeImport(kvi int, path string) *ctdEdit {
	kv := d.kvs[kvi]
	at := -1
	for k, el := range kv.val.elems {
		if el.kind == unstable.String && el.str == path {
			at = k
			break
		}
	}
	if at < 0 {
		return nil
	}
	e := d.exprs[kv.expr]
	if len(kv.val.elems) == 1 && !kv.nested && strings.TrimRight(e.text, " \t") == ctdMarker {
		from, to := d.lineRemoval(kv.expr)
		return &ctdEdit{start: from, end: to}
	}
	el := kv.val.elems[at]
	isBlank := func(c byte) bool { return c == ' ' || c == '\t' }
	i := el.start
	for i > kv.val.start && isBlank(d.data[i-1]) {
		i--
	}
	if at > 0 && d.data[i-1] == ',' {
		return &ctdEdit{start: i - 1, end: el.end}
	}
	j := el.end
	for j < kv.val.end && isBlank(d.data[j]) {
		j++
	}
	if j < kv.val.end && d.data[j] == ',' {
		j++
		for j < kv.val.end && isBlank(d.data[j]) {
			j++
		}
		return &ctdEdit{start: el.start, end: j}
	}
	return &ctdEdit{start: el.start, end: el.end}
}

// ctdCopySection returns the text of every table and key under prefix, for
// a drop-in that must carry the whole section.
func ctdCopySection(d *ctdDoc, prefix []string) (string, error) {
	var root, body strings.Builder
	emitted := map[int]bool{}
	line := func(b *strings.Builder, from, to int) {
		b.Write(d.data[from:to])
		if to == len(d.data) && (to == 0 || d.data[to-1] != '\n') {
			b.WriteString(d.nl)
		}
	}
	for i, e := range d.exprs {
		switch e.kind {
		case unstable.Table, unstable.ArrayTable:
			if len(e.path) < len(prefix) || !ctdNamesEqual(e.path[:len(prefix)], prefix) {
				continue
			}
			end := len(d.data)
			for j := i + 1; j < len(d.exprs); j++ {
				if k := d.exprs[j].kind; k == unstable.Table || k == unstable.ArrayTable {
					end = d.exprs[j].lineStart
					break
				}
			}
			line(&body, e.lineStart, end)
		case unstable.KeyValue:
			kv := d.kvs[e.kv]
			if e.header >= 0 {
				h := d.exprs[e.header].path
				if len(h) >= len(prefix) && ctdNamesEqual(h[:len(prefix)], prefix) {
					continue
				}
			}
			switch {
			case len(kv.path) >= len(prefix) && ctdNamesEqual(kv.path[:len(prefix)], prefix):
				if e.header < 0 {
					line(&root, e.lineStart, e.lineEnd)
					continue
				}
				if !emitted[e.header] {
					h := d.exprs[e.header]
					line(&body, h.lineStart, h.lineEnd)
					emitted[e.header] = true
				}
				line(&body, e.lineStart, e.lineEnd)
			case ctdNamesEqual(kv.path, prefix[:min(len(kv.path), len(prefix))]):
				return "", fmt.Errorf("containerd config line %d: %s is written inside %s = {...}; gpurun cannot copy it into a drop-in: use InstallContainerd", d.line(kv.start), ctdPathText(prefix), ctdPathText(ctdNames(kv.path)))
			}
		}
	}
	return root.String() + body.String(), nil
}

// ---------------------------------------------------------------------------
// Edits and checks.

// ctdEdit replaces data[start:end] with text.
type ctdEdit struct {
	start, end int
	text       string
}

// ctdApply applies non-overlapping edits; edits at the same offset keep
// their order.
func ctdApply(data []byte, edits []ctdEdit) ([]byte, error) {
	sorted := slices.Clone(edits)
	slices.SortStableFunc(sorted, func(a, b ctdEdit) int { return a.start - b.start })
	var out bytes.Buffer
	pos := 0
	for _, e := range sorted {
		if e.start < pos || e.end < e.start || e.end > len(data) {
			return nil, errors.New("containerd config: overlapping edits (a bug; nothing written)")
		}
		out.Write(data[pos:e.start])
		out.WriteString(e.text)
		pos = e.end
	}
	out.Write(data[pos:])
	return out.Bytes(), nil
}

// ctdDecode decodes TOML into a map.
func ctdDecode(data []byte) (map[string]any, error) {
	var m map[string]any
	if err := toml.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// ctdCheckOnly checks that out parses and differs from d only under the
// allowed paths (tables that became empty or appeared on the way to them
// included).
func ctdCheckOnly(d *ctdDoc, out []byte, allowed [][]string) error {
	got, err := ctdDecode(out)
	if err != nil {
		return fmt.Errorf("containerd config: gpurun's edit does not parse (a bug; nothing written): %w", err)
	}
	before, after := map[string]any{}, map[string]any{}
	ctdFlatten(d.tree, nil, before)
	ctdFlatten(got, nil, after)
	ok := func(key string) bool {
		path := strings.Split(key, "\x00")
		for _, a := range allowed {
			if len(path) >= len(a) && slices.Equal(path[:len(a)], a) {
				return true
			}
			if len(path) < len(a) && slices.Equal(path, a[:len(path)]) {
				return true // a table on the way
			}
		}
		return false
	}
	for k, v := range before {
		w, found := after[k]
		if _, same := ctdEqual(v, w, nil); (!found || !same) && !ok(k) {
			return fmt.Errorf("containerd config: refusing to edit: the result would change %s", ctdPathText(strings.Split(k, "\x00")))
		}
	}
	for k := range after {
		if _, found := before[k]; !found && !ok(k) {
			return fmt.Errorf("containerd config: refusing to edit: the result would add %s", ctdPathText(strings.Split(k, "\x00")))
		}
	}
	return nil
}

// ctdFlatten maps every leaf (and empty table) to its path joined by NUL.
func ctdFlatten(v any, path []string, out map[string]any) {
	if m, ok := v.(map[string]any); ok && (len(m) > 0 || path == nil) {
		for k, c := range m {
			ctdFlatten(c, append(slices.Clip(path), k), out)
		}
		return
	}
	out[strings.Join(path, "\x00")] = v
}

// ctdEqual compares decoded TOML values (NaN equals NaN) and returns the
// first path where they differ.
func ctdEqual(a, b any, path []string) ([]string, bool) {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok {
			return path, false
		}
		for k, v := range a {
			if p, ok := ctdEqual(v, bm[k], append(slices.Clip(path), k)); !ok {
				return p, false
			}
		}
		for k := range bm {
			if _, ok := a[k]; !ok {
				return append(slices.Clip(path), k), false
			}
		}
		return nil, true
	case []any:
		bs, ok := b.([]any)
		if !ok || len(a) != len(bs) {
			return path, false
		}
		for i := range a {
			if p, ok := ctdEqual(a[i], bs[i], append(slices.Clip(path), fmt.Sprint(i))); !ok {
				return p, false
			}
		}
		return nil, true
	case float64:
		bf, ok := b.(float64)
		if ok && (a == bf || math.IsNaN(a) && math.IsNaN(bf)) {
			return nil, true
		}
		return path, false
	case nil:
		return path, b == nil
	}
	if a != b {
		return path, false
	}
	return nil, true
}

// ctdCopy deep-copies a decoded TOML value.
func ctdCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, c := range v {
			m[k] = ctdCopy(c)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, c := range v {
			s[i] = ctdCopy(c)
		}
		return s
	}
	return v
}

// ctdGet returns the value at path.
func ctdGet(m map[string]any, path ...string) (any, bool) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// ctdSet sets the value at path, making tables on the way.
func ctdSet(m map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// ---------------------------------------------------------------------------
// Small helpers.

func ctdJoin(path []string, more ...string) []string {
	return append(slices.Clone(path), more...)
}

func ctdNames(parts []ctdPart) []string {
	s := make([]string, len(parts))
	for i, p := range parts {
		s[i] = p.name
	}
	return s
}

func ctdNamesEqual(parts []ctdPart, names []string) bool {
	if len(parts) != len(names) {
		return false
	}
	for i := range parts {
		if parts[i].name != names[i] {
			return false
		}
	}
	return true
}

// ctdRawKey writes key parts as they were written.
func ctdRawKey(parts []ctdPart) string {
	raws := make([]string, len(parts))
	for i, p := range parts {
		raws[i] = p.raw
	}
	return strings.Join(raws, ".")
}

// ctdKeyText writes a dotted key, quoting parts that are not bare keys.
func ctdKeyText(path []string) string {
	parts := make([]string, len(path))
	for i, p := range path {
		if ctdBare(p) {
			parts[i] = p
		} else {
			parts[i] = ctdQuote(p)
		}
	}
	return strings.Join(parts, ".")
}

// ctdPathText names a path for messages.
func ctdPathText(path []string) string {
	if len(path) == 0 {
		return "the document"
	}
	return ctdKeyText(path)
}

// ctdQuote writes s as a TOML basic string.
func ctdQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ctdQuoteLike writes s in the quoting style of old: a literal string
// ('...') when old was one and s fits, else a basic string.
func ctdQuoteLike(old, s string) string {
	if strings.HasPrefix(old, "'") && !strings.HasPrefix(old, "'''") && !strings.Contains(s, "'") && ctdPlainString(s) {
		return "'" + s + "'"
	}
	return ctdQuote(s)
}
