package policy

import (
	"bytes"
	"os"
	"reflect"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// policyTexts are configuration files as gpurun documents and ships them,
// and shapes only toml.Decoder should judge.
var policyTexts = []struct {
	name, text string
	fast       bool // parseFast answers
}{
	{"empty", "", true},
	{"comments only", "# nothing\n\n   # more\n", true},
	{"every key", `match = "all"
size = "25%"
min = '2g'
max = """64g"""
per_gpu = "8g"
mode = "size"
annotation_max = "32g"
runtime = "/usr/bin/nvidia-container-runtime"
log_file = "/var/log/gpurun.log" # trailing comment
compose_default = "8gb"
enforce_min = true
fail_closed = false
allowed_annotations = ["gpurun.io/shm-size", 'x']
engine_roots = [
  "/run/containerd",
  "/var/lib/docker", # a comment
]
gpu_resources = []
gpu_runtime_classes = ["nvidia"]
gpu_device_classes = ["a100.example.com"]
gpu_dra_drivers = ["gpu.example.com"]
unresolved_claims = "ignore"
`, true},
	{"quoted key", `"match" = "all"`, true},
	{"escapes", `log_file = "/tmp/a\tb\u00e9.log"`, true},
	{"unknown key", `matchh = "all"`, false},
	{"dotted key", `match.x = "all"`, false},
	{"table", "[rules]\nmatch = \"all\"", false},
	{"key twice", "match = \"all\"\nmatch = \"gpu\"", false},
	{"integer for a string", `min = 5`, false},
	{"string for a bool", `fail_closed = "true"`, false},
	{"mixed list", `engine_roots = ["/a", 1]`, false},
	{"inline table", `match = {a = 1}`, false},
	{"syntax error", `match = "all`, false},
	{"bad escape", `match = "\q"`, false},
}

// parseFast agrees with toml.Decoder wherever it answers, and answers for
// the files gpurun ships and documents.
func TestParseFast(t *testing.T) {
	texts := policyTexts
	for _, path := range []string{"../deploy/kubernetes/base/config.toml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, struct {
			name, text string
			fast       bool
		}{path, string(data), true})
	}
	for _, tc := range texts {
		t.Run(tc.name, func(t *testing.T) {
			if ok := checkParseFast(t, []byte(tc.text)); ok != tc.fast {
				t.Errorf("parseFast answered %v, want %v", ok, tc.fast)
			}
		})
	}
}

func FuzzParseFast(f *testing.F) {
	for _, tc := range policyTexts {
		f.Add([]byte(tc.text))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkParseFast(t, data) })
}

func checkParseFast(t *testing.T, data []byte) bool {
	t.Helper()
	got := DefaultFile()
	ok := parseFast(data, &got)
	if !ok {
		if !reflect.DeepEqual(got, DefaultFile()) {
			t.Fatalf("parseFast gave up but changed the file: %+v", got)
		}
		return false
	}
	want := DefaultFile()
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&want); err != nil {
		t.Fatalf("parseFast took what toml.Decoder refuses (%v):\n%s", err, data)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseFast = %+v\ntoml.Decoder = %+v\n%s", got, want, data)
	}
	return true
}
