package yamledit

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Edit is one change to a file's bytes: Src[Offset:Offset+Delete] becomes
// Text. It remembers the node it changes so that Apply can check the
// result.
type Edit struct {
	Offset int
	Delete int
	Text   string
	// Line is the 1-based line the edit starts on in the original file.
	Line int

	mapping    *yaml.Node // InsertFirst: the mapping that gains key: value
	key, value string
	scalar     *yaml.Node // ReplaceScalar: the scalar whose value becomes value
}

// InsertFirst returns the edit that makes "key: value" the first entry of
// mapping m, whose own key in its parent mapping is parentKey.
//
// In a block mapping the entry goes on a line of its own, right under the
// parent key (after any line holding the mapping's anchor or tag, before
// any comment on the first entry), indented like the mapping's first key
// and ended with the line break of the line before it. In a flow mapping
// it goes right before the first key ("{key: value, image: x}"), or
// inside an empty one ("{key: value}"). Layouts where that place cannot
// be told for sure are an error, never a guess.
func (f *File) InsertFirst(parentKey, m *yaml.Node, key, value string) (Edit, error) {
	if m == nil || m.Kind != yaml.MappingNode {
		return Edit{}, f.Errorf(parentKey, "not a mapping")
	}
	e := Edit{mapping: m, key: key, value: value}
	entry := key + ": " + value
	if m.Style&yaml.FlowStyle != 0 {
		return f.insertFlow(m, e, entry)
	}
	if len(m.Content) == 0 || parentKey == nil {
		return Edit{}, f.Errorf(m, "cannot add %s here: unsupported layout", key)
	}
	first := m.Content[0]
	fl, kl := first.Line-1, parentKey.Line-1
	if fl <= kl || fl >= len(f.lines) {
		return Edit{}, f.Errorf(first, "cannot add %s: the mapping starts on the line of its key", key)
	}
	line := f.line(fl)
	indent := first.Column - 1
	if indent > len(line) || strings.Trim(string(line[:indent]), " ") != "" {
		return Edit{}, f.Errorf(first, "cannot add %s: unsupported layout before the first key", key)
	}
	// The line goes after the last line between the parent key and the
	// first entry that holds anything but blanks and comments (an anchor
	// or tag on a line of its own), else right after the parent key.
	at := kl
	for l := fl - 1; l > kl; l-- {
		if !blankOrComment(f.line(l)) {
			at = l
			break
		}
	}
	sp := f.lines[at]
	eol := string(f.Src[sp.end:sp.next])
	if eol == "" {
		return Edit{}, f.Errorf(first, "cannot add %s: no line break after line %d", key, at+1)
	}
	e.Offset = sp.next
	e.Line = at + 2
	e.Text = string(line[:indent]) + entry + eol
	return e, nil
}

func (f *File) insertFlow(m *yaml.Node, e Edit, entry string) (Edit, error) {
	if len(m.Content) == 0 {
		off, err := f.offset(m.Line, m.Column)
		if err != nil {
			return Edit{}, f.Errorf(m, "cannot add %s: %v", e.key, err)
		}
		// m's position is its "{", or the anchor or tag before it.
		l := f.lines[m.Line-1]
		i := bytes.IndexByte(f.Src[off:l.end], '{')
		if i < 0 || !bytes.HasPrefix(bytes.TrimLeft(f.Src[off+i+1:l.end], " \t"), []byte("}")) {
			return Edit{}, f.Errorf(m, "cannot add %s: unsupported layout of an empty flow mapping", e.key)
		}
		e.Offset, e.Line, e.Text = off+i+1, m.Line, entry
		return e, nil
	}
	first := m.Content[0]
	off, err := f.offset(first.Line, first.Column)
	if err != nil {
		return Edit{}, f.Errorf(first, "cannot add %s: %v", e.key, err)
	}
	// Only blanks may stand between the "{" (or the start of the line)
	// and the first key; an anchor, tag or "?" there belongs to the key.
	l := f.lines[first.Line-1]
	before := bytes.TrimRight(f.Src[l.start:off], " \t")
	if len(before) > 0 && before[len(before)-1] != '{' {
		return Edit{}, f.Errorf(first, "cannot add %s: unsupported layout before the first key", e.key)
	}
	e.Offset, e.Line, e.Text = off, first.Line, entry+", "
	return e, nil
}

// ReplaceScalar returns the edit that changes the single-line scalar n to
// value, keeping its quoting style.
func (f *File) ReplaceScalar(n *yaml.Node, value string) (Edit, error) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return Edit{}, f.Errorf(n, "not a scalar")
	}
	off, err := f.offset(n.Line, n.Column)
	if err != nil {
		return Edit{}, f.Errorf(n, "cannot change the value: %v", err)
	}
	rest := f.Src[off:f.lines[n.Line-1].end]
	var size int
	var text string
	switch n.Style {
	case yaml.DoubleQuotedStyle:
		size = quotedLen(rest, '"')
		text = `"` + value + `"`
	case yaml.SingleQuotedStyle:
		size = quotedLen(rest, '\'')
		text = "'" + value + "'"
	case 0:
		if bytes.HasPrefix(rest, []byte(n.Value)) {
			size = len(n.Value)
		}
		if size < len(rest) && !bytes.ContainsAny(rest[size:size+1], " \t,]}#") {
			size = 0
		}
		text = value
	}
	if size == 0 || strings.ContainsAny(value, "\"'\\\n\r#:{}[],&*!|>%@`") {
		return Edit{}, f.Errorf(n, "cannot change the value %q in place: unsupported style", n.Value)
	}
	return Edit{Offset: off, Delete: size, Text: text, Line: n.Line, scalar: n, value: value}, nil
}

// quotedLen returns the length of the quoted scalar at the start of b,
// closing quote included, or 0 when it does not close on this line.
func quotedLen(b []byte, q byte) int {
	if len(b) == 0 || b[0] != q {
		return 0
	}
	for i := 1; i < len(b); i++ {
		switch {
		case q == '"' && b[i] == '\\':
			i++
		case b[i] == q && q == '\'' && i+1 < len(b) && b[i+1] == '\'':
			i++
		case b[i] == q:
			return i + 1
		}
	}
	return 0
}

// Apply applies edits to the file and checks the result: it must parse,
// and its tree must be the original tree with exactly the edits' changes
// (the inserted entries, the replaced values) and nothing else. Edits must
// not overlap.
func (f *File) Apply(edits []Edit) ([]byte, error) {
	if len(edits) == 0 {
		return f.Src, nil
	}
	sorted := slices.Clone(edits)
	slices.SortStableFunc(sorted, func(a, b Edit) int { return a.Offset - b.Offset })
	var out bytes.Buffer
	out.Grow(len(f.Src) + 64*len(edits))
	pos := 0
	for _, e := range sorted {
		if e.Offset < pos || e.Offset+e.Delete > len(f.Src) {
			return nil, &Error{File: f.Name, Line: e.Line, Msg: "overlapping edits"}
		}
		out.Write(f.Src[pos:e.Offset])
		out.WriteString(e.Text)
		pos = e.Offset + e.Delete
	}
	out.Write(f.Src[pos:])
	result := out.Bytes()
	if err := f.verify(result, sorted); err != nil {
		return nil, err
	}
	return result, nil
}

// verify parses result and compares it with the original tree.
func (f *File) verify(result []byte, edits []Edit) error {
	after, err := Parse(f.Name, result)
	if err != nil {
		return fmt.Errorf("the edited file does not parse: %w", err)
	}
	if len(after.Docs) != len(f.Docs) {
		return &Error{File: f.Name, Msg: "the edited file has a different number of documents"}
	}
	c := comparer{inserts: map[*yaml.Node]Edit{}, replaces: map[*yaml.Node]Edit{}, seen: map[*yaml.Node]bool{}}
	for _, e := range edits {
		if e.mapping != nil {
			c.inserts[e.mapping] = e
		}
		if e.scalar != nil {
			c.replaces[e.scalar] = e
		}
	}
	for i := range f.Docs {
		if n := c.diff(f.Docs[i], after.Docs[i]); n != nil {
			return f.Errorf(n, "the edited file differs from the original here: refusing the edit")
		}
	}
	for m, e := range c.inserts {
		if !c.seen[m] {
			return f.Errorf(m, "the edited file lacks the added %s", e.key)
		}
	}
	for n, e := range c.replaces {
		if !c.seen[n] {
			return f.Errorf(n, "the edited file lacks the changed value %s", e.value)
		}
	}
	return nil
}

type comparer struct {
	inserts, replaces map[*yaml.Node]Edit
	seen              map[*yaml.Node]bool
}

// diff returns the first node of a (the original) whose counterpart in b
// differs in more than the expected edits, or nil.
func (c *comparer) diff(a, b *yaml.Node) *yaml.Node {
	if a.Kind != b.Kind || a.Tag != b.Tag || a.Anchor != b.Anchor || a.Style != b.Style {
		return a
	}
	bc := b.Content
	switch a.Kind {
	case yaml.AliasNode:
		if a.Value != b.Value {
			return a
		}
		return nil
	case yaml.ScalarNode:
		want := a.Value
		if e, ok := c.replaces[a]; ok {
			want = e.value
			c.seen[a] = true
		}
		if b.Value != want {
			return a
		}
		return nil
	case yaml.MappingNode:
		if e, ok := c.inserts[a]; ok {
			if len(bc) != len(a.Content)+2 || bc[0].Kind != yaml.ScalarNode || bc[0].Value != e.key ||
				bc[1].Kind != yaml.ScalarNode || bc[1].Value != e.value || bc[0].Anchor != "" || bc[1].Anchor != "" {
				return a
			}
			c.seen[a] = true
			bc = bc[2:]
		}
	}
	if len(a.Content) != len(bc) {
		return a
	}
	for i := range a.Content {
		if n := c.diff(a.Content[i], bc[i]); n != nil {
			return n
		}
	}
	return nil
}
