// Package tomledit edits TOML documents losslessly: it parses a document
// with go-toml's unstable parser, keeping the byte positions of every
// expression, key and value, finds keys and tables however they are
// written (a [table] header, dotted keys, an inline table), and builds
// edits that replace, insert or remove exact byte ranges, so that every
// byte an edit does not touch stays as it was: comments, layout, quoting,
// key order. CheckOnly re-parses the result of an edit and refuses it when
// the decoded document changed anywhere but where the edit meant to.
//
// Positions in errors follow package textpos: lines and columns from 1,
// columns in characters.
package tomledit

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/gpurun/gpurun/internal/cfgtree"
	"github.com/gpurun/gpurun/internal/textpos"
)

// Part is one part of a dotted key: as written (quotes included) and as
// decoded.
type Part struct {
	Raw, Name string
}

// Value is a value and where its text lies.
type Value struct {
	Kind       unstable.Kind
	Start, End int
	// Str is the decoded string, for strings.
	Str string
	// Elems are an array's elements: strings with Start, End and Str,
	// others with their Kind and Start -1.
	Elems []Value
}

// KeyValue is a key/value at any depth: top level, or inside an inline
// table.
type KeyValue struct {
	// Path is the full path: the table header's parts, then its own key's.
	Path []Part
	// Own is how many trailing parts of Path its own key wrote.
	Own int
	// Start and End enclose `key = value`.
	Start, End int
	Value      Value
	// Expr is the index of the top-level expression holding it.
	Expr int
	// Nested says it is inside an inline table.
	Nested bool
}

// Expr is a top-level expression: a comment line, a [table] or [[array]]
// header, or a key/value.
type Expr struct {
	Kind unstable.Kind
	// Start is its first byte, LineStart the start of its first line,
	// ContentEnd the end of its last line before the newline, LineEnd the
	// offset after that newline (or the end of the data).
	Start, LineStart, ContentEnd, LineEnd int
	// Path is a header's or key/value's full path.
	Path []Part
	// Header is a key/value's table header (an index in Doc.Exprs), -1
	// at the root.
	Header int
	// KV is a key/value's index in Doc.KVs.
	KV int
	// Text is a comment's text, or another expression's trailing comment.
	Text string
}

// Doc is a parsed document.
type Doc struct {
	// Name names the document in errors ("containerd config").
	Name string
	// Data is the document's bytes.
	Data []byte
	// NL is its line ending: "\r\n" when its first line ends so, else "\n".
	NL    string
	Exprs []Expr
	KVs   []KeyValue
	// Tree is the decoded document.
	Tree map[string]any
}

// Parse parses data; name is used in errors, which give the line and
// column of malformed TOML.
func Parse(name string, data []byte) (*Doc, error) {
	d := &Doc{Name: name, Data: data, NL: "\n"}
	if i := bytes.IndexByte(data, '\n'); i > 0 && data[i-1] == '\r' {
		d.NL = "\r\n"
	}
	tree, err := Decode(data)
	if err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, &SyntaxError{Name: name, Pos: textpos.Pos{Line: row, Column: charColumn(data, row, col)}, Err: err}
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d.Tree = tree
	if err := d.scan(); err != nil {
		return nil, err
	}
	return d, nil
}

// SyntaxError is a document that is not TOML, and where.
type SyntaxError struct {
	// Name is the document's, as given to Parse.
	Name string
	Pos  textpos.Pos
	// Err is go-toml's error.
	Err error
}

// Error writes "<name> line L, column C: <go-toml's error>".
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Name, e.Pos, e.Err)
}

// Unwrap returns go-toml's error.
func (e *SyntaxError) Unwrap() error { return e.Err }

// charColumn turns go-toml's byte column on a line into a column in
// characters.
func charColumn(data []byte, row, byteCol int) int {
	start := 0
	for i := 1; i < row; i++ {
		j := bytes.IndexByte(data[start:], '\n')
		if j < 0 {
			return byteCol
		}
		start += j + 1
	}
	end := min(start+byteCol-1, len(data))
	if end < start {
		return byteCol
	}
	return utf8.RuneCount(data[start:end]) + 1
}

// Decode decodes TOML into a map (an empty one for an empty document).
func Decode(data []byte) (map[string]any, error) {
	var m map[string]any
	if err := toml.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// Empty reports whether the document has no key and no table: nothing
// but comments and blank lines.
func (d *Doc) Empty() bool {
	for _, e := range d.Exprs {
		if e.Kind != unstable.Comment {
			return false
		}
	}
	return true
}

// scan records every top-level expression and every key/value with its
// position.
func (d *Doc) scan() error {
	var p unstable.Parser
	p.KeepComments = true
	p.Reset(d.Data)
	var table []Part
	header := -1
	for p.NextExpression() {
		n := p.Expression()
		idx := len(d.Exprs)
		switch n.Kind {
		case unstable.Comment:
			start := int(n.Raw.Offset)
			e := Expr{Kind: unstable.Comment, Start: start, Header: header, Text: string(n.Data)}
			d.lines(&e, start, start+int(n.Raw.Length))
			d.Exprs = append(d.Exprs, e)
		case unstable.Table, unstable.ArrayTable:
			parts, first, last := keyParts(&p, n.Key())
			e := Expr{Kind: n.Kind, Path: parts, Header: -1}
			d.lines(&e, first, last)
			e.Start = e.LineStart
			for e.Start < len(d.Data) && (d.Data[e.Start] == ' ' || d.Data[e.Start] == '\t') {
				e.Start++
			}
			if c := n.Next(); c != nil && c.Kind == unstable.Comment {
				e.Text = string(c.Data)
			}
			d.Exprs = append(d.Exprs, e)
			table, header = parts, idx
		case unstable.KeyValue:
			k, err := d.keyValue(&p, n, table, idx, false)
			if err != nil {
				return err
			}
			kv := d.KVs[k]
			e := Expr{Kind: unstable.KeyValue, Start: kv.Start, Path: kv.Path, Header: header, KV: k}
			d.lines(&e, kv.Start, kv.End)
			if c := n.Next(); c != nil && c.Kind == unstable.Comment {
				e.Text = string(c.Data)
			}
			d.Exprs = append(d.Exprs, e)
		}
	}
	if err := p.Error(); err != nil {
		return fmt.Errorf("%s: %w", d.Name, err)
	}
	return nil
}

// keyValue records the key/value n (under table) and, for inline tables,
// the ones inside it, and returns its index in d.KVs.
func (d *Doc) keyValue(p *unstable.Parser, n *unstable.Node, table []Part, expr int, nested bool) (int, error) {
	own, _, last := keyParts(p, n.Key())
	kv := KeyValue{
		Path:   append(slices.Clone(table), own...),
		Own:    len(own),
		Start:  int(n.Raw.Offset),
		End:    int(n.Raw.Offset + n.Raw.Length),
		Expr:   expr,
		Nested: nested,
	}
	// The value starts after the '=' following the last key part.
	i := last
	for i < kv.End && (d.Data[i] == ' ' || d.Data[i] == '\t') {
		i++
	}
	if i >= kv.End || d.Data[i] != '=' {
		return -1, fmt.Errorf("%s line %d: cannot find the '=' of key %s", d.Name, d.Line(kv.Start), PathText(Names(kv.Path)))
	}
	i++
	for i < kv.End && (d.Data[i] == ' ' || d.Data[i] == '\t') {
		i++
	}
	v := n.Value()
	kv.Value = Value{Kind: v.Kind, Start: i, End: kv.End}
	switch v.Kind {
	case unstable.String:
		kv.Value.Str = string(v.Data)
	case unstable.Array:
		it := v.Children()
		for it.Next() {
			c := it.Node()
			switch c.Kind {
			case unstable.Comment:
			case unstable.String:
				kv.Value.Elems = append(kv.Value.Elems, Value{Kind: c.Kind, Start: int(c.Raw.Offset), End: int(c.Raw.Offset + c.Raw.Length), Str: string(c.Data)})
			default:
				kv.Value.Elems = append(kv.Value.Elems, Value{Kind: c.Kind, Start: -1, End: -1})
			}
		}
	}
	idx := len(d.KVs)
	d.KVs = append(d.KVs, kv)
	if v.Kind == unstable.InlineTable {
		it := v.Children()
		for it.Next() {
			if c := it.Node(); c.Kind == unstable.KeyValue {
				if _, err := d.keyValue(p, c, kv.Path, expr, true); err != nil {
					return -1, err
				}
			}
		}
	}
	return idx, nil
}

// keyParts returns the parts of a key, the offset of its first byte and
// the offset after its last byte.
func keyParts(p *unstable.Parser, it unstable.Iterator) (parts []Part, first, last int) {
	first = -1
	for it.Next() {
		k := it.Node()
		if first < 0 {
			first = int(k.Raw.Offset)
		}
		last = int(k.Raw.Offset + k.Raw.Length)
		parts = append(parts, Part{Raw: string(p.Raw(k.Raw)), Name: string(k.Data)})
	}
	return parts, first, last
}

// lines sets the line positions of an expression spanning [start, end).
func (d *Doc) lines(e *Expr, start, end int) {
	e.LineStart = bytes.LastIndexByte(d.Data[:start], '\n') + 1
	j := bytes.IndexByte(d.Data[end:], '\n')
	if j < 0 {
		e.ContentEnd, e.LineEnd = len(d.Data), len(d.Data)
		return
	}
	e.LineEnd = end + j + 1
	e.ContentEnd = end + j
	if e.ContentEnd > end && d.Data[e.ContentEnd-1] == '\r' {
		e.ContentEnd--
	}
}

// Line returns the line (from 1) of an offset; 0 for a negative one.
func (d *Doc) Line(off int) int {
	if off < 0 {
		return 0
	}
	return textpos.Line(d.Data, off)
}

// FindKV returns the index in d.KVs of the key/value at path, or -1.
func (d *Doc) FindKV(path []string) int {
	for i, kv := range d.KVs {
		if NamesEqual(kv.Path, path) {
			return i
		}
	}
	return -1
}

// KVStart returns the offset of the key/value at path, or -1.
func (d *Doc) KVStart(path []string) int {
	if i := d.FindKV(path); i >= 0 {
		return d.KVs[i].Start
	}
	return -1
}

// Defines returns the offset where the document writes the key or table
// at path: its key/value, its [table] header, or the first key/value or
// header under it; -1 when it does not.
func (d *Doc) Defines(path []string) int {
	if off := d.KVStart(path); off >= 0 {
		return off
	}
	for _, e := range d.Exprs {
		if e.Kind != unstable.Comment && len(e.Path) >= len(path) && NamesEqual(e.Path[:len(path)], path) {
			return e.Start
		}
	}
	for _, kv := range d.KVs {
		if len(kv.Path) > len(path) && NamesEqual(kv.Path[:len(path)], path) {
			return kv.Start
		}
	}
	return -1
}

// Indent returns the indentation of an expression's line.
func (d *Doc) Indent(e Expr) string {
	return string(d.Data[e.LineStart:e.Start])
}

// LineRemoval returns the range that removes a one-line expression
// together with the newline before it, the inverse of InsertAfter.
func (d *Doc) LineRemoval(expr int) (int, int) {
	e := d.Exprs[expr]
	if e.LineStart == 0 {
		return 0, e.LineEnd
	}
	from := e.LineStart - 1
	if from > 0 && d.Data[from-1] == '\r' {
		from--
	}
	return from, e.ContentEnd
}

// InsertAfter returns the edit that adds line (without indentation or
// newline) after an expression's line, with the given indentation.
func (d *Doc) InsertAfter(expr int, indent, line string) Edit {
	e := d.Exprs[expr]
	return Edit{Start: e.ContentEnd, End: e.ContentEnd, Text: d.NL + indent + line}
}

// Form says how a table is defined.
type Form int

// The forms of a table.
const (
	Absent   Form = iota // nowhere
	Implicit             // only as the parent of other tables
	Header               // by a [table] header
	Dotted               // by dotted keys
	Inline               // it or a parent is an inline table
	NotTable             // it or a parent is a value or an array of tables
)

// Def locates the definition of a table.
type Def struct {
	Form Form
	// Expr is, for Header, the header; for Dotted, the last key/value
	// defining it; for the others the expression found, or -1.
	Expr int
	// Off is where, for errors; -1 for Absent.
	Off int
}

// Def finds how the table at path is defined.
func (d *Doc) Def(path []string) Def {
	for _, kv := range d.KVs {
		if len(kv.Path) <= len(path) && NamesEqual(kv.Path, path[:len(kv.Path)]) {
			if kv.Value.Kind == unstable.InlineTable {
				return Def{Form: Inline, Expr: kv.Expr, Off: kv.Start}
			}
			return Def{Form: NotTable, Expr: kv.Expr, Off: kv.Start}
		}
	}
	for i, e := range d.Exprs {
		if e.Kind == unstable.ArrayTable && len(e.Path) <= len(path) && NamesEqual(e.Path, path[:len(e.Path)]) {
			return Def{Form: NotTable, Expr: i, Off: e.Start}
		}
	}
	for i, e := range d.Exprs {
		if e.Kind == unstable.Table && NamesEqual(e.Path, path) {
			return Def{Form: Header, Expr: i, Off: e.Start}
		}
	}
	def := Def{Form: Absent, Expr: -1, Off: -1}
	for i, e := range d.Exprs {
		switch e.Kind {
		case unstable.KeyValue:
			kv := d.KVs[e.KV]
			if len(kv.Path) > len(path) && NamesEqual(kv.Path[:len(path)], path) && len(kv.Path)-kv.Own < len(path) {
				def = Def{Form: Dotted, Expr: i, Off: e.Start}
			}
		case unstable.Table, unstable.ArrayTable:
			if def.Form == Absent && len(e.Path) > len(path) && NamesEqual(e.Path[:len(path)], path) {
				def = Def{Form: Implicit, Expr: i, Off: e.Start}
			}
		}
	}
	return def
}

// DottedPrefix returns how the key/value of expression expr writes the key
// of the table at path, for a sibling key such as `containerd.x = 1`.
func (d *Doc) DottedPrefix(expr int, path []string) string {
	kv := d.KVs[d.Exprs[expr].KV]
	from := len(kv.Path) - kv.Own
	raws := make([]string, 0, len(path)-from)
	for _, p := range kv.Path[from:len(path)] {
		raws = append(raws, p.Raw)
	}
	return strings.Join(raws, ".")
}

// HeaderIndent returns the indentation for a key inserted after header
// expr: that of the key/value after it, else the header's plus two spaces.
func (d *Doc) HeaderIndent(expr int) string {
	if expr+1 < len(d.Exprs) {
		if n := d.Exprs[expr+1]; n.Kind == unstable.KeyValue && n.Header == expr {
			return d.Indent(n)
		}
	}
	return d.Indent(d.Exprs[expr]) + "  "
}

// SetKey returns the edit that gives the key at table+key the value text
// (TOML, as written), where the key does not exist yet: a line after the
// table's header, or a dotted key after the last one that defines the
// table. It reports ok false when the table must be appended instead
// because it is not defined by a header or dotted keys, and an error when
// it is (inside) an inline table or not a table.
func (d *Doc) SetKey(table []string, key, value string) (e Edit, ok bool, err error) {
	def := d.Def(table)
	switch def.Form {
	case Header:
		return d.InsertAfter(def.Expr, d.HeaderIndent(def.Expr), key+" = "+value), true, nil
	case Dotted:
		prefix := d.DottedPrefix(def.Expr, table)
		return d.InsertAfter(def.Expr, d.Indent(d.Exprs[def.Expr]), prefix+"."+key+" = "+value), true, nil
	case Inline:
		return Edit{}, false, fmt.Errorf("%s line %d: %s is (inside) an inline table; gpurun will not rewrite it: write it as a [%s] table", d.Name, d.Line(def.Off), PathText(table), PathText(table))
	case NotTable:
		return Edit{}, false, fmt.Errorf("%s line %d: %s is not a table", d.Name, d.Line(def.Off), PathText(table))
	}
	return Edit{}, false, nil
}

// RemoveArrayElement returns the edit that removes element at of the
// array key/value kvi, with the comma and blanks that separate it from a
// neighbour, or with its line when it has one of its own.
func (d *Doc) RemoveArrayElement(kvi, at int) Edit {
	kv := d.KVs[kvi]
	el := kv.Value.Elems[at]
	isBlank := func(c byte) bool { return c == ' ' || c == '\t' }
	// An element on a line of its own goes with its line.
	ls := bytes.LastIndexByte(d.Data[:el.Start], '\n') + 1
	if ls > kv.Value.Start && len(bytes.Trim(d.Data[ls:el.Start], " \t")) == 0 {
		j := el.End
		for j < kv.Value.End && isBlank(d.Data[j]) {
			j++
		}
		if j < kv.Value.End && d.Data[j] == ',' {
			j++
		}
		for j < kv.Value.End && (isBlank(d.Data[j]) || d.Data[j] == '\r') {
			j++
		}
		if j < kv.Value.End && d.Data[j] == '\n' {
			return Edit{Start: ls, End: j + 1}
		}
	}
	i := el.Start
	for i > kv.Value.Start && isBlank(d.Data[i-1]) {
		i--
	}
	if at > 0 && d.Data[i-1] == ',' {
		return Edit{Start: i - 1, End: el.End}
	}
	j := el.End
	for j < kv.Value.End && isBlank(d.Data[j]) {
		j++
	}
	if j < kv.Value.End && d.Data[j] == ',' {
		j++
		for j < kv.Value.End && isBlank(d.Data[j]) {
			j++
		}
		return Edit{Start: el.Start, End: j}
	}
	return Edit{Start: el.Start, End: el.End}
}

// Edit replaces Data[Start:End] with Text.
type Edit struct {
	Start, End int
	Text       string
}

// Apply applies non-overlapping edits to data; edits at the same offset
// keep their order.
func Apply(data []byte, edits []Edit) ([]byte, error) {
	sorted := slices.Clone(edits)
	slices.SortStableFunc(sorted, func(a, b Edit) int { return a.Start - b.Start })
	var out bytes.Buffer
	pos := 0
	for _, e := range sorted {
		if e.Start < pos || e.End < e.Start || e.End > len(data) {
			return nil, errors.New("overlapping edits (a bug; nothing written)")
		}
		out.Write(data[pos:e.Start])
		out.WriteString(e.Text)
		pos = e.End
	}
	out.Write(data[pos:])
	return out.Bytes(), nil
}

// CheckOnly checks that out, the result of an edit of d, parses and
// differs from d only under the allowed paths (tables that became empty or
// appeared on the way to them included).
func (d *Doc) CheckOnly(out []byte, allowed [][]string) error {
	got, err := Decode(out)
	if err != nil {
		return fmt.Errorf("%s: gpurun's edit does not parse (a bug; nothing written): %w", d.Name, err)
	}
	c, found := cfgtree.Only(d.Tree, got, allowed)
	switch {
	case !found:
		return nil
	case c.Added:
		return fmt.Errorf("%s: refusing to edit: the result would add %s", d.Name, PathText(c.Path))
	default:
		return fmt.Errorf("%s: refusing to edit: the result would change %s", d.Name, PathText(c.Path))
	}
}

// CheckIntent checks that out parses and decodes to want.
func (d *Doc) CheckIntent(out []byte, want map[string]any) error {
	got, err := Decode(out)
	if err != nil {
		return fmt.Errorf("%s: gpurun's edit does not parse (a bug; nothing written): %w", d.Name, err)
	}
	if p, ok := cfgtree.Equal(want, got); !ok {
		return fmt.Errorf("%s: refusing to edit: the result would differ at %s from what gpurun intends", d.Name, PathText(p))
	}
	return nil
}
