package engineconf

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
)

var ctdUpdate = flag.Bool("update-containerd", false, "rewrite the golden files under testdata/containerd/golden")

const (
	ctdTestBinary = "/usr/local/bin/gpurun-runtime"
	ctdTestDropIn = "/etc/containerd/conf.d/gpurun.toml"
)

func ctdTestOptions(setDefault bool) ContainerdOptions {
	return ContainerdOptions{
		Name:           "gpurun",
		BinaryName:     ctdTestBinary,
		SetAsDefault:   setDefault,
		PodAnnotations: []string{"gpurun.io/*", "cdi.k8s.io/*"},
	}
}

// ctdFileCase is a real config under testdata/containerd and what an install
// must find in it.
type ctdFileCase struct {
	file        string
	version     int
	copiedFrom  string
	chain       string
	prevDefault string // "" with hadDefault false: no default_runtime_name key
	hadDefault  bool
	systemd     any // options.SystemdCgroup of the added runtime; nil: absent
}

func ctdFileCases() []ctdFileCase {
	return []ctdFileCase{
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

func ctdRead(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "containerd", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ctdGolden compares got with a golden file, or rewrites it with
// -update-containerd.
func ctdGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "containerd", "golden", name)
	if *ctdUpdate {
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
		t.Errorf("output differs from %s:\n%s", path, UnifiedDiff(name, want, got))
	}
}

func ctdTestDecode(t testing.TB, data []byte) map[string]any {
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

// ctdPrune removes empty tables, recursively.
func ctdPrune(m map[string]any) {
	for k, v := range m {
		if c, ok := v.(map[string]any); ok {
			ctdPrune(c)
			if len(c) == 0 {
				delete(m, k)
			}
		}
	}
}

func ctdDelete(m map[string]any, path ...string) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			return
		}
		m = next
	}
	delete(m, path[len(path)-1])
}

func ctdTestPaths(version int) (ctd, rt []string) {
	ctd = []string{"plugins", ctdPluginID(version), "containerd"}
	return ctd, ctdJoin(ctd, "runtimes", "gpurun")
}

// ctdCheckKept checks that out keeps every setting of in outside gpurun's:
// the runtime, default_runtime_name when setDefault, and the version of an
// empty file.
func ctdCheckKept(t *testing.T, in, out []byte, version int, setDefault bool) {
	t.Helper()
	before, after := ctdTestDecode(t, in), ctdTestDecode(t, out)
	ctd, rt := ctdTestPaths(version)
	ctdDelete(before, rt...)
	ctdDelete(after, rt...)
	if _, ok := ctdGet(before, ctdJoin(ctd, "runtimes", "runc")...); !ok && version == 2 {
		// Added to keep containerd 1.x's built-in runc.
		ctdDelete(after, ctdJoin(ctd, "runtimes", "runc")...)
	}
	if setDefault {
		if v, _ := ctdGet(after, ctdJoin(ctd, "default_runtime_name")...); v != "gpurun" {
			t.Errorf("default_runtime_name = %v, want gpurun", v)
		}
		if v, ok := ctdGet(before, ctdJoin(ctd, "default_runtime_name")...); ok {
			ctdSet(after, ctdJoin(ctd, "default_runtime_name"), v)
		} else {
			ctdDelete(after, ctdJoin(ctd, "default_runtime_name")...)
		}
	}
	if len(before) == 0 {
		delete(after, "version")
	}
	ctdPrune(before)
	ctdPrune(after)
	if !reflect.DeepEqual(before, after) {
		t.Errorf("settings outside gpurun's changed:\nbefore %v\nafter  %v", before, after)
	}
}

// ctdCheckLines checks that every line of in is still in out, in order,
// except a line setting key, which may have been edited.
func ctdCheckLines(t *testing.T, in, out []byte, key string) {
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

// ctdRuntime returns the gpurun runtime of a decoded config.
func ctdRuntime(t *testing.T, m map[string]any, version int) map[string]any {
	t.Helper()
	_, rt := ctdTestPaths(version)
	v, ok := ctdGet(m, rt...)
	r, isMap := v.(map[string]any)
	if !ok || !isMap {
		t.Fatalf("no runtimes.gpurun table in %v", m)
	}
	return r
}

func TestContainerdFilesListed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "containerd", "*.toml"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(ctdRead(t, "README.md"))
	var listed []string
	for _, c := range ctdFileCases() {
		listed = append(listed, c.file)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if !slices.Contains(listed, name) {
			t.Errorf("%s has no case in ctdFileCases", name)
		}
		if !strings.Contains(readme, name) {
			t.Errorf("%s is not described in testdata/containerd/README.md", name)
		}
	}
}

func TestContainerdVersion(t *testing.T) {
	for _, c := range ctdFileCases() {
		v, err := ContainerdVersion(ctdRead(t, c.file))
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
		v, err := ContainerdVersion([]byte(tc.in))
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

func TestInstallContainerdFiles(t *testing.T) {
	for _, fc := range ctdFileCases() {
		for _, setDefault := range []bool{false, true} {
			name := strings.TrimSuffix(fc.file, ".toml")
			if setDefault {
				name += ".default"
			}
			t.Run(name, func(t *testing.T) {
				in := ctdRead(t, fc.file)
				o := ctdTestOptions(setDefault)
				out, c, err := InstallContainerd(in, o)
				if err != nil {
					t.Fatal(err)
				}
				ctdGolden(t, "installed/"+name+".toml", out)
				want := ContainerdChange{Changed: true, Version: fc.version, AddedRuntime: true, Chain: fc.chain, CopiedFrom: fc.copiedFrom}
				if setDefault {
					want.SetDefault, want.PreviousDefault, want.HadDefaultKey = true, fc.prevDefault, fc.hadDefault
				}
				if c != want {
					t.Errorf("change %+v\nwant   %+v", c, want)
				}
				ctdCheckKept(t, in, out, fc.version, setDefault)
				ctdCheckLines(t, in, out, "default_runtime_name")
				for _, l := range strings.Split(string(in), "\n") {
					if l := strings.TrimSpace(l); strings.HasPrefix(l, "#") && !bytes.Contains(out, []byte(l)) {
						t.Errorf("comment %q lost", l)
					}
				}
				if !bytes.Contains(out, []byte(ctdMarker+"\n")) {
					t.Errorf("no marker comment")
				}

				m := ctdTestDecode(t, out)
				r := ctdRuntime(t, m, fc.version)
				if r["runtime_type"] != "io.containerd.runc.v2" {
					t.Errorf("runtime_type %v", r["runtime_type"])
				}
				opts, _ := r["options"].(map[string]any)
				if opts["BinaryName"] != ctdTestBinary {
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
				ctd, _ := ctdTestPaths(fc.version)
				if srcV, ok := ctdGet(ctdTestDecode(t, in), ctdJoin(ctd, "runtimes", fc.copiedFrom)...); ok {
					src := srcV.(map[string]any)
					for k, v := range src {
						switch {
						case k == "options":
							for ok, ov := range v.(map[string]any) {
								if ok != "BinaryName" && !reflect.DeepEqual(opts[ok], ov) {
									t.Errorf("options.%s = %v, want %v copied from %s", ok, opts[ok], ov, fc.copiedFrom)
								}
							}
						case ctdCopiedRuntimeKey(k) && !reflect.DeepEqual(r[k], v):
							t.Errorf("%s = %v, want %v copied from %s", k, r[k], v, fc.copiedFrom)
						}
					}
				}

				again, c2, err := InstallContainerd(out, o)
				if err != nil || c2.Changed || !bytes.Equal(again, out) {
					t.Errorf("second install: changed %v, err %v\n%s", c2.Changed, err, UnifiedDiff(name, out, again))
				}
				back, changed, err := UninstallContainerd(out, o, c)
				if err != nil || !changed || !bytes.Equal(back, in) {
					t.Errorf("uninstall: changed %v, err %v\n%s", changed, err, UnifiedDiff(name, in, back))
				}
				if same, changed, err := UninstallContainerd(in, o, ContainerdChange{}); err != nil || changed || !bytes.Equal(same, in) {
					t.Errorf("uninstall of a config without gpurun: changed %v, err %v", changed, err)
				}
			})
		}
	}
}

func TestInstallContainerdForms(t *testing.T) {
	const cri = `[plugins."io.containerd.grpc.v1.cri"`
	for _, tc := range []struct {
		name       string
		in         string
		setDefault bool
		contains   []string // in the output
		err        string
		change     *ContainerdChange
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
			change:     &ContainerdChange{Changed: true, Version: 2, AddedRuntime: true, SetDefault: true, CopiedFrom: "runc"},
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
			change:     &ContainerdChange{Changed: true, Version: 2, AddedRuntime: true, CopiedFrom: "runc"},
		},
		{
			name: "kata default: copy runc, no chain",
			in: "version = 2\n" + cri + ".containerd]\n  default_runtime_name = \"kata\"\n" +
				cri + ".containerd.runtimes.kata]\n  runtime_type = \"io.containerd.kata.v2\"\n" +
				cri + ".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  snapshotter = \"stargz\"\n" +
				cri + ".containerd.runtimes.runc.options]\n  BinaryName = \"/opt/runc\"\n  SystemdCgroup = true\n",
			setDefault: true,
			contains:   []string{"default_runtime_name = \"gpurun\"", "  snapshotter = \"stargz\"\n", "  SystemdCgroup = true\n"},
			change:     &ContainerdChange{Changed: true, Version: 2, AddedRuntime: true, SetDefault: true, PreviousDefault: "kata", HadDefaultKey: true, Chain: "/opt/runc", CopiedFrom: "runc"},
		},
		{
			name: "existing runtime: BinaryName replaced in place",
			in: "version = 2\n" + cri + ".containerd.runtimes.gpurun]\n  runtime_type = \"io.containerd.runc.v2\"\n" +
				cri + ".containerd.runtimes.gpurun.options]\n  BinaryName = '/old/gpurun-runtime' # old\n",
			contains:   []string{"  BinaryName = '/usr/local/bin/gpurun-runtime' # old\n"},
			change:     &ContainerdChange{Changed: true, Version: 2},
			keepOnUndo: true,
		},
		{
			name:     "existing runtime without options: options table appended",
			in:       "version = 2\n" + cri + ".containerd.runtimes.gpurun]\n  runtime_type = \"io.containerd.runc.v2\"\n",
			contains: []string{ctdMarker + "\n" + cri + ".containerd.runtimes.gpurun.options]\n  BinaryName = \"/usr/local/bin/gpurun-runtime\"\n"},
			change:   &ContainerdChange{Changed: true, Version: 2},
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
			contains:   []string{cri + ".containerd]\n  default_runtime_name = \"gpurun\"\n" + ctdMarker},
		},
		{
			name:       "CRLF line ends",
			in:         "version = 2\r\n" + cri + ".containerd]\r\n  snapshotter = \"overlayfs\"\r\n",
			setDefault: true,
			contains:   []string{"  default_runtime_name = \"gpurun\"\r\n  snapshotter", "\r\n" + ctdMarker + "\r\n" + cri + ".containerd.runtimes.runc]\r\n  runtime_type = \"io.containerd.runc.v2\"\r\n\r\n" + cri + ".containerd.runtimes.gpurun]\r\n"},
		},
		{
			name:     "comments only",
			in:       "# containerd runs on defaults\n",
			contains: []string{"# containerd runs on defaults\n\n" + ctdMarker + "\nversion = 2\n\n" + cri + ".containerd.runtimes.runc]\n"},
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
			o := ctdTestOptions(tc.setDefault)
			out, c, err := InstallContainerd([]byte(tc.in), o)
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
			m := ctdTestDecode(t, out)
			version, _ := ContainerdVersion(out)
			opts, _ := ctdRuntime(t, m, version)["options"].(map[string]any)
			if opts["BinaryName"] != ctdTestBinary {
				t.Errorf("BinaryName %v", opts["BinaryName"])
			}
			if !tc.keepOnUndo {
				ctdCheckKept(t, []byte(tc.in), out, version, tc.setDefault)
			}
			again, c2, err := InstallContainerd(out, o)
			if err != nil || c2.Changed || !bytes.Equal(again, out) {
				t.Errorf("second install: changed %v, err %v", c2.Changed, err)
			}
			back, _, err := UninstallContainerd(out, o, c)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.keepOnUndo && string(back) != tc.in {
				t.Errorf("uninstall:\n%s", UnifiedDiff(tc.name, []byte(tc.in), back))
			}
			if tc.keepOnUndo && !bytes.Equal(back, out) {
				t.Errorf("uninstall touched a runtime it did not add:\n%s", UnifiedDiff(tc.name, out, back))
			}
		})
	}
}

func TestInstallContainerdOptionErrors(t *testing.T) {
	in := []byte("version = 2\n")
	for _, tc := range []struct {
		o   ContainerdOptions
		err string
	}{
		{ContainerdOptions{Name: "gpu run", BinaryName: ctdTestBinary}, `runtime name "gpu run"`},
		{ContainerdOptions{Name: "", BinaryName: ctdTestBinary}, `runtime name ""`},
		{ContainerdOptions{Name: "runc", BinaryName: ctdTestBinary}, `would replace runc`},
		{ContainerdOptions{Name: "gpurun", BinaryName: "gpurun-runtime"}, "not an absolute path"},
		{ContainerdOptions{Name: "gpurun", BinaryName: "/bin/x\n"}, "control characters"},
		{ContainerdOptions{Name: "gpurun", BinaryName: ctdTestBinary, PodAnnotations: []string{""}}, "pod annotation"},
	} {
		if _, _, err := InstallContainerd(in, tc.o); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: error %v, want one containing %q", tc.o, err, tc.err)
		}
	}
	if _, _, _, err := ContainerdDropIn(in, "conf.d/gpurun.toml", ctdTestOptions(false)); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("relative drop-in path: %v", err)
	}
}

func TestUninstallContainerdAfterAdminEdits(t *testing.T) {
	in := ctdRead(t, "containerd-1.6.20-config-default.toml")
	o := ctdTestOptions(true)
	out, c, err := InstallContainerd(in, o)
	if err != nil {
		t.Fatal(err)
	}
	ctd, rt := ctdTestPaths(2)
	def := ctdJoin(ctd, "default_runtime_name")

	t.Run("table appended after the block stays", func(t *testing.T) {
		edited := append(slices.Clone(out), "\n# mine\n[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"x\"]\n  endpoint = [\"https://x\"]\n"...)
		back, _, err := UninstallContainerd(edited, o, c)
		if err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(in), "\n# mine\n[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"x\"]\n  endpoint = [\"https://x\"]\n"...)
		if !bytes.Equal(back, want) {
			t.Errorf("got:\n%s", UnifiedDiff("edited", want, back))
		}
	})
	t.Run("default changed by the admin is left alone", func(t *testing.T) {
		edited := bytes.Replace(out, []byte(`default_runtime_name = "gpurun"`), []byte(`default_runtime_name = "crun"`), 1)
		back, _, err := UninstallContainerd(edited, o, c)
		if err != nil {
			t.Fatal(err)
		}
		m := ctdTestDecode(t, back)
		if v, _ := ctdGet(m, def...); v != "crun" {
			t.Errorf("default %v, want crun", v)
		}
		if _, ok := ctdGet(m, rt...); ok {
			t.Errorf("runtime not removed")
		}
	})
	t.Run("lost change record: the default naming the removed runtime goes", func(t *testing.T) {
		back, changed, err := UninstallContainerd(out, o, ContainerdChange{})
		if err != nil || !changed {
			t.Fatal(changed, err)
		}
		m := ctdTestDecode(t, back)
		if v, ok := ctdGet(m, def...); ok {
			t.Errorf("default %v left", v)
		}
		if _, ok := ctdGet(m, rt...); ok {
			t.Errorf("runtime not removed")
		}
	})
	t.Run("CRLF no final newline", func(t *testing.T) {
		in := []byte("version = 2\r\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]")
		out, c, err := InstallContainerd(in, o)
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := UninstallContainerd(out, o, c)
		if err != nil || !bytes.Equal(back, in) {
			t.Errorf("%v\n%q\n%q", err, out, back)
		}
	})
}

func TestContainerdDropIn(t *testing.T) {
	for _, fc := range ctdFileCases() {
		for _, setDefault := range []bool{false, true} {
			name := strings.TrimSuffix(fc.file, ".toml")
			if setDefault {
				name += ".default"
			}
			t.Run(name, func(t *testing.T) {
				in := ctdRead(t, fc.file)
				o := ctdTestOptions(setDefault)
				newMain, dropIn, c, err := ContainerdDropIn(in, ctdTestDropIn, o)
				if err != nil {
					t.Fatal(err)
				}
				ctdGolden(t, "dropin/"+name+".main.toml", newMain)
				ctdGolden(t, "dropin/"+name+".dropin.toml", dropIn)
				covered := fc.version >= 3 // their default config imports /etc/containerd/conf.d/*.toml
				if c.Changed == covered || bytes.Equal(newMain, in) != covered {
					t.Errorf("main changed %v (%v), want %v", c.Changed, !bytes.Equal(newMain, in), !covered)
				}
				if c.Version != fc.version || !c.AddedRuntime || c.Chain != fc.chain || c.CopiedFrom != fc.copiedFrom || c.SetDefault != setDefault {
					t.Errorf("change %+v", c)
				}

				// The main config: only imports changed.
				before, after := ctdTestDecode(t, in), ctdTestDecode(t, newMain)
				imports, _ := after["imports"].([]any)
				if !covered && !slices.Contains(imports, any(ctdTestDropIn)) {
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
				ctdCheckLines(t, in, newMain, "imports")

				// The drop-in: same version; for version 2 the whole CRI
				// section of the main config plus gpurun's tables.
				dm := ctdTestDecode(t, dropIn)
				if v, _ := dm["version"].(int64); int(v) != fc.version {
					t.Errorf("drop-in version %v", dm["version"])
				}
				r := ctdRuntime(t, dm, fc.version)
				if opts, _ := r["options"].(map[string]any); opts["BinaryName"] != ctdTestBinary || opts["SystemdCgroup"] != fc.systemd {
					t.Errorf("drop-in options %v", opts)
				}
				ctd, rt := ctdTestPaths(fc.version)
				if v, _ := ctdGet(dm, ctdJoin(ctd, "default_runtime_name")...); setDefault && v != "gpurun" {
					t.Errorf("drop-in default %v", v)
				}
				if fc.version == 2 {
					mainCRI, _ := ctdGet(ctdTestDecode(t, in), "plugins", ctdPluginID(2))
					ctdDelete(dm, rt...)
					if setDefault {
						if v, ok := ctdGet(ctdTestDecode(t, in), ctdJoin(ctd, "default_runtime_name")...); ok {
							ctdSet(dm, ctdJoin(ctd, "default_runtime_name"), v)
						} else {
							ctdDelete(dm, ctdJoin(ctd, "default_runtime_name")...)
						}
					}
					if _, ok := ctdGet(ctdTestDecode(t, in), ctdJoin(ctd, "runtimes", "runc")...); !ok {
						ctdDelete(dm, ctdJoin(ctd, "runtimes", "runc")...)
					}
					ctdPrune(dm)
					dropCRI, _ := ctdGet(dm, "plugins", ctdPluginID(2))
					if m, ok := mainCRI.(map[string]any); ok {
						ctdPrune(m)
						if len(m) == 0 {
							mainCRI = nil
						}
					}
					if !reflect.DeepEqual(mainCRI, dropCRI) {
						t.Errorf("drop-in CRI section differs from the main config's:\nmain    %v\ndrop-in %v", mainCRI, dropCRI)
					}
				}

				newMain2, dropIn2, c2, err := ContainerdDropIn(newMain, ctdTestDropIn, o)
				if err != nil || c2.Changed || !bytes.Equal(newMain2, newMain) || !bytes.Equal(dropIn2, dropIn) {
					t.Errorf("second drop-in install: changed %v, err %v\n%s%s", c2.Changed, err, UnifiedDiff("main", newMain, newMain2), UnifiedDiff("drop-in", dropIn, dropIn2))
				}
				back, changed, err := UninstallContainerdDropIn(newMain, ctdTestDropIn, c)
				if err != nil || changed != c.Changed || !bytes.Equal(back, in) {
					t.Errorf("uninstall: changed %v, err %v\n%s", changed, err, UnifiedDiff(name, in, back))
				}
			})
		}
	}
}

func TestContainerdDropInImports(t *testing.T) {
	o := ctdTestOptions(false)
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
		{"no imports", "# c\nversion = 2 # v\n[plugins]\n", "# c\nversion = 2 # v\nimports = [\"/etc/containerd/conf.d/gpurun.toml\"] " + ctdMarker + "\n[plugins]\n", ""},
		{"no imports, no final newline", "version = 2", "version = 2\nimports = [\"/etc/containerd/conf.d/gpurun.toml\"] " + ctdMarker, ""},
		{"empty", "", ctdMarker + "\nversion = 2\nimports = [\"/etc/containerd/conf.d/gpurun.toml\"]\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newMain, _, c, err := ContainerdDropIn([]byte(tc.in), ctdTestDropIn, o)
			if err != nil {
				t.Fatal(err)
			}
			if string(newMain) != tc.want {
				t.Errorf("got:\n%s", UnifiedDiff(tc.name, []byte(tc.want), newMain))
			}
			undo := tc.in
			if tc.undo != "" {
				undo = tc.undo
			}
			back, changed, err := UninstallContainerdDropIn(newMain, ctdTestDropIn, c)
			if err != nil || string(back) != undo || changed != (undo != tc.want) {
				t.Errorf("uninstall: changed %v, err %v\n%s", changed, err, UnifiedDiff(tc.name, []byte(undo), back))
			}
		})
	}
	if _, _, _, err := ContainerdDropIn([]byte("version = 2\nimports = \"/a\"\n"), ctdTestDropIn, o); err == nil || !strings.Contains(err.Error(), "line 2: imports is not an array") {
		t.Errorf("imports not an array: %v", err)
	}
	if _, _, _, err := ContainerdDropIn([]byte("version = 2\n[plugins]\n  \"io.containerd.grpc.v1.cri\" = { sandbox_image = \"x\" }\n"), ctdTestDropIn, o); err == nil || !strings.Contains(err.Error(), "inline table") {
		t.Errorf("inline CRI section: %v", err)
	}
}

// ctdContainerd2 returns a containerd 2.x binary for version 3 and 4
// configs: $GPURUN_TEST_CONTAINERD2, which `make test-unit` builds and sets.
func ctdContainerd2(t *testing.T) string {
	p := os.Getenv("GPURUN_TEST_CONTAINERD2")
	if p == "" {
		t.Fatal("GPURUN_TEST_CONTAINERD2 is not set: run the tests with make (it builds containerd 2.x into .tools/), or point it at a containerd 2.3+ binary")
	}
	return p
}

// ctdDump runs containerd config dump over config (and the files it
// imports) and decodes the result.
func ctdDump(t *testing.T, bin, config string) map[string]any {
	t.Helper()
	cmd := exec.Command(bin, "--config", config, "config", "dump")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --config %s config dump: %v\n%s", bin, config, err, stderr.Bytes())
	}
	return ctdTestDecode(t, out)
}

// TestContainerdConfigDump has containerd itself load every installed
// config: Debian's containerd 1.6 for version 2 (required: CI installs it),
// containerd 2.x for versions 3 and 4 (GPURUN_TEST_CONTAINERD2, set by make).
func TestContainerdConfigDump(t *testing.T) {
	ctd16, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatalf("containerd binary not found (apt-get install containerd): %v", err)
	}
	for _, fc := range ctdFileCases() {
		for _, setDefault := range []bool{false, true} {
			for _, mode := range []string{"in-place", "drop-in"} {
				name := strings.TrimSuffix(fc.file, ".toml") + "/" + mode
				if setDefault {
					name += "/default"
				}
				t.Run(name, func(t *testing.T) {
					bin := ctd16
					if fc.version >= 3 {
						bin = ctdContainerd2(t)
					}
					in := ctdRead(t, fc.file)
					o := ctdTestOptions(setDefault)
					dir := t.TempDir()
					mainPath := filepath.Join(dir, "config.toml")
					if err := os.WriteFile(mainPath, in, 0o644); err != nil {
						t.Fatal(err)
					}
					before := ctdDump(t, bin, mainPath)
					switch mode {
					case "in-place":
						out, _, err := InstallContainerd(in, o)
						if err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(mainPath, out, 0o644); err != nil {
							t.Fatal(err)
						}
					case "drop-in":
						dropInPath := filepath.Join(dir, "conf.d", "gpurun.toml")
						newMain, dropIn, _, err := ContainerdDropIn(in, dropInPath, o)
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
					after := ctdDump(t, bin, mainPath)
					// containerd 2.x dumps the current version's layout.
					version := fc.version
					if v, ok := after["version"].(int64); ok && v >= 3 {
						version = int(v)
					}
					ctd, rt := ctdTestPaths(version)
					r := ctdRuntime(t, after, version)
					opts, _ := r["options"].(map[string]any)
					if opts["BinaryName"] != ctdTestBinary || r["runtime_type"] != "io.containerd.runc.v2" {
						t.Errorf("containerd sees runtime %v", r)
					}
					if fc.systemd == true && opts["SystemdCgroup"] != true {
						t.Errorf("containerd sees SystemdCgroup %v", opts["SystemdCgroup"])
					}
					def, _ := ctdGet(after, ctdJoin(ctd, "default_runtime_name")...)
					if setDefault && def != "gpurun" {
						t.Errorf("containerd sees default_runtime_name %v", def)
					}
					// Nothing else changed in what containerd sees.
					ctdDelete(after, rt...)
					ctdDelete(after, "imports")
					ctdDelete(before, "imports")
					if setDefault {
						v, _ := ctdGet(before, ctdJoin(ctd, "default_runtime_name")...)
						ctdSet(after, ctdJoin(ctd, "default_runtime_name"), v)
					}
					// containerd 1.x shows its built-in runc with every option
					// at its zero value; the runc table gpurun keeps it with
					// has none, which means the same.
					for _, m := range []map[string]any{before, after} {
						if o, ok := ctdGet(m, ctdJoin(ctd, "runtimes", "runc", "options")...); ok {
							for k, v := range o.(map[string]any) {
								if v == "" || v == false || v == int64(0) {
									delete(o.(map[string]any), k)
								}
							}
						}
					}
					if p, ok := ctdEqual(before, after, nil); !ok {
						t.Errorf("containerd sees another change at %s", ctdPathText(p))
					}
					t.Logf("containerd config dump: runtimes.gpurun = %v; default_runtime_name = %v", r, def)
				})
			}
		}
	}
}

func FuzzInstallContainerd(f *testing.F) {
	for _, fc := range ctdFileCases() {
		f.Add(ctdRead(f, fc.file), false)
		f.Add(ctdRead(f, fc.file), true)
	}
	f.Add([]byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  containerd.snapshotter = \"x\"\n"), true)
	f.Add([]byte("version = 3\r\n[plugins.'io.containerd.cri.v1.runtime'.containerd]"), true)
	f.Add([]byte("# c\n"), true)
	f.Add([]byte("version = 2\nimports = [\n  \"/a.toml\", # a\n]\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  runtimes = { runc = { options = { SystemdCgroup = true } } }\n"), false)
	f.Add([]byte("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.rt]\n  options.BinaryName = '/x'\n  options.'Root' = \"/r\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = 'rt'\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, setDefault bool) {
		o := ctdTestOptions(setDefault)
		out, c, err := InstallContainerd(data, o)
		if err == nil {
			if err := toml.Unmarshal(out, new(map[string]any)); err != nil {
				t.Fatalf("output does not parse: %v\n%q", err, out)
			}
			again, c2, err := InstallContainerd(out, o)
			if err != nil || c2.Changed || !bytes.Equal(again, out) {
				t.Fatalf("second install: changed %v, err %v\n%q\n%q", c2.Changed, err, out, again)
			}
			back, _, err := UninstallContainerd(out, o, c)
			if err != nil {
				t.Fatalf("uninstall: %v\n%q", err, out)
			}
			if !bytes.Contains(data, []byte("gpurun")) && !bytes.Equal(back, data) {
				t.Fatalf("install+uninstall:\n%q\n%q\n%q", data, out, back)
			}
		}
		newMain, dropIn, c, err := ContainerdDropIn(data, ctdTestDropIn, o)
		if err == nil {
			if err := toml.Unmarshal(newMain, new(map[string]any)); err != nil {
				t.Fatalf("main does not parse: %v\n%q", err, newMain)
			}
			if err := toml.Unmarshal(dropIn, new(map[string]any)); err != nil {
				t.Fatalf("drop-in does not parse: %v\n%q", err, dropIn)
			}
			back, _, err := UninstallContainerdDropIn(newMain, ctdTestDropIn, c)
			if err != nil {
				t.Fatalf("uninstall drop-in: %v\n%q", err, newMain)
			}
			if !bytes.Contains(data, []byte("gpurun")) && !bytes.Equal(back, data) {
				t.Fatalf("drop-in install+uninstall:\n%q\n%q\n%q", data, newMain, back)
			}
		}
	})
}

func TestUninstallContainerdDropInLeavesInPlaceInstall(t *testing.T) {
	in := ctdRead(t, "containerd-1.6.20-config-default.toml")
	out, _, err := InstallContainerd(in, ctdTestOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	back, changed, err := UninstallContainerdDropIn(out, ctdTestDropIn, ContainerdChange{})
	if err != nil || changed || !bytes.Equal(back, out) {
		t.Errorf("changed %v, err %v\n%s", changed, err, UnifiedDiff("x", out, back))
	}
}
