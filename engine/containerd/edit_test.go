package containerd

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/gpurun/gpurun/internal/cfgtree"
	"github.com/gpurun/gpurun/internal/tomledit"
	"github.com/gpurun/gpurun/internal/unidiff"
)

var update = flag.Bool("update-containerd", false, "rewrite the golden files under testdata/containerd/golden")

const (
	testBinary = "/usr/local/bin/gpurun-runtime"
	testDropIn = "/etc/containerd/conf.d/gpurun.toml"
)

func testOptions(setDefault bool) Handler {
	return Handler{
		Name:           "gpurun",
		BinaryName:     testBinary,
		SetAsDefault:   setDefault,
		PodAnnotations: []string{"gpurun.io/*", "cdi.k8s.io/*"},
	}
}

// fileCase is a real config under testdata/containerd and what an install
// must find in it.
type fileCase struct {
	file        string
	version     int
	copiedFrom  string
	chain       string
	prevDefault string // "" with hadDefault false: no default_runtime_name key
	hadDefault  bool
	systemd     any // options.SystemdCgroup of the added runtime; nil: absent
}

func fileCases() []fileCase {
	return []fileCase{
		{file: "debian-bookworm-containerd-1.6.20-etc-config.toml", version: 2, copiedFrom: "runc"},
		{file: "containerd-1.6.20-config-default.toml", version: 2, copiedFrom: "runc", prevDefault: "runc", hadDefault: true, systemd: false},
		{file: "containerd-2.2.9-config-default.toml", version: 3, copiedFrom: "runc", prevDefault: "runc", hadDefault: true, systemd: false},
		{file: "containerd-2.4.2-config-default.toml", version: 4, copiedFrom: "runc", prevDefault: "runc", hadDefault: true, systemd: false},
		{file: "nvidia-ctk-containerd-1.6.20.toml", version: 2, copiedFrom: "runc", prevDefault: "runc", hadDefault: true, systemd: false},
		{file: "nvidia-ctk-containerd-1.6.20-set-as-default.toml", version: 2, copiedFrom: "nvidia", chain: "/usr/bin/nvidia-container-runtime", prevDefault: "nvidia", hadDefault: true, systemd: false},
		{file: "kubeadm-systemd-cgroup-containerd-1.6.20.toml", version: 2, copiedFrom: "runc", prevDefault: "runc", hadDefault: true, systemd: true},
		{file: "handwritten-dotted-keys-inline-tables.toml", version: 2, copiedFrom: "crun", chain: "/usr/bin/crun", prevDefault: "crun", hadDefault: true, systemd: true},
		{file: "handwritten-subtables-only.toml", version: 2, copiedFrom: "runc", systemd: true},
		{file: "empty.toml", version: 2, copiedFrom: "runc"},
	}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// golden compares got with a golden file, or rewrites it with
// -update-containerd.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Containerd -update-containerd)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s:\n%s", path, unidiff.Unified(name, want, got))
	}
}

func decode(t testing.TB, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := toml.Unmarshal(data, &m); err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, data)
	}
	if m == nil {
		m = map[string]any{}
	}
	return m
}

// prune removes empty tables, recursively.
func prune(m map[string]any) {
	for k, v := range m {
		if c, ok := v.(map[string]any); ok {
			prune(c)
			if len(c) == 0 {
				delete(m, k)
			}
		}
	}
}

func testPaths(version int) (handlers, rt []string) {
	handlers = []string{"plugins", RuntimePluginID(version), "containerd"}
	return handlers, cfgtree.Join(handlers, "runtimes", "gpurun")
}

// checkKept checks that out keeps every setting of in outside gpurun's:
// the runtime, default_runtime_name when setDefault, and the version of an
// empty file.
func checkKept(t *testing.T, in, out []byte, version int, setDefault bool) {
	t.Helper()
	before, after := decode(t, in), decode(t, out)
	ctd, rt := testPaths(version)
	cfgtree.Delete(before, rt...)
	cfgtree.Delete(after, rt...)
	if _, ok := cfgtree.Get(before, cfgtree.Join(ctd, "runtimes", "runc")...); !ok && version == 2 {
		// Added to keep containerd 1.x's built-in runc.
		cfgtree.Delete(after, cfgtree.Join(ctd, "runtimes", "runc")...)
	}
	if setDefault {
		if v, _ := cfgtree.Get(after, cfgtree.Join(ctd, "default_runtime_name")...); v != "gpurun" {
			t.Errorf("default_runtime_name = %v, want gpurun", v)
		}
		if v, ok := cfgtree.Get(before, cfgtree.Join(ctd, "default_runtime_name")...); ok {
			cfgtree.Set(after, cfgtree.Join(ctd, "default_runtime_name"), v)
		} else {
			cfgtree.Delete(after, cfgtree.Join(ctd, "default_runtime_name")...)
		}
	}
	if len(before) == 0 {
		delete(after, "version")
	}
	prune(before)
	prune(after)
	if !reflect.DeepEqual(before, after) {
		t.Errorf("settings outside gpurun's changed:\nbefore %v\nafter  %v", before, after)
	}
}

// checkLines checks that every line of in is still in out, in order,
// except a line setting key, which may have been edited.
func checkLines(t *testing.T, in, out []byte, key string) {
	t.Helper()
	inLines := strings.SplitAfter(string(in), "\n")
	outLines := strings.SplitAfter(string(out), "\n")
	j := 0
	for _, l := range inLines {
		if l == "" {
			continue
		}
		for j < len(outLines) && outLines[j] != l && strings.TrimSuffix(outLines[j], "\n") != l &&
			!(strings.Contains(l, key) && strings.Contains(outLines[j], key)) {
			j++
		}
		if j == len(outLines) {
			t.Errorf("line %q of the input is missing from the output", l)
			return
		}
		j++
	}
}

// runtime returns the gpurun runtime of a decoded config.
func runtimeOf(t *testing.T, m map[string]any, version int) map[string]any {
	t.Helper()
	_, rt := testPaths(version)
	v, ok := cfgtree.Get(m, rt...)
	r, isMap := v.(map[string]any)
	if !ok || !isMap {
		t.Fatalf("no runtimes.gpurun table in %v", m)
	}
	return r
}

func TestFilesListed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.toml"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(readTestdata(t, "README.md"))
	var listed []string
	for _, c := range fileCases() {
		listed = append(listed, c.file)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if !slices.Contains(listed, name) {
			t.Errorf("%s has no case in fileCases", name)
		}
		if !strings.Contains(readme, name) {
			t.Errorf("%s is not described in testdata/containerd/README.md", name)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, c := range fileCases() {
		v, err := Version(readTestdata(t, c.file))
		if err != nil || v != c.version {
			t.Errorf("%s: version %d, %v; want %d", c.file, v, err, c.version)
		}
	}
	for _, tc := range []struct {
		in      string
		version int
		err     string
	}{
		{in: "# only a comment\n\n", version: 2},
		{in: "version = 3\n", version: 3},
		{in: "root = \"/var/lib/containerd\"\n", err: "version 1 configs are not supported; run containerd config migrate"},
		{in: "version = 1\n", err: "version 1 configs are not supported; run containerd config migrate"},
		{in: "version = 5\n", err: "line 1: unsupported config version 5"},
		{in: "version = \"2\"\n", err: "line 1: version 2 is not an integer"},
		{in: "version = 2\n\n[plugins\nx = 1\n", err: "line 3, column 9"},
		{in: "version = 2\n[a]\nx = 1\n[a]\ny = 2\n", err: "line 4, column 2"},
	} {
		v, err := Version([]byte(tc.in))
		if tc.err == "" {
			if err != nil || v != tc.version {
				t.Errorf("%q: %d, %v; want %d", tc.in, v, err, tc.version)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
		}
	}
}

func TestInstallFiles(t *testing.T) {
	for _, fc := range fileCases() {
		for _, setDefault := range []bool{false, true} {
			name := strings.TrimSuffix(fc.file, ".toml")
			if setDefault {
				name += ".default"
			}
			t.Run(name, func(t *testing.T) {
				in := readTestdata(t, fc.file)
				o := testOptions(setDefault)
				out, c, err := Install(in, o)
				if err != nil {
					t.Fatal(err)
				}
				golden(t, "installed/"+name+".toml", out)
				want := Change{Changed: true, Version: fc.version, AddedRuntime: true, Chain: fc.chain, CopiedFrom: fc.copiedFrom}
				if setDefault {
					want.SetDefault, want.PreviousDefault, want.HadDefaultKey = true, fc.prevDefault, fc.hadDefault
				}
				if c != want {
					t.Errorf("change %+v\nwant   %+v", c, want)
				}
				checkKept(t, in, out, fc.version, setDefault)
				checkLines(t, in, out, "default_runtime_name")
				for _, l := range strings.Split(string(in), "\n") {
					if l := strings.TrimSpace(l); strings.HasPrefix(l, "#") && !bytes.Contains(out, []byte(l)) {
						t.Errorf("comment %q lost", l)
					}
				}
				if !bytes.Contains(out, []byte(marker+"\n")) {
					t.Errorf("no marker comment")
				}

				m := decode(t, out)
				r := runtimeOf(t, m, fc.version)
				if r["runtime_type"] != "io.containerd.runc.v2" {
					t.Errorf("runtime_type %v", r["runtime_type"])
				}
				opts, _ := r["options"].(map[string]any)
				if opts["BinaryName"] != testBinary {
					t.Errorf("BinaryName %v", opts["BinaryName"])
				}
				if opts["SystemdCgroup"] != fc.systemd {
					t.Errorf("SystemdCgroup %v, want %v", opts["SystemdCgroup"], fc.systemd)
				}
				ann, _ := r["pod_annotations"].([]any)
				for _, a := range o.PodAnnotations {
					if !slices.Contains(ann, any(a)) {
						t.Errorf("pod_annotations %v lack %s", ann, a)
					}
				}
				// Everything copied from the runtime gpurun replaces.
				ctd, _ := testPaths(fc.version)
				if srcV, ok := cfgtree.Get(decode(t, in), cfgtree.Join(ctd, "runtimes", fc.copiedFrom)...); ok {
					src := srcV.(map[string]any)
					for k, v := range src {
						switch {
						case k == "options":
							for ok, ov := range v.(map[string]any) {
								if ok != "BinaryName" && !reflect.DeepEqual(opts[ok], ov) {
									t.Errorf("options.%s = %v, want %v copied from %s", ok, opts[ok], ov, fc.copiedFrom)
								}
							}
						case copiedRuntimeKey(k) && !reflect.DeepEqual(r[k], v):
							t.Errorf("%s = %v, want %v copied from %s", k, r[k], v, fc.copiedFrom)
						}
					}
				}

				again, c2, err := Install(out, o)
				if err != nil || c2.Changed || !bytes.Equal(again, out) {
					t.Errorf("second install: changed %v, err %v\n%s", c2.Changed, err, unidiff.Unified(name, out, again))
				}
				back, changed, err := Uninstall(out, o, c)
				if err != nil || !changed || !bytes.Equal(back, in) {
					t.Errorf("uninstall: changed %v, err %v\n%s", changed, err, unidiff.Unified(name, in, back))
				}
				if same, changed, err := Uninstall(in, o, Change{}); err != nil || changed || !bytes.Equal(same, in) {
					t.Errorf("uninstall of a config without gpurun: changed %v, err %v", changed, err)
				}
			})
		}
	}
}

func TestInstallForms(t *testing.T) {
	const cri = `[plugins."io.containerd.grpc.v1.cri"`
	for _, tc := range []struct {
		name       string
		in         string
		setDefault bool
		contains   []string // in the output
		err        string
		change     *Change
		keepOnUndo bool // uninstall does not give the input back (a runtime that existed)
	}{
		{
			name:       "default inserted after the containerd header with the indentation of its keys",
			in:         "version = 2\n" + cri + `.containerd]` + "\n    snapshotter = \"overlayfs\"\n",
			setDefault: true,
			contains:   []string{cri + ".containerd]\n    default_runtime_name = \"gpurun\"\n    snapshotter = \"overlayfs\"\n"},
		},
		{
			name:       "default inserted after an empty containerd header",
			in:         "version = 2\n  " + cri + `.containerd] # mine` + "\n" + cri + ".cni]\n  bin_dir = \"/usr/lib/cni\"\n",
			setDefault: true,
			contains:   []string{cri + ".containerd] # mine\n    default_runtime_name = \"gpurun\"\n" + cri + ".cni]"},
		},
		{
			name:       "default as a dotted key next to the dotted keys that define containerd",
			in:         "version = 2\n" + cri + "]\n  containerd.snapshotter = \"overlayfs\" # fast\n  sandbox_image = \"pause\"\n",
			setDefault: true,
			contains:   []string{"  containerd.snapshotter = \"overlayfs\" # fast\n  containerd.default_runtime_name = \"gpurun\"\n  sandbox_image"},
			change:     &Change{Changed: true, Version: 2, AddedRuntime: true, SetDefault: true, CopiedFrom: "runc"},
		},
		{
			name:       "literal string default keeps its quotes",
			in:         "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = 'runc'\n",
			setDefault: true,
			contains:   []string{"default_runtime_name = 'gpurun'\n", `[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gpurun]`},
		},
		{
			name:       "default already gpurun",
			in:         "version = 2\n" + cri + ".containerd]\n  default_runtime_name = \"gpurun\"\n",
			setDefault: true,
			change:     &Change{Changed: true, Version: 2, AddedRuntime: true, CopiedFrom: "runc"},
		},
		{
			name: "kata default: copy runc, no chain",
			in: "version = 2\n" + cri + ".containerd]\n  default_runtime_name = \"kata\"\n" +
				cri + ".containerd.runtimes.kata]\n  runtime_type = \"io.containerd.kata.v2\"\n" +
				cri + ".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  snapshotter = \"stargz\"\n" +
				cri + ".containerd.runtimes.runc.options]\n  BinaryName = \"/opt/runc\"\n  SystemdCgroup = true\n",
			setDefault: true,
			contains:   []string{"default_runtime_name = \"gpurun\"", "  snapshotter = \"stargz\"\n", "  SystemdCgroup = true\n"},
			change:     &Change{Changed: true, Version: 2, AddedRuntime: true, SetDefault: true, PreviousDefault: "kata", HadDefaultKey: true, Chain: "/opt/runc", CopiedFrom: "runc"},
		},
		{
			name: "existing runtime: BinaryName replaced in place",
			in: "version = 2\n" + cri + ".containerd.runtimes.gpurun]\n  runtime_type = \"io.containerd.runc.v2\"\n" +
				cri + ".containerd.runtimes.gpurun.options]\n  BinaryName = '/old/gpurun-runtime' # old\n",
			contains:   []string{"  BinaryName = '/usr/local/bin/gpurun-runtime' # old\n"},
			change:     &Change{Changed: true, Version: 2},
			keepOnUndo: true,
		},
		{
			name:     "existing runtime without options: options table appended",
			in:       "version = 2\n" + cri + ".containerd.runtimes.gpurun]\n  runtime_type = \"io.containerd.runc.v2\"\n",
			contains: []string{marker + "\n" + cri + ".containerd.runtimes.gpurun.options]\n  BinaryName = \"/usr/local/bin/gpurun-runtime\"\n"},
			change:   &Change{Changed: true, Version: 2},
		},
		{
			name:       "existing runtime with dotted options",
			in:         "version = 2\n" + cri + ".containerd.runtimes.gpurun]\n  options.SystemdCgroup = true\n",
			contains:   []string{"  options.SystemdCgroup = true\n  options.BinaryName = \"/usr/local/bin/gpurun-runtime\"\n"},
			keepOnUndo: true,
		},
		{
			name:       "existing runtime with an inline options table holding BinaryName",
			in:         "version = 2\n" + cri + ".containerd.runtimes.gpurun]\n  options = { BinaryName = \"/x\" }\n",
			contains:   []string{"  options = { BinaryName = \"/usr/local/bin/gpurun-runtime\" }\n"},
			keepOnUndo: true,
		},
		{
			name: "existing runtime with an inline options table without BinaryName",
			in:   "version = 2\n" + cri + ".containerd.runtimes.gpurun]\n  options = { SystemdCgroup = true }\n",
			err:  "line 3: plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun.options is (inside) an inline table",
		},
		{
			name: "runtimes as an inline table",
			in:   "version = 2\n" + cri + ".containerd]\n  runtimes = { runc = { runtime_type = \"io.containerd.runc.v2\" } }\n",
			err:  "line 3: plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun is (inside) an inline table",
		},
		{
			name:       "containerd as an inline table",
			in:         "version = 2\n" + cri + "]\n  containerd = { snapshotter = \"overlayfs\" }\n",
			setDefault: true,
			err:        "inline table",
		},
		{
			name: "runtimes as an array of tables",
			in:   "version = 2\n[[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes]]\n  x = 1\n",
			err:  "line 2: plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun is not a table",
		},
		{
			name:       "default_runtime_name not a string",
			in:         "version = 2\n" + cri + ".containerd]\n  default_runtime_name = 3\n",
			setDefault: true,
			err:        "line 3: default_runtime_name is not a string",
		},
		{
			name: "BinaryName not a string",
			in:   "version = 2\n" + cri + ".containerd.runtimes.gpurun.options]\n  BinaryName = 3\n",
			err:  "line 3: plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun.options.BinaryName is not a string",
		},
		{
			name: "options of the copied runtime not a table",
			in:   "version = 2\n" + cri + ".containerd.runtimes.runc]\n  options = 3\n",
			err:  "line 3: plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options is not a table",
		},
		{
			name:       "no final newline",
			in:         "version = 2\n" + cri + ".containerd]",
			setDefault: true,
			contains:   []string{cri + ".containerd]\n  default_runtime_name = \"gpurun\"\n" + marker},
		},
		{
			name:       "CRLF line ends",
			in:         "version = 2\r\n" + cri + ".containerd]\r\n  snapshotter = \"overlayfs\"\r\n",
			setDefault: true,
			contains:   []string{"  default_runtime_name = \"gpurun\"\r\n  snapshotter", "\r\n" + marker + "\r\n" + cri + ".containerd.runtimes.runc]\r\n  runtime_type = \"io.containerd.runc.v2\"\r\n\r\n" + cri + ".containerd.runtimes.gpurun]\r\n"},
		},
		{
			name:     "comments only",
			in:       "# containerd runs on defaults\n",
			contains: []string{"# containerd runs on defaults\n\n" + marker + "\nversion = 2\n\n" + cri + ".containerd.runtimes.runc]\n"},
		},
		{
			name:     "copied keys keep their spelling: quoted keys, sub-tables, multi-line arrays",
			in:       "version = 2\n" + cri + ".containerd.runtimes.runc]\n  container_annotations = [\n    \"a\", # first\n    \"b\",\n  ]\n" + cri + ".containerd.runtimes.runc.options]\n  \"Root\" = \"/r\"\n" + cri + ".containerd.runtimes.runc.options.x]\n  y = 1\n",
			contains: []string{"  container_annotations = [\n    \"a\", # first\n    \"b\",\n  ]\n", "  \"Root\" = \"/r\"\n  x.y = 1\n"},
		},
		{name: "version 1", in: "[plugins.cri]\n  x = 1\n", err: "version 1 configs are not supported; run containerd config migrate"},
		{name: "malformed", in: "version = 2\n[plugins]\n  a = \n", err: "containerd config line 3, column 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(tc.setDefault)
			out, c, err := Install([]byte(tc.in), o)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q\n%s", err, tc.err, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.contains {
				if !strings.Contains(string(out), s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			if tc.change != nil && c != *tc.change {
				t.Errorf("change %+v\nwant   %+v", c, *tc.change)
			}
			m := decode(t, out)
			version, _ := Version(out)
			opts, _ := runtimeOf(t, m, version)["options"].(map[string]any)
			if opts["BinaryName"] != testBinary {
				t.Errorf("BinaryName %v", opts["BinaryName"])
			}
			if !tc.keepOnUndo {
				checkKept(t, []byte(tc.in), out, version, tc.setDefault)
			}
			again, c2, err := Install(out, o)
			if err != nil || c2.Changed || !bytes.Equal(again, out) {
				t.Errorf("second install: changed %v, err %v", c2.Changed, err)
			}
			back, _, err := Uninstall(out, o, c)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.keepOnUndo && string(back) != tc.in {
				t.Errorf("uninstall:\n%s", unidiff.Unified(tc.name, []byte(tc.in), back))
			}
			if tc.keepOnUndo && !bytes.Equal(back, out) {
				t.Errorf("uninstall touched a runtime it did not add:\n%s", unidiff.Unified(tc.name, out, back))
			}
		})
	}
}

func TestInstallOptionErrors(t *testing.T) {
	in := []byte("version = 2\n")
	for _, tc := range []struct {
		o   Handler
		err string
	}{
		{Handler{Name: "gpu run", BinaryName: testBinary}, `runtime name "gpu run"`},
		{Handler{Name: "", BinaryName: testBinary}, `runtime name ""`},
		{Handler{Name: "runc", BinaryName: testBinary}, `would replace runc`},
		{Handler{Name: "gpurun", BinaryName: "gpurun-runtime"}, "not an absolute path"},
		{Handler{Name: "gpurun", BinaryName: "/bin/x\n"}, "control characters"},
		{Handler{Name: "gpurun", BinaryName: testBinary, PodAnnotations: []string{""}}, "pod annotation"},
	} {
		if _, _, err := Install(in, tc.o); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: error %v, want one containing %q", tc.o, err, tc.err)
		}
	}
	if _, _, _, err := DropIn(in, "conf.d/gpurun.toml", testOptions(false)); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("relative drop-in path: %v", err)
	}
}

func TestUninstallAfterAdminEdits(t *testing.T) {
	in := readTestdata(t, "containerd-1.6.20-config-default.toml")
	o := testOptions(true)
	out, c, err := Install(in, o)
	if err != nil {
		t.Fatal(err)
	}
	ctd, rt := testPaths(2)
	def := cfgtree.Join(ctd, "default_runtime_name")

	t.Run("table appended after the block stays", func(t *testing.T) {
		edited := append(slices.Clone(out), "\n# mine\n[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"x\"]\n  endpoint = [\"https://x\"]\n"...)
		back, _, err := Uninstall(edited, o, c)
		if err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(in), "\n# mine\n[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"x\"]\n  endpoint = [\"https://x\"]\n"...)
		if !bytes.Equal(back, want) {
			t.Errorf("got:\n%s", unidiff.Unified("edited", want, back))
		}
	})
	t.Run("default changed by the admin is left alone", func(t *testing.T) {
		edited := bytes.Replace(out, []byte(`default_runtime_name = "gpurun"`), []byte(`default_runtime_name = "crun"`), 1)
		back, _, err := Uninstall(edited, o, c)
		if err != nil {
			t.Fatal(err)
		}
		m := decode(t, back)
		if v, _ := cfgtree.Get(m, def...); v != "crun" {
			t.Errorf("default %v, want crun", v)
		}
		if _, ok := cfgtree.Get(m, rt...); ok {
			t.Errorf("runtime not removed")
		}
	})
	t.Run("lost change record: the default naming the removed runtime goes", func(t *testing.T) {
		back, changed, err := Uninstall(out, o, Change{})
		if err != nil || !changed {
			t.Fatal(changed, err)
		}
		m := decode(t, back)
		if v, ok := cfgtree.Get(m, def...); ok {
			t.Errorf("default %v left", v)
		}
		if _, ok := cfgtree.Get(m, rt...); ok {
			t.Errorf("runtime not removed")
		}
	})
	t.Run("CRLF no final newline", func(t *testing.T) {
		in := []byte("version = 2\r\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]")
		out, c, err := Install(in, o)
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := Uninstall(out, o, c)
		if err != nil || !bytes.Equal(back, in) {
			t.Errorf("%v\n%q\n%q", err, out, back)
		}
	})
}

func TestDropIn(t *testing.T) {
	for _, fc := range fileCases() {
		for _, setDefault := range []bool{false, true} {
			name := strings.TrimSuffix(fc.file, ".toml")
			if setDefault {
				name += ".default"
			}
			t.Run(name, func(t *testing.T) {
				in := readTestdata(t, fc.file)
				o := testOptions(setDefault)
				newMain, dropIn, c, err := DropIn(in, testDropIn, o)
				if err != nil {
					t.Fatal(err)
				}
				golden(t, "dropin/"+name+".main.toml", newMain)
				golden(t, "dropin/"+name+".dropin.toml", dropIn)
				covered := fc.version >= 3 // their default config imports /etc/containerd/conf.d/*.toml
				if c.Changed == covered || bytes.Equal(newMain, in) != covered {
					t.Errorf("main changed %v (%v), want %v", c.Changed, !bytes.Equal(newMain, in), !covered)
				}
				if c.Version != fc.version || !c.AddedRuntime || c.Chain != fc.chain || c.CopiedFrom != fc.copiedFrom || c.SetDefault != setDefault {
					t.Errorf("change %+v", c)
				}

				// The main config: only imports changed.
				before, after := decode(t, in), decode(t, newMain)
				imports, _ := after["imports"].([]any)
				if !covered && !slices.Contains(imports, any(testDropIn)) {
					t.Errorf("imports %v", imports)
				}
				delete(before, "imports")
				delete(after, "imports")
				if len(before) == 0 {
					delete(after, "version")
				}
				if !reflect.DeepEqual(before, after) {
					t.Errorf("main config changed beyond imports")
				}
				checkLines(t, in, newMain, "imports")

				// The drop-in: same version; for version 2 the whole CRI
				// section of the main config plus gpurun's tables.
				dm := decode(t, dropIn)
				if v, _ := dm["version"].(int64); int(v) != fc.version {
					t.Errorf("drop-in version %v", dm["version"])
				}
				r := runtimeOf(t, dm, fc.version)
				if opts, _ := r["options"].(map[string]any); opts["BinaryName"] != testBinary || opts["SystemdCgroup"] != fc.systemd {
					t.Errorf("drop-in options %v", opts)
				}
				ctd, rt := testPaths(fc.version)
				if v, _ := cfgtree.Get(dm, cfgtree.Join(ctd, "default_runtime_name")...); setDefault && v != "gpurun" {
					t.Errorf("drop-in default %v", v)
				}
				if fc.version == 2 {
					mainCRI, _ := cfgtree.Get(decode(t, in), "plugins", RuntimePluginID(2))
					cfgtree.Delete(dm, rt...)
					if setDefault {
						if v, ok := cfgtree.Get(decode(t, in), cfgtree.Join(ctd, "default_runtime_name")...); ok {
							cfgtree.Set(dm, cfgtree.Join(ctd, "default_runtime_name"), v)
						} else {
							cfgtree.Delete(dm, cfgtree.Join(ctd, "default_runtime_name")...)
						}
					}
					if _, ok := cfgtree.Get(decode(t, in), cfgtree.Join(ctd, "runtimes", "runc")...); !ok {
						cfgtree.Delete(dm, cfgtree.Join(ctd, "runtimes", "runc")...)
					}
					prune(dm)
					dropCRI, _ := cfgtree.Get(dm, "plugins", RuntimePluginID(2))
					if m, ok := mainCRI.(map[string]any); ok {
						prune(m)
						if len(m) == 0 {
							mainCRI = nil
						}
					}
					if !reflect.DeepEqual(mainCRI, dropCRI) {
						t.Errorf("drop-in CRI section differs from the main config's:\nmain    %v\ndrop-in %v", mainCRI, dropCRI)
					}
				}

				newMain2, dropIn2, c2, err := DropIn(newMain, testDropIn, o)
				if err != nil || c2.Changed || !bytes.Equal(newMain2, newMain) || !bytes.Equal(dropIn2, dropIn) {
					t.Errorf("second drop-in install: changed %v, err %v\n%s%s", c2.Changed, err, unidiff.Unified("main", newMain, newMain2), unidiff.Unified("drop-in", dropIn, dropIn2))
				}
				back, changed, err := UninstallDropIn(newMain, testDropIn, c)
				if err != nil || changed != c.Changed || !bytes.Equal(back, in) {
					t.Errorf("uninstall: changed %v, err %v\n%s", changed, err, unidiff.Unified(name, in, back))
				}
			})
		}
	}
}

func TestDropInImports(t *testing.T) {
	o := testOptions(false)
	for _, tc := range []struct {
		name, in, want string
		undo           string // uninstall's result when not in
	}{
		{"empty array", "imports = []\nversion = 2\n", "imports = [\"/etc/containerd/conf.d/gpurun.toml\"]\nversion = 2\n", ""},
		{"blank array", "imports = [ ]\nversion = 2\n", "imports = [\"/etc/containerd/conf.d/gpurun.toml\" ]\nversion = 2\n", ""},
		{"one entry", "version = 2\nimports = ['/a.toml']\n", "version = 2\nimports = ['/a.toml', \"/etc/containerd/conf.d/gpurun.toml\"]\n", ""},
		{"multi-line with trailing comma", "version = 2\nimports = [\n  \"/a.toml\", # a\n]\n", "version = 2\nimports = [\n  \"/a.toml\", \"/etc/containerd/conf.d/gpurun.toml\", # a\n]\n", ""},
		{"covered by a glob", "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n", "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n", ""},
		// Uninstall removes the entry even so: an import of the deleted drop-in would stop containerd.
		{"already there", "version = 2\nimports = [\"/etc/containerd/conf.d/gpurun.toml\"]\n", "version = 2\nimports = [\"/etc/containerd/conf.d/gpurun.toml\"]\n", "version = 2\nimports = []\n"},
		{"no imports", "# c\nversion = 2 # v\n[plugins]\n", "# c\nversion = 2 # v\nimports = [\"/etc/containerd/conf.d/gpurun.toml\"] " + marker + "\n[plugins]\n", ""},
		{"no imports, no final newline", "version = 2", "version = 2\nimports = [\"/etc/containerd/conf.d/gpurun.toml\"] " + marker, ""},
		{"empty", "", marker + "\nversion = 2\nimports = [\"/etc/containerd/conf.d/gpurun.toml\"]\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newMain, _, c, err := DropIn([]byte(tc.in), testDropIn, o)
			if err != nil {
				t.Fatal(err)
			}
			if string(newMain) != tc.want {
				t.Errorf("got:\n%s", unidiff.Unified(tc.name, []byte(tc.want), newMain))
			}
			undo := tc.in
			if tc.undo != "" {
				undo = tc.undo
			}
			back, changed, err := UninstallDropIn(newMain, testDropIn, c)
			if err != nil || string(back) != undo || changed != (undo != tc.want) {
				t.Errorf("uninstall: changed %v, err %v\n%s", changed, err, unidiff.Unified(tc.name, []byte(undo), back))
			}
		})
	}
	if _, _, _, err := DropIn([]byte("version = 2\nimports = \"/a\"\n"), testDropIn, o); err == nil || !strings.Contains(err.Error(), "line 2: imports is not an array") {
		t.Errorf("imports not an array: %v", err)
	}
	if _, _, _, err := DropIn([]byte("version = 2\n[plugins]\n  \"io.containerd.grpc.v1.cri\" = { sandbox_image = \"x\" }\n"), testDropIn, o); err == nil || !strings.Contains(err.Error(), "inline table") {
		t.Errorf("inline CRI section: %v", err)
	}
}

// dumpConfig runs containerd config dump over config (and the files it
// imports) and decodes the result.
func dumpConfig(t *testing.T, bin, config string) map[string]any {
	t.Helper()
	cmd := exec.Command(bin, "--config", config, "config", "dump")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --config %s config dump: %v\n%s", bin, config, err, stderr.Bytes())
	}
	return decode(t, out)
}

// TestContainerdConfigDump has containerd itself load every installed
// config: Debian's containerd 1.6 for version 2 (required: CI installs it),
// containerd 2.x for versions 3 and 4 (GPURUN_TEST_CONTAINERD2, set by make).
func TestConfigDump(t *testing.T) {
	ctd16, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatalf("containerd binary not found (apt-get install containerd): %v", err)
	}
	for _, fc := range fileCases() {
		for _, setDefault := range []bool{false, true} {
			for _, mode := range []string{"in-place", "drop-in"} {
				name := strings.TrimSuffix(fc.file, ".toml") + "/" + mode
				if setDefault {
					name += "/default"
				}
				t.Run(name, func(t *testing.T) {
					bin := ctd16
					if fc.version >= 3 {
						bin = containerd2(t)
					}
					in := readTestdata(t, fc.file)
					o := testOptions(setDefault)
					dir := t.TempDir()
					mainPath := filepath.Join(dir, "config.toml")
					if err := os.WriteFile(mainPath, in, 0o644); err != nil {
						t.Fatal(err)
					}
					before := dumpConfig(t, bin, mainPath)
					switch mode {
					case "in-place":
						out, _, err := Install(in, o)
						if err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(mainPath, out, 0o644); err != nil {
							t.Fatal(err)
						}
					case "drop-in":
						dropInPath := filepath.Join(dir, "conf.d", "gpurun.toml")
						newMain, dropIn, _, err := DropIn(in, dropInPath, o)
						if err != nil {
							t.Fatal(err)
						}
						if err := os.MkdirAll(filepath.Dir(dropInPath), 0o755); err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(mainPath, newMain, 0o644); err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(dropInPath, dropIn, 0o644); err != nil {
							t.Fatal(err)
						}
					}
					after := dumpConfig(t, bin, mainPath)
					// containerd 2.x dumps the current version's layout.
					version := fc.version
					if v, ok := after["version"].(int64); ok && v >= 3 {
						version = int(v)
					}
					ctd, rt := testPaths(version)
					r := runtimeOf(t, after, version)
					opts, _ := r["options"].(map[string]any)
					if opts["BinaryName"] != testBinary || r["runtime_type"] != "io.containerd.runc.v2" {
						t.Errorf("containerd sees runtime %v", r)
					}
					if fc.systemd == true && opts["SystemdCgroup"] != true {
						t.Errorf("containerd sees SystemdCgroup %v", opts["SystemdCgroup"])
					}
					def, _ := cfgtree.Get(after, cfgtree.Join(ctd, "default_runtime_name")...)
					if setDefault && def != "gpurun" {
						t.Errorf("containerd sees default_runtime_name %v", def)
					}
					// Nothing else changed in what containerd sees.
					cfgtree.Delete(after, rt...)
					cfgtree.Delete(after, "imports")
					cfgtree.Delete(before, "imports")
					if setDefault {
						v, _ := cfgtree.Get(before, cfgtree.Join(ctd, "default_runtime_name")...)
						cfgtree.Set(after, cfgtree.Join(ctd, "default_runtime_name"), v)
					}
					// containerd 1.x shows its built-in runc with every option
					// at its zero value; the runc table gpurun keeps it with
					// has none, which means the same.
					for _, m := range []map[string]any{before, after} {
						if o, ok := cfgtree.Get(m, cfgtree.Join(ctd, "runtimes", "runc", "options")...); ok {
							for k, v := range o.(map[string]any) {
								if v == "" || v == false || v == int64(0) {
									delete(o.(map[string]any), k)
								}
							}
						}
					}
					if p, ok := cfgtree.Equal(before, after); !ok {
						t.Errorf("containerd sees another change at %s", tomledit.PathText(p))
					}
					t.Logf("containerd config dump: runtimes.gpurun = %v; default_runtime_name = %v", r, def)
				})
			}
		}
	}
}

func FuzzInstall(f *testing.F) {
	for _, fc := range fileCases() {
		f.Add(readTestdata(f, fc.file), false)
		f.Add(readTestdata(f, fc.file), true)
	}
	f.Add([]byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  containerd.snapshotter = \"x\"\n"), true)
	f.Add([]byte("version = 3\r\n[plugins.'io.containerd.cri.v1.runtime'.containerd]"), true)
	f.Add([]byte("# c\n"), true)
	f.Add([]byte("version = 2\nimports = [\n  \"/a.toml\", # a\n]\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  runtimes = { runc = { options = { SystemdCgroup = true } } }\n"), false)
	f.Add([]byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.rt]\n  options.BinaryName = '/x'\n  options.'Root' = \"/r\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = 'rt'\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, setDefault bool) {
		o := testOptions(setDefault)
		out, c, err := Install(data, o)
		if err == nil {
			if err := toml.Unmarshal(out, new(map[string]any)); err != nil {
				t.Fatalf("output does not parse: %v\n%q", err, out)
			}
			again, c2, err := Install(out, o)
			if err != nil || c2.Changed || !bytes.Equal(again, out) {
				t.Fatalf("second install: changed %v, err %v\n%q\n%q", c2.Changed, err, out, again)
			}
			back, _, err := Uninstall(out, o, c)
			if err != nil {
				t.Fatalf("uninstall: %v\n%q", err, out)
			}
			if !bytes.Contains(data, []byte("gpurun")) && !bytes.Equal(back, data) {
				t.Fatalf("install+uninstall:\n%q\n%q\n%q", data, out, back)
			}
		}
		newMain, dropIn, c, err := DropIn(data, testDropIn, o)
		if err == nil {
			if err := toml.Unmarshal(newMain, new(map[string]any)); err != nil {
				t.Fatalf("main does not parse: %v\n%q", err, newMain)
			}
			if err := toml.Unmarshal(dropIn, new(map[string]any)); err != nil {
				t.Fatalf("drop-in does not parse: %v\n%q", err, dropIn)
			}
			back, _, err := UninstallDropIn(newMain, testDropIn, c)
			if err != nil {
				t.Fatalf("uninstall drop-in: %v\n%q", err, newMain)
			}
			if !bytes.Contains(data, []byte("gpurun")) && !bytes.Equal(back, data) {
				t.Fatalf("drop-in install+uninstall:\n%q\n%q\n%q", data, newMain, back)
			}
		}
	})
}

func TestUninstallDropInLeavesInPlaceInstall(t *testing.T) {
	in := readTestdata(t, "containerd-1.6.20-config-default.toml")
	out, _, err := Install(in, testOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	back, changed, err := UninstallDropIn(out, testDropIn, Change{})
	if err != nil || changed || !bytes.Equal(back, out) {
		t.Errorf("changed %v, err %v\n%s", changed, err, unidiff.Unified("x", out, back))
	}
}

// TestInstallCopiesTheEffectiveDefault: NVIDIA's runtime is the default
// in a drop-in (as nvidia-ctk writes one for containerd 2.x). Given the
// configuration containerd reads, gpurun stands in for it, copying its
// settings from the drop-in and chaining to it; reading the main file
// alone, it would copy runc.
func TestInstallCopiesTheEffectiveDefault(t *testing.T) {
	const mainPath, dropPath = "/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"
	for _, version := range []int{2, 3} {
		cri := RuntimePluginID(version)
		main := fmt.Sprintf("version = %d\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n\n[plugins.%q.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n", version, cri)
		drop := fmt.Sprintf("version = %d\n\n[plugins.%q.containerd]\n  default_runtime_name = \"nvidia\"\n\n[plugins.%q.containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n  privileged_without_host_devices = false\n\n[plugins.%q.containerd.runtimes.nvidia.options]\n  BinaryName = \"/usr/bin/nvidia-container-runtime\"\n  SystemdCgroup = true\n", version, cri, cri, cri)
		if version == 2 {
			// containerd 1.x: the drop-in's CRI section replaces the main
			// one, so it carries runc too.
			drop += fmt.Sprintf("\n[plugins.%q.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n", cri)
		}
		eff, err := Load(context.Background(), mainPath, LoadOptions{Root: t.TempDir(), Overlay: map[string][]byte{mainPath: []byte(main), dropPath: []byte(drop)}})
		if err != nil {
			t.Fatal(err)
		}
		o := testOptions(false)
		_, c, err := Install([]byte(main), o)
		if err != nil || c.CopiedFrom != "runc" || c.Chain != "" {
			t.Errorf("version %d, the main file alone: copied %q, chain %q, %v", version, c.CopiedFrom, c.Chain, err)
		}
		o.Effective = eff
		out, c, err := Install([]byte(main), o)
		if err != nil {
			t.Fatalf("version %d: %v", version, err)
		}
		if c.CopiedFrom != "nvidia" || c.Chain != "/usr/bin/nvidia-container-runtime" {
			t.Errorf("version %d: copied %q, chain %q", version, c.CopiedFrom, c.Chain)
		}
		_, rt := testPaths(version)
		r, _ := cfgtree.Get(decode(t, out), rt...)
		want := map[string]any{
			"runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": false,
			"pod_annotations": []any{"gpurun.io/*", "cdi.k8s.io/*"},
			"options":         map[string]any{"BinaryName": testBinary, "SystemdCgroup": true},
		}
		if p, ok := cfgtree.Equal(r, want); !ok {
			t.Errorf("version %d: runtime differs at %v:\n%s", version, p, out)
		}
		if !bytes.HasPrefix(out, []byte(main)) {
			t.Errorf("version %d: the main config's own lines changed:\n%s", version, out)
		}
	}
}
