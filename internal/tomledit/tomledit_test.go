package tomledit

import (
	"math"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/cfgtree"
)

const sample = `# a comment
version = 2 # trailing

[plugins."io.x".containerd]
  default_runtime_name = 'crun'
  runtimes.crun.options = { BinaryName = "/usr/bin/crun", Root = "/r" }

[a]
  dotted.key = 1
  arr = ["x", 2, "y"]  # three
`

func parse(t *testing.T, data string) *Doc {
	t.Helper()
	d, err := Parse("test doc", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestParsePositions(t *testing.T) {
	d := parse(t, sample)
	if d.Empty() || d.NL != "\n" {
		t.Errorf("Empty %v, NL %q", d.Empty(), d.NL)
	}
	for _, tc := range []struct {
		path     []string
		line     int
		valueRaw string
		str      string
		nested   bool
	}{
		{[]string{"version"}, 2, "2", "", false},
		{[]string{"plugins", "io.x", "containerd", "default_runtime_name"}, 5, "'crun'", "crun", false},
		{[]string{"plugins", "io.x", "containerd", "runtimes", "crun", "options", "BinaryName"}, 6, `"/usr/bin/crun"`, "/usr/bin/crun", true},
		{[]string{"a", "dotted", "key"}, 9, "1", "", false},
		{[]string{"a", "arr"}, 10, `["x", 2, "y"]`, "", false},
	} {
		i := d.FindKV(tc.path)
		if i < 0 {
			t.Errorf("%v: not found", tc.path)
			continue
		}
		kv := d.KVs[i]
		if got := d.Line(kv.Start); got != tc.line {
			t.Errorf("%v: line %d, want %d", tc.path, got, tc.line)
		}
		if got := string(d.Data[kv.Value.Start:kv.Value.End]); got != tc.valueRaw {
			t.Errorf("%v: value text %q, want %q", tc.path, got, tc.valueRaw)
		}
		if kv.Value.Str != tc.str || kv.Nested != tc.nested {
			t.Errorf("%v: str %q nested %v", tc.path, kv.Value.Str, kv.Nested)
		}
	}
	arr := d.KVs[d.FindKV([]string{"a", "arr"})]
	if len(arr.Value.Elems) != 3 || arr.Value.Elems[0].Str != "x" || arr.Value.Elems[1].Start != -1 || arr.Value.Elems[2].Str != "y" {
		t.Errorf("array elements %+v", arr.Value.Elems)
	}
	if got := d.Exprs[arr.Expr].Text; got != "# three" {
		t.Errorf("trailing comment %q", got)
	}
	if got := d.Defines([]string{"a"}); d.Line(got) != 8 {
		t.Errorf("Defines(a) at line %d", d.Line(got))
	}
	if got := d.Defines([]string{"nowhere"}); got != -1 {
		t.Errorf("Defines(nowhere) = %d", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"syntax", "version = 2\n\n[plugins\nx = 1\n", "test doc line 3, column 9"},
		{"duplicate table", "[a]\nx = 1\n[a]\n", "test doc line 3, column 2"},
		{"column in characters", "k = \"학습\" x\n", "test doc line 1, column 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test doc", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDef(t *testing.T) {
	d := parse(t, sample+"[[arr]]\n  x = 1\n[b.c.d]\n")
	for _, tc := range []struct {
		path []string
		want Form
	}{
		{[]string{"plugins", "io.x", "containerd"}, Header},
		{[]string{"plugins", "io.x"}, Implicit},
		{[]string{"plugins", "io.x", "containerd", "runtimes"}, Dotted},
		{[]string{"plugins", "io.x", "containerd", "runtimes", "crun", "options"}, Inline},
		{[]string{"a", "dotted"}, Dotted},
		{[]string{"version"}, NotTable},
		{[]string{"arr"}, NotTable},
		{[]string{"b", "c"}, Implicit},
		{[]string{"nowhere"}, Absent},
	} {
		if got := d.Def(tc.path).Form; got != tc.want {
			t.Errorf("Def(%v) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

func TestSetKey(t *testing.T) {
	d := parse(t, sample)
	for _, tc := range []struct {
		name  string
		table []string
		want  string // the document after the edit contains this
		ok    bool
		err   string
	}{
		{"after a header, with its keys' indentation", []string{"plugins", "io.x", "containerd"}, "[plugins.\"io.x\".containerd]\n  k = \"v\"\n  default_runtime_name", true, ""},
		{"a dotted sibling", []string{"plugins", "io.x", "containerd", "runtimes"}, "Root = \"/r\" }\n  runtimes.k = \"v\"\n", true, ""},
		{"an implicit table must be appended", []string{"plugins", "io.x"}, "", false, ""},
		{"inline", []string{"plugins", "io.x", "containerd", "runtimes", "crun", "options"}, "", false, "test doc line 6: plugins.\"io.x\".containerd.runtimes.crun.options is (inside) an inline table"},
		{"not a table", []string{"version"}, "", false, "test doc line 2: version is not a table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ok, err := d.SetKey(tc.table, "k", `"v"`)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || ok != tc.ok {
				t.Fatalf("ok %v, err %v", ok, err)
			}
			if !ok {
				return
			}
			out, err := Apply(d.Data, []Edit{e})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("got\n%s\nwant it to contain %q", out, tc.want)
			}
			if err := d.CheckOnly(out, [][]string{append(tc.table, "k")}); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestRemoveArrayElement(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		at       int
		want     string
	}{
		{"first", `a = ["x", "y", "z"]`, 0, `a = ["y", "z"]`},
		{"middle", `a = ["x", "y", "z"]`, 1, `a = ["x", "z"]`},
		{"last", `a = ["x", "y", "z"]`, 2, `a = ["x", "y"]`},
		{"only", `a = ["x"]`, 0, `a = []`},
		{"multi-line", "a = [\n  \"x\",\n  \"y\",\n]", 0, "a = [\n  \"y\",\n]"},
		{"multi-line, last without a comma", "a = [\n  \"x\",\n  \"y\"\n]", 1, "a = [\n  \"x\",\n]"},
		{"multi-line, CRLF", "a = [\r\n  \"x\",\r\n  \"y\",\r\n]", 0, "a = [\r\n  \"y\",\r\n]"},
		{"a comment after it stays", "a = [\n  \"x\", # x\n  \"y\",\n]", 0, "a = [\n  # x\n  \"y\",\n]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := parse(t, tc.in)
			out, err := Apply(d.Data, []Edit{d.RemoveArrayElement(0, tc.at)})
			if err != nil || string(out) != tc.want {
				t.Errorf("got %q, %v; want %q", out, err, tc.want)
			}
		})
	}
}

func TestApplyAndChecks(t *testing.T) {
	d := parse(t, "a = 1\nb = 2\n")
	if _, err := Apply(d.Data, []Edit{{Start: 0, End: 3}, {Start: 2, End: 4}}); err == nil {
		t.Error("overlapping edits applied")
	}
	// Two insertions at one offset keep their order.
	out, err := Apply(d.Data, []Edit{{Start: 0, End: 0, Text: "x = 1\n"}, {Start: 0, End: 0, Text: "y = 2\n"}})
	if err != nil || string(out) != "x = 1\ny = 2\na = 1\nb = 2\n" {
		t.Errorf("got %q, %v", out, err)
	}
	for _, tc := range []struct {
		name, out string
		allowed   [][]string
		want      string
	}{
		{"allowed change", "a = 1\nb = 3\n", [][]string{{"b"}}, ""},
		{"other change", "a = 5\nb = 3\n", [][]string{{"b"}}, "test doc: refusing to edit: the result would change a"},
		{"addition", "a = 1\nb = 2\nc = 3\n", [][]string{{"b"}}, "test doc: refusing to edit: the result would add c"},
		{"a table on the way", "a = 1\nb = 2\n[t.u]\nv = 1\n", [][]string{{"t", "u", "v"}}, ""},
		{"does not parse", "a = \n", nil, "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := d.CheckOnly([]byte(tc.out), tc.allowed)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	if err := d.CheckIntent([]byte("a = 1\nb = 2\n"), map[string]any{"a": int64(1), "b": int64(2)}); err != nil {
		t.Error(err)
	}
	if err := d.CheckIntent([]byte("a = 1\nb = 2\n"), map[string]any{"a": int64(1)}); err == nil || !strings.Contains(err.Error(), "differ at b") {
		t.Errorf("intent: %v", err)
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ old, s, want string }{
		{`"x"`, `a"b\c`, `"a\"b\\c"`},
		{`'x'`, "/usr/bin/x", `'/usr/bin/x'`},
		{`'x'`, "it's", `"it's"`},
		{`'''x'''`, "y", `"y"`},
		{`"x"`, "tab\there\x01", `"tab\there\u0001"`},
	} {
		if got := QuoteLike(tc.old, tc.s); got != tc.want {
			t.Errorf("QuoteLike(%q, %q) = %s, want %s", tc.old, tc.s, got, tc.want)
		}
	}
	if got := KeyText([]string{"plugins", "io.containerd.grpc.v1.cri", "containerd"}); got != `plugins."io.containerd.grpc.v1.cri".containerd` {
		t.Errorf("KeyText = %s", got)
	}
	if PathText(nil) != "the document" {
		t.Error("PathText(nil)")
	}
}

func TestFormat(t *testing.T) {
	v := map[string]any{
		"s": "a\"b", "i": int64(-3), "f": 2.0, "g": 1.5e-9, "b": true, "n": math.Inf(1),
		"arr": []any{"x", int64(1)}, "t": map[string]any{"SystemdCgroup": true, "odd key": "v"},
	}
	got, err := Format(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `{arr = ["x", 1], b = true, f = 2.0, g = 1.5e-09, i = -3, n = inf, s = "a\"b", t = {SystemdCgroup = true, "odd key" = "v"}}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// It reads back as what it was written from.
	back, err := Decode([]byte("v = " + got))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := cfgtree.Equal(back["v"], v); !ok {
		t.Errorf("read back differs at %v", p)
	}
	if _, err := Format(struct{}{}); err == nil {
		t.Error("formatted a struct")
	}
}
