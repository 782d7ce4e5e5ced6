package yamledit

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"
)

// service returns the key and value nodes of services.<name> in the first
// document of f.
func service(t *testing.T, f *File, name string) (k, v *yaml.Node) {
	t.Helper()
	_, services := Get(f.Docs[0].Content[0], "services")
	k, v = Get(services, name)
	if k == nil {
		t.Fatalf("no service %q", name)
	}
	return k, Resolve(v)
}

func TestInsertFirst(t *testing.T) {
	tests := []struct {
		name, in, service, want string
		wantErr                 string
	}{
		{
			name:    "block",
			in:      "services:\n  gpu:\n    image: x\n",
			service: "gpu",
			want:    "services:\n  gpu:\n    shm_size: 8gb\n    image: x\n",
		},
		{
			name:    "comments stay with the first key, tabs in comments kept",
			in:      "services:\n  gpu: # the trainer\n  # \tits\timage:\n    # pinned\n    image: x # tag\n\n  cpu:\n    image: y\n",
			service: "gpu",
			want:    "services:\n  gpu: # the trainer\n    shm_size: 8gb\n  # \tits\timage:\n    # pinned\n    image: x # tag\n\n  cpu:\n    image: y\n",
		},
		{
			name:    "CRLF",
			in:      "services:\r\n  gpu:\r\n      image: x\r\n",
			service: "gpu",
			want:    "services:\r\n  gpu:\r\n      shm_size: 8gb\r\n      image: x\r\n",
		},
		{
			name:    "anchor on the key line, merge key first",
			in:      "x: &b\n  tty: true\nservices:\n  gpu: &g\n    <<: *b\n    image: x\n",
			service: "gpu",
			want:    "x: &b\n  tty: true\nservices:\n  gpu: &g\n    shm_size: 8gb\n    <<: *b\n    image: x\n",
		},
		{
			name:    "tag on a line of its own",
			in:      "services:\n  gpu:\n    !!map\n    image: x\n",
			service: "gpu",
			want:    "services:\n  gpu:\n    !!map\n    shm_size: 8gb\n    image: x\n",
		},
		{
			name:    "quoted service key, no final line break",
			in:      "services:\n  \"gpu\":\n   image: x",
			service: "gpu",
			want:    "services:\n  \"gpu\":\n   shm_size: 8gb\n   image: x",
		},
		{
			name:    "flow service",
			in:      "services:\n  gpu: {image: x, gpus: all}\n",
			service: "gpu",
			want:    "services:\n  gpu: {shm_size: 8gb, image: x, gpus: all}\n",
		},
		{
			name:    "flow service with blanks and a quoted key",
			in:      "services: { gpu: { 'image': x } }\n",
			service: "gpu",
			want:    "services: { gpu: { shm_size: 8gb, 'image': x } }\n",
		},
		{
			name:    "empty flow service",
			in:      "services:\n  gpu: {}\n",
			service: "gpu",
			want:    "services:\n  gpu: {shm_size: 8gb}\n",
		},
		{
			name:    "multi-line flow service",
			in:      "services:\n  gpu: {\n    image: x,\n    gpus: all\n  }\n",
			service: "gpu",
			want:    "services:\n  gpu: {\n    shm_size: 8gb, image: x,\n    gpus: all\n  }\n",
		},
		{
			name:    "non-ASCII before a flow key",
			in:      "services: {\"é\": {a: 1}, gpu: {image: x}}\n",
			service: "gpu",
			want:    "services: {\"é\": {a: 1}, gpu: {shm_size: 8gb, image: x}}\n",
		},
		{
			name:    "anchored first key of a flow mapping keeps its anchor",
			in:      "services:\n  gpu: {&a image: x}\n",
			service: "gpu",
			want:    "services:\n  gpu: {shm_size: 8gb, &a image: x}\n",
		},
		{
			name:    "explicit key syntax is refused",
			in:      "services:\n  gpu:\n    ? image\n    : x\n",
			service: "gpu",
			wantErr: "unsupported layout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("c.yml", []byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			k, m := service(t, f, tt.service)
			e, err := f.InsertFirst(k, m, "shm_size", "8gb")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("InsertFirst error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			out, err := f.Apply([]Edit{e})
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.want {
				t.Errorf("got\n%q\nwant\n%q", out, tt.want)
			}
		})
	}
}

func TestReplaceScalar(t *testing.T) {
	tests := []struct{ in, want string }{
		{"services:\n  gpu:\n    shm_size: 64m # small\n", "services:\n  gpu:\n    shm_size: 1gb # small\n"},
		{"services:\n  gpu:\n    shm_size: \"64m\"\n", "services:\n  gpu:\n    shm_size: \"1gb\"\n"},
		{"services:\n  gpu:\n    shm_size: '64m'\r\n", "services:\n  gpu:\n    shm_size: '1gb'\r\n"},
		{"services: {gpu: {shm_size: 64m, image: x}}\n", "services: {gpu: {shm_size: 1gb, image: x}}\n"},
	}
	for _, tt := range tests {
		f, err := Parse("c.yml", []byte(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		_, m := service(t, f, "gpu")
		_, v := Get(m, "shm_size")
		e, err := f.ReplaceScalar(v, "1gb")
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		out, err := f.Apply([]Edit{e})
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		if string(out) != tt.want {
			t.Errorf("got %q, want %q", out, tt.want)
		}
	}
}

func TestSyntaxErrorPosition(t *testing.T) {
	tests := []struct{ in, want string }{
		// parser errors
		{"services:\n  gpu:\n    image: [x\n", "c.yml:4:1: did not find expected ',' or ']'"},
		{"services:\n  gpu: x\n bad: y\n", "c.yml:3:2: did not find expected key"},
		{"a: 1\nb: {x: 1\n", "c.yml:3:1: did not find expected ',' or '}'"},
		// scanner errors
		{"services:\n\tgpu: x\n", "c.yml:2:1: found character that cannot start any token"},
		{"a: 1\nb: 2\n  c: 3\n", "c.yml:3:4: mapping values are not allowed in this context"},
		{"a: 1\nb: \"open\n", "c.yml:3:1: found unexpected end of stream (while scanning a quoted scalar at line 2, column 4)"},
		// composer errors
		{"a: 1\nb: *nope\n", "c.yml:2:4: unknown anchor 'nope' referenced"},
	}
	for _, tt := range tests {
		_, err := Parse("c.yml", []byte(tt.in))
		var pe *Error
		if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error = %v, want *Error starting with %q", tt.in, err, tt.want)
		}
	}
}

func TestApplyRefusesAChangedTree(t *testing.T) {
	f, err := Parse("c.yml", []byte("services:\n  gpu:\n    image: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	k, m := service(t, f, "gpu")
	e, err := f.InsertFirst(k, m, "shm_size", "8gb")
	if err != nil {
		t.Fatal(err)
	}
	bad := e
	bad.Text = "    shm_size: 8gb\n    extra: 1\n"
	if _, err := f.Apply([]Edit{bad}); err == nil {
		t.Error("Apply accepted an edit that adds more than the entry")
	}
	bad = e
	bad.Text = "shm_size: 8gb\n"
	if _, err := f.Apply([]Edit{bad}); err == nil {
		t.Error("Apply accepted an edit at the wrong indentation")
	}
	if _, err := f.Apply([]Edit{e, e}); err == nil {
		t.Error("Apply accepted overlapping edits")
	}
}

func TestInherits(t *testing.T) {
	src := `
x-a: &a
  tty: true
x-b: &b
  shm_size: 1g
services:
  base: &base
    <<: *a
  plain:
    <<: *base
  own:
    <<: *base
    shm_size: 2g
  earlier:
    <<: [*b, *base]
  later:
    <<: [*base, *b]
  alias: *base
`
	f, err := Parse("c.yml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, base := service(t, f, "base")
	for name, want := range map[string]bool{"base": true, "plain": true, "own": false, "earlier": false, "later": true, "alias": true} {
		_, m := service(t, f, name)
		if got := Inherits(m, base, "shm_size"); got != want {
			t.Errorf("Inherits(%s, base) = %v, want %v", name, got, want)
		}
	}
}

func TestSources(t *testing.T) {
	src := `
x-a: &a
  tty: true
x-b: &b
  <<: *a
  shm_size: 1g
services:
  base: &base
    <<: *a
  plain:
    image: x
  nested:
    <<: [*b, *base]
  alias: *base
`
	f, err := Parse("c.yml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	root := f.Docs[0].Content[0]
	anchor := func(name string) *yaml.Node {
		_, v := Get(root, name)
		return v
	}
	_, base := service(t, f, "base")
	tests := []struct {
		service string
		want    []*yaml.Node
	}{
		{"plain", nil}, // itself only: checked below
		{"base", []*yaml.Node{anchor("x-a")}},
		{"nested", []*yaml.Node{anchor("x-b"), anchor("x-a"), base, anchor("x-a")}},
		{"alias", []*yaml.Node{anchor("x-a")}},
	}
	for _, tt := range tests {
		_, m := service(t, f, tt.service)
		want := append([]*yaml.Node{Resolve(m)}, tt.want...)
		if got := Sources(m); !slices.Equal(got, want) {
			t.Errorf("Sources(%s): %d mappings %v, want %d", tt.service, len(got), got, len(want))
		}
	}
}

func TestSplitLines(t *testing.T) {
	src := []byte("a\r\nb\rc\nd\u2028e\u0085f")
	var got []string
	for _, l := range splitLines(src) {
		got = append(got, string(src[l.start:l.end])+"|"+string(src[l.end:l.next]))
	}
	want := []string{"a|\r\n", "b|\r", "c|\n", "d|\u2028", "e|\u0085", "f|"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("splitLines = %q, want %q", got, want)
	}
}
