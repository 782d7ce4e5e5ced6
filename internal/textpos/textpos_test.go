package textpos

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		off  int
		want Pos
	}{
		{"start", "abc", 0, Pos{1, 1}},
		{"first line", "abc", 2, Pos{1, 3}},
		{"end", "abc", 3, Pos{1, 4}},
		{"past the end", "abc", 99, Pos{1, 4}},
		{"negative", "abc", -5, Pos{1, 1}},
		{"second line", "ab\ncd", 4, Pos{2, 2}},
		{"on the newline", "ab\ncd", 2, Pos{1, 3}},
		{"just after the newline", "ab\ncd", 3, Pos{2, 1}},
		{"CRLF counts the CR on its line", "ab\r\ncd", 3, Pos{1, 4}},
		{"characters, not bytes", "{\"tag\": \"학습\" x}", len("{\"tag\": \"학습\" "), Pos{1, 14}},
		{"invalid UTF-8 counts one per byte", "\xff\xfex", 2, Pos{1, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of([]byte(tc.data), tc.off); got != tc.want {
				t.Errorf("Of(%q, %d) = %v, want %v", tc.data, tc.off, got, tc.want)
			}
		})
	}
	if s := (Pos{3, 7}).String(); s != "line 3, column 7" {
		t.Errorf("String() = %q", s)
	}
}

func TestJSONError(t *testing.T) {
	type doc struct {
		N int `json:"n"`
	}
	for _, tc := range []struct {
		name, data, want string
	}{
		{"missing comma", "{\n  \"a\": 1\n  \"b\": 2\n}", "f.json:3:3: invalid character '\"'"},
		{"trailing comma", "{\n\t\"a\": 1,\n}", "f.json:3:1: invalid character '}'"},
		{"truncated", "{\"a\":1", "f.json:1:7: unexpected end of JSON input"},
		{"empty", "", "f.json:1:1: unexpected end of JSON input"},
		{"bad byte after Korean", "{\"tag\": \"학습\" x}", "f.json:1:14: invalid character 'x'"},
		{"type error", "{\n  \"n\": \"x\"}", "f.json:2:11: json: cannot unmarshal string into Go struct field doc.n of type int"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := JSONError("f.json", []byte(tc.data), json.Unmarshal([]byte(tc.data), new(doc)))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("got %v, want the prefix %q", err, tc.want)
			}
		})
	}
	plain := errors.New("no position")
	if err := JSONError("f.json", nil, plain); err.Error() != "f.json: no position" || !errors.Is(err, plain) {
		t.Errorf("got %v", err)
	}
	if err := JSONError("", []byte("{"), json.Unmarshal([]byte("{"), new(doc))); err == nil || !strings.HasPrefix(err.Error(), "line 1, column 2: ") {
		t.Errorf("without a name: %v", err)
	}
}
