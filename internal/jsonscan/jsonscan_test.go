package jsonscan

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestSkip: Skip ends each kind of value where encoding/json does, inside
// an object or alone.
func TestSkip(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{`"a\"b,}"`, `"a\"b,}"`},
		{`{"a": [1, {"b": "}"}], "c": null}`, `{"a": [1, {"b": "}"}], "c": null}`},
		{`[ ]`, `[ ]`},
		{`12.5e3, "x"`, `12.5e3`},
		{`true}`, `true`},
		{`null ]`, `null`},
	} {
		if end := Skip([]byte(tt.doc), 0); tt.doc[:end] != tt.want {
			t.Errorf("Skip(%q) ends at %q, want %q", tt.doc, tt.doc[:end], tt.want)
		}
	}
}

// TestString: String unescapes as encoding/json does, and returns the
// offset past the closing quote.
func TestString(t *testing.T) {
	for _, doc := range []string{`"plain"`, `"tab\there"`, `"\u00e9t\u00e9"`, `"quote \" and \\"`, "\"bad \xff utf8\""} {
		var want string
		_ = json.Unmarshal([]byte(doc), &want)
		got, end := String([]byte(doc+" ,"), 0)
		if got != want || end != len(doc) {
			t.Errorf("String(%q) = %q, %d; want %q, %d", doc, got, end, want, len(doc))
		}
	}
}

// TestObject: Object locates every member, its key unescaped and its
// value's bytes exact, whatever the white space.
func TestObject(t *testing.T) {
	doc := []byte("{\n  \"a\" : 1,\"b\\u0041\":{\"x\":[1,2]} ,\r\n\t\"c\": \"s\"\n}")
	members, end := Object(doc, 0)
	if end != len(doc)-1 {
		t.Errorf("close at %d, want %d", end, len(doc)-1)
	}
	var got [][2]string
	for _, m := range members {
		got = append(got, [2]string{m.Key, string(doc[m.ValStart:m.ValEnd])})
		if doc[m.KeyStart] != '"' || doc[m.KeyEnd-1] != '"' {
			t.Errorf("key %q at %d..%d is not its quotes", m.Key, m.KeyStart, m.KeyEnd)
		}
	}
	want := [][2]string{{"a", "1"}, {"bA", `{"x":[1,2]}`}, {"c", `"s"`}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("members %v, want %v", got, want)
	}
	if members, end := Object([]byte("{ }"), 0); len(members) != 0 || end != 2 {
		t.Errorf("empty object: %v, %d", members, end)
	}
}

// TestSpace: Space steps over JSON's four blanks and nothing else.
func TestSpace(t *testing.T) {
	if i := Space([]byte(" \t\r\n\v"), 0); i != 4 {
		t.Errorf("Space stopped at %d, want 4 (before \\v)", i)
	}
}
