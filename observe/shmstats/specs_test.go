package shmstats

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

// TestSpecs: a Collect with a spec cache decides as one without; the
// cache serves a config.json that has not changed (same file, size and
// time) without reading it, reads a replaced one again, and forgets the
// bundles that are gone.
func TestSpecs(t *testing.T) {
	state := t.TempDir()
	self := os.Getpid()
	bundle(t, state, "k8s.io", "ctr1", "containerd-2.4-cri-container.json", self)
	bundle(t, state, "k8s.io", "gpu1", "containerd-2.4-cri-container-env-nvidia-all.json", self)
	taskDir := filepath.Join(state, "io.containerd.runtime.v2.task", "k8s.io")
	ctr1 := filepath.Join(taskDir, "ctr1", "config.json")

	cache := NewSpecs()
	collect := func(t *testing.T, specs *Specs) map[string]Container {
		t.Helper()
		cs, err := Collect(context.Background(), Options{Docker: "none", Containerd: []string{state}, Podman: []string{}, Policy: policy.Default(), Specs: specs})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]Container{}
		for _, c := range cs {
			out[c.ID] = c
		}
		return out
	}
	decisions := func(cs map[string]Container) map[string]Decision {
		out := map[string]Decision{}
		for id, c := range cs {
			out[id] = c.Decision
		}
		return out
	}

	uncached := collect(t, nil)
	cached := collect(t, cache)
	if !reflect.DeepEqual(decisions(cached), decisions(uncached)) || len(cached) != 2 {
		t.Fatalf("with the cache %+v, without %+v", decisions(cached), decisions(uncached))
	}
	if cached["ctr1"].GPU || cached["ctr1"].Decision.Action != "none" || !cached["gpu1"].GPU || cached["gpu1"].Decision.Action != "remount" {
		t.Fatalf("decisions %+v, want ctr1 none and gpu1 remount", decisions(cached))
	}
	if n := cache.len(); n != 2 {
		t.Fatalf("cache holds %d specs, want 2", n)
	}

	t.Run("an unchanged file is not read again", func(t *testing.T) {
		// Garbage of the same size, written in place, with the file's
		// times put back: only a cache that serves the first read
		// decides as before, a read would fail to parse.
		fi, err := os.Stat(ctr1)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ctr1, bytes.Repeat([]byte{'x'}, int(fi.Size())), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(ctr1, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
		if got := collect(t, cache); !reflect.DeepEqual(decisions(got), decisions(cached)) {
			t.Errorf("decisions %+v, want the cached %+v", decisions(got), decisions(cached))
		}
		if _, err := Collect(context.Background(), Options{Docker: "none", Containerd: []string{state}, Podman: []string{}, Policy: policy.Default()}); err == nil {
			t.Errorf("Collect without a cache read the garbage without an error: the test does not exercise the cache")
		}
	})

	t.Run("a replaced file is read again", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(fixtures, "containerd-2.4-cri-container-env-nvidia-all.json"))
		if err != nil {
			t.Fatal(err)
		}
		tmp := ctr1 + ".new"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, ctr1); err != nil {
			t.Fatal(err)
		}
		got := collect(t, cache)
		if c := got["ctr1"]; !c.GPU || c.Decision.Action != "remount" {
			t.Errorf("ctr1 after its config.json was replaced: gpu %v decision %+v, want a GPU container to remount", c.GPU, c.Decision)
		}
	})

	t.Run("a bundle that is gone is forgotten", func(t *testing.T) {
		if err := os.RemoveAll(filepath.Join(taskDir, "gpu1")); err != nil {
			t.Fatal(err)
		}
		got := collect(t, cache)
		if _, ok := got["gpu1"]; ok || len(got) != 1 {
			t.Errorf("containers %v, want ctr1 only", decisions(got))
		}
		if n := cache.len(); n != 1 {
			t.Errorf("cache holds %d specs, want 1", n)
		}
	})
}

// len is how many specs the cache holds.
func (s *Specs) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
