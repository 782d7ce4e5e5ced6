package containerd

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/gpurun/gpurun/internal/cfgtree"
)

// nvidiaNode writes, into a directory of its own, what nvidia-ctk
// v1.20.2 leaves on a containerd 1.6 node (`nvidia-ctk runtime configure
// --runtime=containerd --set-as-default`: config.toml rewritten with an
// imports glob, conf.d/99-nvidia.toml with a copy of the CRI section and
// the nvidia handler as the default), and returns the main config's path.
func nvidiaNode(t *testing.T) (dir, mainPath string) {
	t.Helper()
	dir = t.TempDir()
	mainPath = filepath.Join(dir, "config.toml")
	main := bytes.ReplaceAll(readTestdata(t, "nvidia/containerd-1.6.20-config.toml"), []byte("/etc/containerd"), []byte(dir))
	if err := os.WriteFile(mainPath, main, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conf.d", "99-nvidia.toml"), readTestdata(t, "nvidia/containerd-1.6.20-99-nvidia.toml"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, mainPath
}

// TestDropInBesideNVIDIA: on containerd 1.x a drop-in of gpurun's read
// after NVIDIA's replaces NVIDIA's whole CRI section. Copying the main
// config's section (what containerd would not read) dropped the nvidia
// handler, and every pod with RuntimeClass nvidia failed; copying the
// section containerd reads keeps nvidia (and runc) next to gpurun, which
// is the default and chains to NVIDIA's runtime. containerd 1.6 itself
// reads the result.
func TestDropInBesideNVIDIA(t *testing.T) {
	for _, tc := range []struct {
		name      string
		effective bool
		want      []string // handlers containerd reads
	}{
		{"main config's section", false, []string{"gpurun", "runc"}},
		{"the section containerd reads", true, []string{"gpurun", "nvidia", "runc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, mainPath := nvidiaNode(t)
			main, err := os.ReadFile(mainPath)
			if err != nil {
				t.Fatal(err)
			}
			dropPath := filepath.Join(dir, "gpurun.d", "99-gpurun.toml")
			o := testOptions(true)
			if tc.effective {
				eff, err := Load(context.Background(), mainPath, LoadOptions{Generation: Containerd1})
				if err != nil {
					t.Fatal(err)
				}
				o.Effective = eff
			}
			newMain, dropIn, c, err := DropIn(main, dropPath, o)
			if err != nil {
				t.Fatal(err)
			}
			if tc.effective && c.Chain != "/usr/bin/nvidia-container-runtime" {
				t.Errorf("chain %q, want NVIDIA's runtime", c.Chain)
			}
			after, err := Load(context.Background(), mainPath, LoadOptions{Generation: Containerd1, Overlay: map[string][]byte{mainPath: newMain, dropPath: dropIn}})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range after.Runtimes() {
				got = append(got, r.Name)
			}
			if !slices.Equal(got, tc.want) || after.DefaultRuntime() != "gpurun" {
				t.Errorf("handlers %v, default %s; want %v, gpurun\n%s", got, after.DefaultRuntime(), tc.want, dropIn)
			}
			if !tc.effective {
				return
			}
			// containerd 1.6 reads the files as gpurun does.
			bin, err := exec.LookPath("containerd")
			if err != nil {
				t.Fatalf("containerd binary not found (apt-get install containerd): %v", err)
			}
			if err := os.MkdirAll(filepath.Dir(dropPath), 0o755); err != nil {
				t.Fatal(err)
			}
			for p, data := range map[string][]byte{mainPath: newMain, dropPath: dropIn} {
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dumped := dumpConfig(t, bin, mainPath)
			rts, _ := cfgtree.Get(dumped, "plugins", CRIPluginV2, "containerd", "runtimes")
			def, _ := cfgtree.Get(dumped, "plugins", CRIPluginV2, "containerd", "default_runtime_name")
			m, _ := rts.(map[string]any)
			for _, name := range tc.want {
				if _, ok := m[name]; !ok || def != "gpurun" {
					t.Errorf("containerd config dump: no handler %s, or default %v", name, def)
				}
			}
		})
	}
}

// TestDropInImportLast: gpurun's drop-in goes last in imports, so that
// containerd reads it after every other file; one already imported
// before another tool's glob (gpurun installed first, NVIDIA's toolkit
// second) is moved to the end.
func TestDropInImportLast(t *testing.T) {
	const nv = "/etc/containerd/conf.d/*.toml"
	const own = "/etc/containerd/gpurun.d/99-gpurun.toml"
	for _, tc := range []struct{ name, in, want string }{
		{"appended", "version = 2\nimports = [\"" + nv + "\"]\n", "version = 2\nimports = [\"" + nv + "\", \"" + own + "\"]\n"},
		{"already last", "version = 2\nimports = [\"" + nv + "\", \"" + own + "\"]\n", "version = 2\nimports = [\"" + nv + "\", \"" + own + "\"]\n"},
		{"moved to the end", "version = 2\nimports = [\"" + own + "\", \"" + nv + "\"]\n", "version = 2\nimports = [\"" + nv + "\", \"" + own + "\"]\n"},
		{"moved, multi-line", "version = 2\nimports = [\n  \"" + own + "\",\n  \"" + nv + "\",\n]\n", "version = 2\nimports = [\n  \"" + nv + "\", \"" + own + "\",\n]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newMain, _, _, err := DropIn([]byte(tc.in), own, testOptions(true))
			if err != nil {
				t.Fatal(err)
			}
			if string(newMain) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", newMain, tc.want)
			}
		})
	}
}

// TestRemoveRuntimeNVIDIARewrote: gpurun installed in place as the
// default, then nvidia-ctk v1.20.2 (testdata, as it wrote them): it
// rewrote config.toml without gpurun's marker comment, and copied
// gpurun's handler into its drop-in, and gpurun's pod_annotations into
// its nvidia handler (it copies the default handler's settings).
// RemoveRuntime takes the handler out of both, the main config's default
// back to runc and the drop-in's left at nvidia, and the copied
// pod_annotations back to none (the nvidia handler as the toolkit alone
// writes it), and nothing else; containerd 1.6 then reads nvidia as the
// default and no gpurun.
func TestRemoveRuntimeNVIDIARewrote(t *testing.T) {
	dir := t.TempDir()
	mainPath, dropPath := filepath.Join(dir, "config.toml"), filepath.Join(dir, "conf.d", "99-nvidia.toml")
	c := Change{Changed: true, Version: 2, AddedRuntime: true, SetDefault: true, HadDefaultKey: true, PreviousDefault: "runc"}
	files := map[string][]byte{
		mainPath: bytes.ReplaceAll(readTestdata(t, "nvidia/over-gpurun-containerd-1.6.20-config.toml"), []byte("/etc/containerd"), []byte(dir)),
		dropPath: readTestdata(t, "nvidia/over-gpurun-containerd-1.6.20-99-nvidia.toml"),
	}
	for _, tc := range []struct {
		path, wantDefault string
	}{
		{mainPath, "runc"},
		{dropPath, "nvidia"},
	} {
		in := files[tc.path]
		out, changed, err := RemoveRuntime(in, testOptions(true), c)
		if err != nil || !changed {
			t.Fatalf("%s: changed %v, %v", tc.path, changed, err)
		}
		want := decode(t, in)
		cri := []string{"plugins", CRIPluginV2, "containerd"}
		rts, _ := cfgtree.Get(want, cfgtree.Join(cri, "runtimes")...)
		delete(rts.(map[string]any), "gpurun")
		cfgtree.Set(want, cfgtree.Join(cri, "default_runtime_name"), tc.wantDefault)
		if ann := cfgtree.Join(cri, "runtimes", "nvidia", "pod_annotations"); tc.path == dropPath {
			alone, _ := cfgtree.Get(decode(t, readTestdata(t, "nvidia/containerd-1.6.20-99-nvidia.toml")), ann...)
			if got, _ := cfgtree.Get(decode(t, out), ann...); !reflect.DeepEqual(got, alone) {
				t.Errorf("%s: the nvidia handler's pod_annotations are %v; want %v, as the toolkit alone writes them", tc.path, got, alone)
			}
			cfgtree.Set(want, ann, alone)
		}
		if p, ok := cfgtree.Equal(decode(t, out), want); !ok {
			t.Errorf("%s: differs at %v:\n%s", tc.path, p, out)
		}
		again, changed, err := RemoveRuntime(out, testOptions(true), c)
		if err != nil || changed || !bytes.Equal(again, out) {
			t.Errorf("%s: a second removal changed %v, %v", tc.path, changed, err)
		}
		files[tc.path] = out
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatalf("containerd binary not found (apt-get install containerd): %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(dropPath), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, data := range files {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dumped := dumpConfig(t, bin, mainPath)
	rts, _ := cfgtree.Get(dumped, "plugins", CRIPluginV2, "containerd", "runtimes")
	def, _ := cfgtree.Get(dumped, "plugins", CRIPluginV2, "containerd", "default_runtime_name")
	m, _ := rts.(map[string]any)
	if _, ok := m["gpurun"]; ok || m["nvidia"] == nil || def != "nvidia" {
		t.Errorf("containerd config dump: handlers %v, default %v; want nvidia, no gpurun", slices.Sorted(maps.Keys(m)), def)
	}
}

// TestHiddenRuntimes: gpurun's drop-in read after NVIDIA's, written before
// NVIDIA's existed (a copy of the main config's CRI section), hides the
// toolkit's nvidia handler on containerd 1.x; on 2.x nothing is hidden.
func TestHiddenRuntimes(t *testing.T) {
	dir, mainPath := nvidiaNode(t)
	ownPath := filepath.Join(dir, "gpurun.d", "99-gpurun.toml")
	main, err := os.ReadFile(mainPath)
	if err != nil {
		t.Fatal(err)
	}
	// gpurun's drop-in as it was written over the main config alone.
	newMain, own, _, err := DropIn(main, ownPath, testOptions(true))
	if err != nil {
		t.Fatal(err)
	}
	overlay := map[string][]byte{mainPath: newMain, ownPath: own}
	for _, tc := range []struct {
		g    Generation
		want []HiddenRuntime
	}{
		{Containerd1, []HiddenRuntime{{Name: "nvidia", File: filepath.Join(dir, "conf.d", "99-nvidia.toml"), By: ownPath}}},
		{Containerd2, nil},
	} {
		cfg, err := Load(context.Background(), mainPath, LoadOptions{Generation: tc.g, Overlay: overlay})
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.HiddenRuntimes(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: hidden %+v, want %+v", tc.g, got, tc.want)
		}
	}
}
