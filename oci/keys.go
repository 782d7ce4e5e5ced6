package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// mapFields are the spec's fields whose JSON objects are maps, not
// structs: encoding/json matches their keys exactly, not case-folded.
var mapFields = []string{"annotations", "sysctl"}

// A keyRule says which parts of a JSON object walk reads: the keys it
// names, each by its own rule, where a nil rule reads the value whole.
type keyRule map[string]keyRule

// readKeys are the parts of the spec gpurun reads (specFields). walk
// checks the keys of the objects on the way to them and in them, copies
// them out, and skips the rest of the document.
func readKeys() keyRule {
	return keyRule{
		"process": nil, "root": nil, "mounts": nil, "hooks": nil, "annotations": nil,
		"linux": {"devices": nil, "namespaces": nil, "resources": {"memory": nil}},
	}
}

// errNotObject is walk's refusal of a document that is not a JSON object.
var errNotObject = errors.New("not a JSON object")

// walked is what one walk of config.json learns: where each top-level
// member's value lies, where the top-level object closes, and the parts
// readKeys names as a JSON document of their own.
type walked struct {
	members []member
	close   int
	proj    []byte
}

// walk reads config.json once with a json.Decoder. It refuses a document in
// which an object gpurun reads holds the same key twice, or — outside the
// spec's maps — two keys that encoding/json (and so runc) folds into one
// field ("mounts" and "Mounts", or "mountſ" with the long s). Each reader
// would take the last, but which of them the engine meant is anybody's
// guess: no engine writes such a document, and gpurun does not size a
// container (or grow a pod's tmpfs) on a guess. The top-level object and
// the parts readKeys names are checked; the rest (a seccomp profile is most
// of Docker's config.json) is read past once, and runc decodes and checks
// it itself. The parts readKeys names are copied into walked.proj, so that
// decoding specFields reads a few hundred bytes instead of the document.
//
// An error from the decoder is its own; callers that report it decode the
// document with json.Unmarshal for a message with an offset.
func walk(data []byte) (walked, error) {
	w := &walker{dec: json.NewDecoder(bytes.NewReader(data)), data: data}
	tok, err := w.dec.Token()
	if err != nil {
		return walked{}, err
	}
	if tok != json.Delim('{') {
		return walked{}, errNotObject
	}
	w.proj = append(make([]byte, 0, 2048), '{')
	if err := w.object(false, readKeys(), false, true, true); err != nil {
		return walked{}, err
	}
	w.proj = append(w.proj, '}')
	end := int(w.dec.InputOffset()) // just past the closing brace
	if _, err := w.dec.Token(); err != io.EOF {
		return walked{}, fmt.Errorf("data after the top-level object (offset %d)", end)
	}
	return walked{members: w.top, close: end - 1, proj: w.proj}, nil
}

// walker is one walk's state.
type walker struct {
	dec  *json.Decoder
	data []byte
	proj []byte   // the projection written so far
	top  []member // the top-level members read so far
}

// value checks the value that follows, under key: every object in it when
// whole, else the parts rule names.
func (w *walker) value(key string, rule keyRule, whole bool) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	return w.valueFrom(tok, key, rule, whole)
}

// valueFrom is value for a value whose first token has been read.
func (w *walker) valueFrom(tok json.Token, key string, rule keyRule, whole bool) error {
	switch tok {
	case json.Delim('{'):
		isMap := slices.ContainsFunc(mapFields, func(f string) bool { return bytes.EqualFold([]byte(key), []byte(f)) })
		return w.object(isMap, rule, whole, false, false)
	case json.Delim('['):
		for w.dec.More() {
			if err := w.value("", rule, whole); err != nil {
				return err
			}
		}
		_, err := w.dec.Token() // ']'
		return err
	}
	return nil // a scalar
}

// object checks the keys of the object whose '{' the decoder has just read,
// and then its values as value does; a value neither whole nor named by
// rule is skipped. With project, the members rule names are appended to
// the projection (the caller writes the braces); with top, every member's
// place is noted.
func (w *walker) object(isMap bool, rule keyRule, whole, project, top bool) error {
	var keys []string
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		k, _ := tok.(string)
		for _, seen := range keys {
			switch {
			case seen == k:
				return fmt.Errorf("ambiguous document: key %q twice in one object (offset %d)", k, w.dec.InputOffset())
			case !isMap && bytes.EqualFold([]byte(seen), []byte(k)):
				return fmt.Errorf("ambiguous keys %q and %q: one field to encoding/json and runc (offset %d)", seen, k, w.dec.InputOffset())
			}
		}
		keys = append(keys, k)
		start := w.valueStart()
		sub, named := lookupFold(rule, k)
		switch {
		case whole:
			err = w.value(k, nil, true)
		case named && project:
			if len(w.proj) > 0 && w.proj[len(w.proj)-1] != '{' {
				w.proj = append(w.proj, ',')
			}
			w.proj = append(appendJSONString(w.proj, k), ':')
			err = w.projected(k, sub, start)
		case named:
			err = w.value(k, sub, sub == nil)
		default:
			var skip json.RawMessage
			err = w.dec.Decode(&skip)
		}
		if err != nil {
			return err
		}
		if top {
			w.top = append(w.top, member{key: k, start: start, end: int(w.dec.InputOffset())})
		}
	}
	_, err := w.dec.Token() // '}'
	return err
}

// projected checks the value that starts at start and appends it to the
// projection: an object that rule looks into, member by member; anything
// else as it is written.
func (w *walker) projected(key string, rule keyRule, start int) error {
	if rule == nil {
		if err := w.value(key, nil, true); err != nil {
			return err
		}
		w.proj = append(w.proj, w.data[start:w.dec.InputOffset()]...)
		return nil
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') { // null, or a type the decoder will refuse
		if err := w.valueFrom(tok, key, rule, false); err != nil {
			return err
		}
		w.proj = append(w.proj, w.data[start:w.dec.InputOffset()]...)
		return nil
	}
	w.proj = append(w.proj, '{')
	if err := w.object(false, rule, false, true, false); err != nil {
		return err
	}
	w.proj = append(w.proj, '}')
	return nil
}

// valueStart is the offset of the value that follows the key the decoder
// has just read: past the white space and the colon.
func (w *walker) valueStart() int {
	i := int(w.dec.InputOffset())
	for i < len(w.data) && (w.data[i] == ':' || w.data[i] == ' ' || w.data[i] == '\t' || w.data[i] == '\n' || w.data[i] == '\r') {
		i++
	}
	return i
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] >= 0x20 && s[i] < utf8.RuneSelf && s[i] != '"' && s[i] != '\\'
	}
	if plain {
		return append(append(append(b, '"'), s...), '"')
	}
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// lookupFold finds key in rule as encoding/json matches a struct's fields:
// case-folded.
func lookupFold(rule keyRule, key string) (keyRule, bool) {
	for k, sub := range rule {
		if bytes.EqualFold([]byte(k), []byte(key)) {
			return sub, true
		}
	}
	return nil, false
}
