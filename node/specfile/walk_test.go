package specfile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// walkTokens is walk as first written, with encoding/json's token API: the
// reference the byte-by-byte walk is checked against.
func walkTokens(data []byte) (walked, error) {
	w := &tokenWalker{dec: json.NewDecoder(bytes.NewReader(data)), data: data}
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

// tokenWalker is one walk's state.
type tokenWalker struct {
	dec  *json.Decoder
	data []byte
	proj []byte   // the projection written so far
	top  []member // the top-level members read so far
}

// value checks the value that follows, under key: every object in it when
// whole, else the parts rule names.
func (w *tokenWalker) value(key string, rule keyRule, whole bool) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	return w.valueFrom(tok, key, rule, whole)
}

// valueFrom is value for a value whose first token has been read.
func (w *tokenWalker) valueFrom(tok json.Token, key string, rule keyRule, whole bool) error {
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
func (w *tokenWalker) object(isMap bool, rule keyRule, whole, project, top bool) error {
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
func (w *tokenWalker) projected(key string, rule keyRule, start int) error {
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
func (w *tokenWalker) valueStart() int {
	i := int(w.dec.InputOffset())
	for i < len(w.data) && (w.data[i] == ':' || w.data[i] == ' ' || w.data[i] == '\t' || w.data[i] == '\n' || w.data[i] == '\r') {
		i++
	}
	return i
}

// FuzzWalk checks walk against walkTokens: the same verdict, members,
// closing brace and projection for any document.
func FuzzWalk(f *testing.F) {
	fuzzSeeds(f, func(data []byte) { f.Add(data) })
	for _, doc := range []string{`{"mounts": [], "Mounts": []}`, `{"a":1,"b":[1,{"c":2}],"linux":{"resources":{"memory":{"limit":1}}}}`, `{"mo\u0075nts":[{"x":"\"}"}]}`, ` {} `, `[]`, `{"a":1}x`} {
		f.Add([]byte(doc))
	}
	files, _ := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := walk(data)
		want, wantErr := walkTokens(data)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("walk: %v; the token walk: %v\n%s", err, wantErr, data)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(got.members, want.members) || got.close != want.close || !bytes.Equal(got.proj, want.proj) {
			t.Fatalf("walk = %+v %d %s\nthe token walk = %+v %d %s\n%s", got.members, got.close, got.proj, want.members, want.close, want.proj, data)
		}
	})
}

// decodeFields answers for every captured config.json (else each container
// start would pay for encoding/json's reflection) and agrees with
// encoding/json wherever it answers, on the projection of any document.
func TestDecodeFields(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		w, err := walk(data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if _, ok := decodeFields(w.proj); !ok {
			t.Errorf("%s: decodeFields left it to encoding/json", filepath.Base(file))
		}
		checkDecodeFields(t, w.proj)
	}
	for _, proj := range []string{
		`{"process":{"Args":["a"],"ENV":[]},"root":{"path":"r","readonly":true},"mounts":[]}`,
		`{"mounts":[{"destination":"/d","options":null,"uidMappings":[{"containerID":0,"hostID":1,"size":1}]}]}`,
		`{"mounts":[null]}`, `{"mounts":{}}`, `{"process":null,"linux":null,"hooks":null,"annotations":null}`,
		`{"annotations":{"a":"1","A":"2"}}`, `{"annotations":{"a":null}}`, `{"annotations":{"a":1}}`,
		`{"hooks":{"prestart":[{"path":"/h","timeout":5}],"poststop":[{"x":1}]}}`, `{"hooks":{"prestart":[{"path":"/h","timeout":1.5}]}}`,
		`{"linux":{"devices":[{"path":"/dev/nvidia0","type":"c","major":195,"minor":0,"fileMode":438,"uid":0,"gid":null}]}}`,
		`{"linux":{"devices":[{"major":-1}]}}`, `{"linux":{"devices":[{"uid":-1}]}}`, `{"linux":{"devices":[{"uid":4294967296}]}}`,
		`{"linux":{"namespaces":[{"type":"ipc","path":"/proc/1/ns/ipc"}],"resources":{"memory":{"limit":9223372036854775807}}}}`,
		`{"linux":{"resources":{"memory":{"limit":1e3}}}}`, `{"linux":{"resources":{"memory":null}}}`, `{"linux":{"resources":null}}`,
		`{"root":{"readonly":"yes"}}`, `{"process":{"args":"sh"}}`, `{"process":{"args":[1]}}`, `{"mountſ":[]}`, `{"process":{"argſ":["a"]}}`,
	} {
		checkDecodeFields(t, []byte(proj))
	}
}

// FuzzDecodeFields checks decodeFields against encoding/json on any
// projection walk writes.
func FuzzDecodeFields(f *testing.F) {
	fuzzSeeds(f, func(data []byte) { f.Add(data) })
	f.Fuzz(func(t *testing.T, data []byte) {
		if w, err := walk(data); err == nil {
			checkDecodeFields(t, w.proj)
		}
	})
}

func checkDecodeFields(t *testing.T, proj []byte) {
	t.Helper()
	got, ok := decodeFields(proj)
	if !ok {
		return
	}
	var want specFields
	if err := json.Unmarshal(proj, &want); err != nil {
		t.Fatalf("decodeFields took what encoding/json refuses (%v): %s", err, proj)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeFields(%s)\n= %s\nencoding/json: %s", proj, dump(got), dump(want))
	}
}

func dump(f specFields) string {
	b, _ := json.Marshal(f)
	return fmt.Sprintf("%s (process %v, linux %v)", b, f.Process != nil, f.Linux != nil)
}

// FuzzPlain checks the walker's plain values against encoding/json's
// decoding into an any with UseNumber, on any valid JSON.
func FuzzPlain(f *testing.F) {
	fuzzSeeds(f, func(data []byte) { f.Add(data) })
	for _, doc := range []string{`{"a":[1,-2.5e3,"x\u00e9\"",true,false,null,{}],"b":{"c":[]},"a":0}`, `"\ud83d\ude00"`, `[]`, ` 7 `, "\"\xff\""} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		if got := (&walker{data: data}).plain(); !reflect.DeepEqual(got, want) {
			t.Fatalf("plain(%s) = %#v, encoding/json: %#v", data, got, want)
		}
	})
}
