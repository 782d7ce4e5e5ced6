// Package jsonscan steps through a JSON document that is already known to
// be valid (encoding/json checked it, or the caller refuses what it cannot
// read), by byte offsets, without decoding what it steps over: the one
// scanner under gpurun's two JSON editors — daemon.json's
// (engine/docker), which keeps every byte it does not change, and
// config.json's (node/specfile), which reads a few keys of a large
// document on every container start.
package jsonscan

import (
	"encoding/json"
	"unicode/utf8"
)

// Space returns the offset of the first byte at or after i that is not
// JSON white space.
func Space(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// SkipString returns the offset just past the string whose opening quote
// is at i.
func SkipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// String returns the string whose opening quote is at i, unescaped as
// encoding/json reads it (invalid UTF-8 becomes U+FFFD), and the offset
// just past it.
func String(data []byte, i int) (string, int) {
	start := i
	plain := true
	for i++; i < len(data); i++ {
		switch c := data[i]; {
		case c == '\\':
			plain = false
			i++
		case c == '"':
			i++
			raw := data[start:i]
			if plain && utf8.Valid(raw) {
				return string(raw[1 : len(raw)-1]), i
			}
			var s string
			_ = json.Unmarshal(raw, &s) // valid JSON: a string
			return s, i
		}
	}
	return string(data[start:]), i
}

// Skip returns the offset just past the value that starts at i: a string,
// an object or an array with all it holds, or a number or literal (up to
// the byte that ends it).
func Skip(data []byte, i int) int {
	depth := 0
	for i < len(data) {
		switch data[i] {
		case '"':
			i = SkipString(data, i)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a number or a literal
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i // the end of a number or a literal
			}
		}
		i++
	}
	return i
}

// Member is one member of an object, located in the document.
type Member struct {
	// Key is the key, unescaped.
	Key string
	// KeyStart and KeyEnd are the key's quotes (inclusive, exclusive);
	// ValStart and ValEnd its value's bytes.
	KeyStart, KeyEnd, ValStart, ValEnd int
}

// Object locates the members of the object whose '{' is at open, and
// returns them with the offset of its '}'.
func Object(data []byte, open int) (members []Member, close int) {
	i := Space(data, open+1)
	for i < len(data) && data[i] != '}' {
		if data[i] == ',' {
			i = Space(data, i+1)
		}
		var m Member
		m.KeyStart = i
		m.Key, m.KeyEnd = String(data, i)
		i = Space(data, m.KeyEnd)
		i = Space(data, i+1) // the colon
		m.ValStart = i
		m.ValEnd = Skip(data, i)
		members = append(members, m)
		i = Space(data, m.ValEnd)
	}
	return members, i
}
