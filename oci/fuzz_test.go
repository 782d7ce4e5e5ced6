package oci

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/gpurun/gpurun/policy"
)

// fuzzSeeds adds futureSpec and every captured fixture to a corpus.
func fuzzSeeds(f *testing.F, add func(data []byte)) {
	add([]byte(futureSpec))
	files, _ := filepath.Glob("testdata/fixtures/*.json")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		add(data)
	}
}

// FuzzDecide checks the planner's invariants on any spec and policy: no
// panic; never resizes the host's /dev/shm; an acting plan's size lies within
// [min, max] (an annotation may ask for less than min, never more than the
// cap) and never below the current size; none keeps the current size.
func FuzzDecide(f *testing.F) {
	fuzzSeeds(f, func(data []byte) {
		f.Add(data, int64(64<<30), uint8(50), int64(1<<30), int64(0), uint8(0), false, uint8(0), int64(8<<30), uint8(0))
		f.Add(data, int64(0), uint8(25), int64(2<<30), int64(4<<30), uint8(1), true, uint8(1), int64(0), uint8(2))
		f.Add(data, int64(1<<40), uint8(100), int64(0), int64(1<<30), uint8(2), true, uint8(2), int64(64<<20), uint8(8))
	})
	f.Fuzz(func(t *testing.T, data []byte, hostMem int64, pct uint8, minSize, maxSize int64, mode uint8, enforce bool, match uint8, hostTmpfs int64, hostGPUs uint8) {
		c, err := ParseConfig("fuzz.json", data)
		if err != nil {
			return
		}
		if hostMem < 0 || minSize < 0 || maxSize < 0 || hostTmpfs < 0 {
			return
		}
		file := policy.DefaultFile()
		file.Size = itoa(int64(pct%100)+1) + "%"
		file.Min = itoa(minSize)
		if maxSize > 0 {
			if maxSize < minSize {
				maxSize = minSize
			}
			file.Max = itoa(maxSize)
		}
		file.Mode = []string{"size", "ipc-host", "mount"}[mode%3]
		file.Match = []string{"gpu", "all"}[match%2]
		file.EnforceMin = enforce
		file.AllowedAnnotations = []string{"gpurun.io/shm-size"}
		pol, err := file.Validate("fuzz.toml")
		if err != nil {
			t.Fatalf("policy: %v", err)
		}
		pl := Decide(Input{
			Container: FromSpec(c.Spec),
			Policy:    pol,
			Facts: Facts{
				HostMemory: hostMem,
				HostGPUs:   int(hostGPUs),
				TmpfsSize:  func(string) (int64, error) { return hostTmpfs, nil },
			},
		})
		sh := ClassifyShm(c.Spec, hostMem)
		if sh.Kind == ShmHost && pl.Action != ActionNone {
			t.Fatalf("acts on the host's /dev/shm: %+v", pl)
		}
		if pl.Action == ActionRemount && (sh.Kind != ShmEngine || pol.Mode == policy.ModeMount) {
			t.Fatalf("remount of %s in mode %s: %+v", sh.Kind, pol.Mode, pl)
		}
		if pl.Reason == "" {
			t.Fatalf("no reason: %+v", pl)
		}
		switch pl.Action {
		case ActionNone:
			if pl.Size != pl.Current {
				t.Fatalf("none but size %d != current %d", pl.Size, pl.Current)
			}
		case ActionIPCHost:
			if pl.Size != 0 {
				t.Fatalf("ipc-host with a size: %+v", pl)
			}
		case ActionSetSize, ActionRemount, ActionInject:
			_, requested := c.Spec.Annotations["gpurun.io/shm-size"]
			if (!requested && pl.Size < pol.Min) || (pol.Max > 0 && pl.Size > pol.Max) {
				t.Fatalf("size %d outside [%d, %d]: %+v", pl.Size, pol.Min, pol.Max, pl)
			}
			if pl.Current > 0 && pl.Size <= pl.Current {
				t.Fatalf("does not grow: %+v", pl)
			}
			if pl.Size <= 0 {
				t.Fatalf("acting plan without a size: %+v", pl)
			}
		default:
			t.Fatalf("unknown action %q", pl.Action)
		}
		if _, err := c.Apply(pl); err != nil {
			t.Fatalf("apply %+v: %v", pl, err)
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseConfig("again.json", out)
		if err != nil {
			t.Fatalf("applied spec does not parse: %v\n%s", err, out)
		}
		if pl.Action == ActionSetSize || pl.Action == ActionInject {
			if got := ClassifyShm(again.Spec, hostMem); got.Size != pl.Size {
				t.Fatalf("after %s the spec says %d, plan %d", pl.Action, got.Size, pl.Size)
			}
		}
	})
}

// FuzzApply checks that fields gpurun does not model survive every action.
func FuzzApply(f *testing.F) {
	fuzzSeeds(f, func(data []byte) { f.Add(data, uint8(0), "x") })
	f.Fuzz(func(t *testing.T, data []byte, action uint8, extra string) {
		c, err := ParseConfig("fuzz.json", data)
		if err != nil {
			return
		}
		assertProjection(t, data, c)
		if !utf8.ValidString(extra) {
			return // JSON strings are UTF-8
		}
		key := "gpurunFuzzUnknown"
		c.set(key, mustMarshal(t, extra))
		a := []Action{ActionSetSize, ActionInject, ActionIPCHost, ActionNone, ActionRemount}[action%5]
		sh := ClassifyShm(c.Spec, 0)
		if a == ActionSetSize && sh.Index < 0 {
			return
		}
		before := topLevel(t, mustConfigJSON(t, c))
		if _, err := c.Apply(Plan{Action: a, Size: policy.GiB, Shm: sh}); err != nil {
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

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// assertProjection checks that the spec ParseConfig decoded from the parts
// walk copied out is the one decoding the whole document gives.
func assertProjection(t *testing.T, data []byte, c *Config) {
	t.Helper()
	var whole specFields
	if err := json.Unmarshal(data, &whole); err != nil {
		t.Fatalf("ParseConfig accepted what json.Unmarshal refuses (%v): %s", err, data)
	}
	if want := whole.spec(); !reflect.DeepEqual(c.Spec, want) {
		t.Fatalf("spec from the projection\n%+v\ndiffers from the document's\n%+v\n%s", c.Spec, want, data)
	}
}
