// Package yamledit changes YAML text losslessly: it parses a file into
// nodes that know their line and column, and edits the original bytes at
// those positions, so that everything it does not touch (comments, blank
// lines, key order, quoting, anchors, aliases and merge keys, flow style,
// document markers, line endings) stays byte for byte.
//
// No YAML library round-trips real files unchanged (they drop blank lines,
// re-indent lists, rewrite merge keys and line endings), so the edits here
// are plain insertions and replacements of text; every result is parsed
// again and compared with the original tree before it is returned.
package yamledit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"
)

// Error is a problem at a place in a file.
type Error struct {
	File         string
	Line, Column int // 1-based; 0 when unknown
	Msg          string
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// File is a YAML file parsed for editing.
type File struct {
	// Name is the file's path, used in errors.
	Name string
	// Src is the file's content.
	Src []byte
	// Docs are the file's documents (yaml.DocumentNode), in order.
	Docs  []*yaml.Node
	lines []span
}

// span is one line of Src: its content is Src[start:end], its line break
// Src[end:next].
type span struct{ start, end, next int }

// yamlErrorPos finds the position libyaml reports last in an error
// message: "yaml: while parsing X at line 2, column 6: line 3: did not find
// expected ',' or ']'" is at line 3, column 1 (libyaml leaves out a column
// of 1).
var yamlErrorPos = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`line (\d+)(?:, column (\d+))?: `)
})

// Parse reads every document in src. A syntax error is an *Error naming
// the file, line and column.
func Parse(name string, src []byte) (*File, error) {
	f := &File{Name: name, Src: src, lines: splitLines(src)}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, syntaxError(name, err)
		}
		f.Docs = append(f.Docs, &doc)
	}
	return f, nil
}

func syntaxError(name string, err error) error {
	msg := err.Error()
	locs := yamlErrorPos().FindAllStringSubmatchIndex(msg, -1)
	if len(locs) == 0 {
		msg = strings.TrimPrefix(msg, "yaml: ")
		return &Error{File: name, Msg: strings.TrimPrefix(msg, "<unknown position>: ")}
	}
	last := locs[len(locs)-1]
	line, _ := strconv.Atoi(msg[last[2]:last[3]])
	col := 1
	if last[4] >= 0 {
		col, _ = strconv.Atoi(msg[last[4]:last[5]])
	}
	text := msg[last[1]:]
	// go.yaml.in/yaml/v4 (v4.0.0-rc.4) prints the marks of its parser's
	// errors with 0-based lines and those of its composer's with columns
	// one too far; its scanner's are right. TestSyntaxErrorPosition pins
	// this down.
	switch fmt.Sprintf("%T", err) {
	case "libyaml.ParserError":
		line++
	case "*libyaml.ParserError":
		col = max(col-1, 1)
	case "libyaml.ScannerError":
		// Keep the scanner's context ("while scanning a quoted scalar at
		// line 3, column 4"): it says where the token that failed began.
		if i := strings.Index(msg[:last[0]], "while "); i >= 0 {
			if ctx := strings.TrimSuffix(msg[i:last[0]], ": "); strings.Contains(ctx, "line ") {
				text += " (" + ctx + ")"
			}
		}
	}
	return &Error{File: name, Line: line, Column: col, Msg: text}
}

// Errorf returns an *Error at node n's position.
func (f *File) Errorf(n *yaml.Node, format string, args ...any) error {
	e := &Error{File: f.Name, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// splitLines splits src at the line breaks libyaml counts: "\r\n", "\r",
// "\n", and the Unicode NEL, LS and PS.
func splitLines(src []byte) []span {
	var out []span
	start := 0
	for i := 0; i < len(src); {
		n := breakLen(src[i:])
		if n == 0 {
			i++
			continue
		}
		out = append(out, span{start, i, i + n})
		i += n
		start = i
	}
	if start < len(src) || len(src) == 0 {
		out = append(out, span{start, len(src), len(src)})
	}
	return out
}

// breakLen returns the length of the line break at the start of b, or 0.
func breakLen(b []byte) int {
	switch {
	case len(b) == 0:
		return 0
	case b[0] == '\r':
		if len(b) > 1 && b[1] == '\n' {
			return 2
		}
		return 1
	case b[0] == '\n':
		return 1
	case b[0] == 0xC2 && len(b) > 1 && b[1] == 0x85: // NEL
		return 2
	case b[0] == 0xE2 && len(b) > 2 && b[1] == 0x80 && (b[2] == 0xA8 || b[2] == 0xA9): // LS, PS
		return 3
	}
	return 0
}

// offset returns the byte offset of a 1-based line and column (libyaml
// counts columns in characters), or an error when the file has no such
// place.
func (f *File) offset(line, col int) (int, error) {
	if line < 1 || line > len(f.lines) || col < 1 {
		return 0, fmt.Errorf("no line %d, column %d", line, col)
	}
	l := f.lines[line-1]
	i := l.start
	if line == 1 && bytes.HasPrefix(f.Src, []byte("\xEF\xBB\xBF")) {
		i += 3 // libyaml does not count the byte order mark
	}
	for c := 1; c < col; c++ {
		if i >= l.end {
			return 0, fmt.Errorf("no line %d, column %d", line, col)
		}
		_, size := utf8.DecodeRune(f.Src[i:l.end])
		i += size
	}
	return i, nil
}

// line returns the content of the 0-based line i.
func (f *File) line(i int) []byte {
	l := f.lines[i]
	return f.Src[l.start:l.end]
}

// blankOrComment reports whether a line holds nothing but blanks and,
// possibly, a comment.
func blankOrComment(line []byte) bool {
	t := bytes.TrimLeft(line, " \t")
	return len(t) == 0 || t[0] == '#'
}
