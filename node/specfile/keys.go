package specfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gpurun/gpurun/internal/jsonscan"
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
		"linux": {"devices": nil, "namespaces": nil, "resources": {"memory": nil}, "cgroupspath": nil},
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

// walk reads config.json once. It refuses a document in which an object
// gpurun reads holds the same key twice, or — outside the spec's maps — two
// keys that encoding/json (and so runc) folds into one field ("mounts" and
// "Mounts", or "mountſ" with the long s). Each reader would take the last,
// but which of them the engine meant is anybody's guess: no engine writes
// such a document, and gpurun does not size a container (or grow a pod's
// tmpfs) on a guess. The top-level object and the parts readKeys names are
// checked; the rest (a seccomp profile is most of Docker's config.json) is
// stepped over, and runc decodes and checks it itself. The parts readKeys
// names are copied into walked.proj, so that decoding specFields reads a
// few hundred bytes instead of the document.
//
// The document is checked with json.Valid first, and then walked byte by
// byte: encoding/json's token API took ~200 µs of a cold gpurun-runtime
// for Docker's config.json, the walk a few. An invalid document is refused
// without a position; callers that report it decode the document with
// json.Unmarshal for a message with an offset.
func walk(data []byte) (walked, error) {
	if !json.Valid(data) {
		return walked{}, errors.New("not valid JSON")
	}
	w := &walker{data: data}
	w.space()
	if w.i >= len(data) || data[w.i] != '{' {
		return walked{}, errNotObject
	}
	w.proj = append(make([]byte, 0, 2048), '{')
	if err := w.object(false, readKeys(), false, true, true); err != nil {
		return walked{}, err
	}
	w.proj = append(w.proj, '}')
	return walked{members: w.top, close: w.i - 1, proj: w.proj}, nil
}

// walker is one walk's state: the document (valid JSON), the offset it
// has reached, the projection written so far and the top-level members
// read so far.
type walker struct {
	data []byte
	i    int
	proj []byte
	top  []member
}

// space steps over white space.
func (w *walker) space() { w.i = jsonscan.Space(w.data, w.i) }

// str steps over the string at w.i and returns it, unescaped.
func (w *walker) str() string {
	s, i := jsonscan.String(w.data, w.i)
	w.i = i
	return s
}

// skip steps over the value at w.i.
func (w *walker) skip() { w.i = jsonscan.Skip(w.data, w.i) }

// value checks the value at w.i, under key: every object in it when whole,
// else the parts rule names.
func (w *walker) value(key string, rule keyRule, whole bool) error {
	w.space()
	switch w.data[w.i] {
	case '{':
		isMap := slices.ContainsFunc(mapFields, func(f string) bool { return strings.EqualFold(key, f) })
		return w.object(isMap, rule, whole, false, false)
	case '[':
		return w.eachElement(func() error { return w.value("", rule, whole) })
	}
	w.skip() // a scalar
	return nil
}

// object checks the keys of the object at w.i, and then its values as
// value does; a value neither whole nor named by rule is stepped over.
// With project, the members rule names are appended to the projection (the
// caller writes the braces); with top, every member's place is noted.
func (w *walker) object(isMap bool, rule keyRule, whole, project, top bool) error {
	var keys []string
	return w.eachMember(func(k string, keyEnd int) error {
		for _, seen := range keys {
			switch {
			case seen == k:
				return fmt.Errorf("ambiguous document: key %q twice in one object (offset %d)", k, keyEnd)
			case !isMap && strings.EqualFold(seen, k):
				return fmt.Errorf("ambiguous keys %q and %q: one field to encoding/json and runc (offset %d)", seen, k, keyEnd)
			}
		}
		keys = append(keys, k)
		start := w.i
		sub, named := lookupFold(rule, k)
		var err error
		switch {
		case whole:
			err = w.value(k, nil, true)
		case named && project:
			if w.proj[len(w.proj)-1] != '{' {
				w.proj = append(w.proj, ',')
			}
			w.proj = append(appendJSONString(w.proj, k), ':')
			err = w.projected(k, sub, start)
		case named:
			err = w.value(k, sub, sub == nil)
		default:
			w.skip()
		}
		if err == nil && top {
			w.top = append(w.top, member{key: k, start: start, end: w.i})
		}
		return err
	})
}

// eachMember steps through the object at w.i: for each member, it reads
// the key and calls f with it, the offset just past it, and w.i at the
// value, which f steps over. It leaves w.i past the closing brace.
func (w *walker) eachMember(f func(key string, keyEnd int) error) error {
	w.i++ // '{'
	for w.space(); w.data[w.i] != '}'; w.space() {
		k := w.str()
		keyEnd := w.i
		w.space()
		w.i++ // ':'
		w.space()
		if err := f(k, keyEnd); err != nil {
			return err
		}
		w.comma()
	}
	w.i++
	return nil
}

// eachElement steps through the list at w.i, calling f with w.i at each
// element, which f steps over. It leaves w.i past the closing bracket.
func (w *walker) eachElement(f func() error) error {
	w.i++ // '['
	for w.space(); w.data[w.i] != ']'; w.space() {
		if err := f(); err != nil {
			return err
		}
		w.comma()
	}
	w.i++
	return nil
}

// comma steps over the white space and the comma after a member or an
// element, if there is one.
func (w *walker) comma() {
	w.space()
	if w.data[w.i] == ',' {
		w.i++
	}
}

// projected checks the value that starts at start and appends it to the
// projection: an object that rule looks into, member by member; anything
// else as it is written.
func (w *walker) projected(key string, rule keyRule, start int) error {
	if rule == nil || w.data[w.i] != '{' { // null, or a type the decoder will refuse
		if err := w.value(key, rule, rule == nil); err != nil {
			return err
		}
		w.proj = append(w.proj, w.data[start:w.i]...)
		return nil
	}
	w.proj = append(w.proj, '{')
	if err := w.object(false, rule, false, true, false); err != nil {
		return err
	}
	w.proj = append(w.proj, '}')
	return nil
}

// plain reads the value at w.i as encoding/json decodes valid JSON into an
// any with UseNumber: objects as map[string]any, lists as []any, numbers
// as json.Number, strings, booleans and nil (a later key replaces an
// earlier one). The walk already knows where each value ends; this spares
// a cold gpurun-runtime encoding/json's general decoder.
func (w *walker) plain() any {
	w.space()
	switch w.data[w.i] {
	case '{':
		m := map[string]any{}
		_ = w.eachMember(func(k string, _ int) error { m[k] = w.plain(); return nil })
		return m
	case '[':
		l := []any{}
		_ = w.eachElement(func() error { l = append(l, w.plain()); return nil })
		return l
	case '"':
		return w.str()
	case 't':
		w.i += len("true")
		return true
	case 'f':
		w.i += len("false")
		return false
	case 'n':
		w.i += len("null")
		return nil
	}
	start := w.i
	w.skip()
	return json.Number(w.data[start:w.i])
}

// elements steps over the list at w.i and returns the span of each of its
// elements.
func (w *walker) elements() [][2]int {
	var spans [][2]int
	_ = w.eachElement(func() error {
		start := w.i
		w.skip()
		spans = append(spans, [2]int{start, w.i})
		return nil
	})
	return spans
}

// members steps over the object at w.i and returns its members and the
// offset of its closing brace.
func (w *walker) members() ([]member, int) {
	var ms []member
	w.space()
	_ = w.eachMember(func(k string, _ int) error {
		start := w.i
		w.skip()
		ms = append(ms, member{key: k, start: start, end: w.i})
		return nil
	})
	return ms, w.i - 1
}

// appendJSONStrings appends ss as a JSON list of strings.
func appendJSONStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
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
		if strings.EqualFold(k, key) {
			return sub, true
		}
	}
	return nil, false
}
