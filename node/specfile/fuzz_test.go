package specfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// fuzzSeeds adds futureSpec and every captured fixture to a corpus.
func fuzzSeeds(f *testing.F, add func(data []byte)) {
	add([]byte(futureSpec))
	files, _ := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		add(data)
	}
}

// FuzzApply checks that fields gpurun does not model survive every action.
func FuzzApply(f *testing.F) {
	fuzzSeeds(f, func(data []byte) { f.Add(data, uint8(0), "x") })
	f.Fuzz(func(t *testing.T, data []byte, action uint8, extra string) {
		c, err := Parse("fuzz.json", data)
		if err != nil {
			return
		}
		assertProjection(t, data, c)
		if !utf8.ValidString(extra) {
			return // JSON strings are UTF-8
		}
		key := "gpurunFuzzUnknown"
		c.set(key, mustMarshal(t, extra))
		a := []oci.Action{oci.ActionSetSize, oci.ActionInject, oci.ActionIPCHost, oci.ActionNone, oci.ActionRemount}[action%5]
		sh := oci.ClassifyShm(c.Spec, 0)
		if a == oci.ActionSetSize && sh.Index < 0 {
			return
		}
		before := topLevel(t, mustConfigJSON(t, c))
		if _, err := c.Apply(oci.Plan{Action: a, Size: policy.GiB, Shm: sh}); err != nil {
			return // a failed apply is reported; the document is checked below
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		after := topLevel(t, out)
		for k, v := range before {
			if k == "mounts" || k == "linux" {
				continue
			}
			if string(after[k]) != string(v) {
				t.Fatalf("field %q changed from %s to %s", k, v, after[k])
			}
		}
		var got string
		if err := json.Unmarshal(after[key], &got); err != nil || got != extra {
			t.Fatalf("unknown field %q = %q, want %q", key, got, extra)
		}
	})
}

func topLevel(t *testing.T, data []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// mustConfigJSON is c's document as Marshal writes it.
func mustConfigJSON(t *testing.T, c *Config) []byte {
	t.Helper()
	b, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assertProjection checks that the spec Parse decoded from the parts
// walk copied out is the one decoding the whole document gives.
func assertProjection(t *testing.T, data []byte, c *Config) {
	t.Helper()
	var whole specFields
	if err := json.Unmarshal(data, &whole); err != nil {
		t.Fatalf("Parse accepted what json.Unmarshal refuses (%v): %s", err, data)
	}
	if want := whole.spec(); !reflect.DeepEqual(c.Spec, want) {
		t.Fatalf("spec from the projection\n%+v\ndiffers from the document's\n%+v\n%s", c.Spec, want, data)
	}
}
