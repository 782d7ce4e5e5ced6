// Package textpos turns byte offsets into the positions gpurun reports
// about a file, in one convention for every message: lines and columns
// count from 1, and a column counts characters (UTF-8 code points; a byte
// that is not valid UTF-8 counts as one), not bytes, so that "column 14"
// is where an editor shows it also on a line with Korean or Chinese text.
// JSONOffset finds the offset of the byte an encoding/json error is about.
package textpos

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Pos is a position in a text: Line and Column from 1, Column in
// characters.
type Pos struct {
	Line, Column int
}

// String writes the position as "line L, column C".
func (p Pos) String() string {
	return fmt.Sprintf("line %d, column %d", p.Line, p.Column)
}

// Of returns the position of the byte at offset in data. An offset past the
// end is the end of data (the position after its last character); a
// negative one is the start.
func Of(data []byte, offset int) Pos {
	offset = min(max(offset, 0), len(data))
	before := data[:offset]
	start := bytes.LastIndexByte(before, '\n') + 1
	return Pos{
		Line:   bytes.Count(before, []byte{'\n'}) + 1,
		Column: utf8.RuneCount(before[start:]) + 1,
	}
}

// Line returns the line (from 1) of the byte at offset in data.
func Line(data []byte, offset int) int {
	return Of(data, offset).Line
}

// endOfInput is the message of encoding/json's error for a document that
// stops in the middle of a value.
const endOfInput = "unexpected end of JSON input"

// JSONOffset returns the offset in data of the byte an encoding/json
// decoding error is about, and whether err carries one: for a syntax error
// the offending byte (json.SyntaxError counts the bytes read, that one
// included), or the end of data when the input stops too early; for a type
// error the offset the decoder reports (just after the value it could not
// use).
func JSONOffset(data []byte, err error) (int, bool) {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off := int(se.Offset)
		if se.Error() != endOfInput {
			off--
		}
		return min(max(off, 0), len(data)), true
	case errors.As(err, &te):
		return min(max(int(te.Offset), 0), len(data)), true
	}
	return 0, false
}

// JSONError returns err prefixed with the position JSONOffset finds in
// data, as "name:L:C: err" (name is left out when empty), or err as it is
// when it carries no offset.
func JSONError(name string, data []byte, err error) error {
	off, ok := JSONOffset(data, err)
	if !ok {
		if name == "" {
			return err
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	p := Of(data, off)
	if name == "" {
		return fmt.Errorf("%s: %w", p, err)
	}
	return fmt.Errorf("%s:%d:%d: %w", name, p.Line, p.Column, err)
}
