package containerd

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// answers are what the reader says about a config, in a form to compare.
type answers struct {
	Files    []string // relative to the config's directory
	Root     string
	State    string
	Address  string
	Default  string
	Sandbox  string
	CNI      CNI
	Runtimes map[string]rt
	Disabled []string
	NRI      *NRI // compared when set
}

type rt struct {
	Type, BinaryName string
	PodAnnotations   []string
	SystemdCgroup    any
}

func answersOf(t *testing.T, c *Config, dir string) answers {
	t.Helper()
	a := answers{
		Root: c.Root(), State: c.State(), Address: c.Address(), Default: c.DefaultRuntime(),
		Sandbox: c.SandboxImage(), CNI: c.CNI(), Runtimes: map[string]rt{},
	}
	for _, f := range c.Files {
		rel, err := filepath.Rel(dir, f)
		if err != nil {
			t.Fatal(err)
		}
		a.Files = append(a.Files, rel)
	}
	for _, r := range c.Runtimes() {
		a.Runtimes[r.Name] = rt{Type: r.Type, BinaryName: r.BinaryName, PodAnnotations: r.PodAnnotations, SystemdCgroup: r.LoadOptions["SystemdCgroup"]}
	}
	if list, ok := c.Get("disabled_plugins"); ok {
		for _, v := range list.([]any) {
			a.Disabled = append(a.Disabled, v.(string))
		}
	}
	return a
}

// hostWith makes a host root with a scenario of testdata/imports as
// /etc/containerd.
func hostWith(t *testing.T, scenario string) string {
	t.Helper()
	root := t.TempDir()
	dst := filepath.Join(root, "etc", "containerd")
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("testdata", "read", "imports", scenario))); err != nil {
		t.Fatal(err)
	}
	return root
}

const (
	nvidiaBin = "/usr/bin/nvidia-container-runtime"
	testSock  = "/run/containerd-test/containerd.sock"
)

func defaultCNI() CNI { return CNI{BinDirs: []string{DefaultCNIBinDir}, ConfDir: DefaultCNIConfDir} }

// TestLoadImports reads each scenario under testdata/imports as the
// containerd of each generation would. TestMatchesConfigDump checks these
// readings against what containerd itself dumps.
func TestLoadImports(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		gen      Generation
		release  string
		want     answers
	}{
		{"v2-import-replaces-cri-section", InferGeneration, "", answers{
			Files: []string{"config.toml", "conf.d/99-nvidia.toml"},
			Root:  "/var/lib/containerd-test", State: "/run/containerd-test", Address: testSock,
			Default: "nvidia", CNI: defaultCNI(),
			Runtimes: map[string]rt{"nvidia": {Type: RuncV2, BinaryName: nvidiaBin, SystemdCgroup: true}},
		}},
		{"v2-import-replaces-cri-section", Containerd2, "", answers{
			Files: []string{"config.toml", "conf.d/99-nvidia.toml"},
			Root:  "/var/lib/containerd-test", State: "/run/containerd-test", Address: testSock,
			Default: "nvidia", Sandbox: "registry.example.com/pause:main",
			CNI: CNI{BinDirs: []string{"/usr/lib/cni"}, ConfDir: "/etc/cni/main.d"},
			Runtimes: map[string]rt{
				"nvidia": {Type: RuncV2, BinaryName: nvidiaBin, SystemdCgroup: true},
				"runc":   {Type: RuncV2, PodAnnotations: []string{"main/*"}, SystemdCgroup: true},
			},
		}},
		{"v2-cycle-and-arrays", Containerd1, "", answers{
			Files: []string{"config.toml", "conf.d/a.toml", "conf.d/b.toml"},
			Root:  "/var/lib/containerd-test", State: "/run/containerd-a", Address: "/run/containerd-b/containerd.sock",
			Default: "crun", CNI: defaultCNI(),
			Runtimes: map[string]rt{"crun": {Type: RuncV2, BinaryName: "/usr/bin/crun"}},
			Disabled: []string{"io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.zfs"},
		}},
		{"v2-cycle-and-arrays", Containerd2, "", answers{
			Files: []string{"config.toml", "conf.d/a.toml", "conf.d/b.toml"},
			Root:  "/var/lib/containerd-test", State: "/run/containerd-a", Address: "/run/containerd-b/containerd.sock",
			Default: "crun", CNI: defaultCNI(),
			Runtimes: map[string]rt{"crun": {Type: RuncV2, BinaryName: "/usr/bin/crun"}},
			Disabled: []string{"io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.zfs"},
		}},
		{"v2-relative-glob", InferGeneration, "1.6.20~ds1", answers{
			Files: []string{"config.toml"}, Root: "/var/lib/containerd-test", State: DefaultState, Address: DefaultAddress,
			Default: "runc", CNI: defaultCNI(), Runtimes: map[string]rt{},
		}},
		{"v2-relative-glob", InferGeneration, "1.7.16", answers{
			Files: []string{"config.toml", "conf.d/10-root.toml"}, Root: "/var/lib/containerd-from-glob", State: DefaultState, Address: DefaultAddress,
			Default: "runc", CNI: defaultCNI(), Runtimes: map[string]rt{},
		}},
		{"v3-nested-imports", InferGeneration, "", answers{
			Files: []string{"config.toml", "conf.d/10-default.toml", "extra/nvidia.toml"},
			Root:  "/var/lib/containerd-test", State: "/run/containerd-test", Address: testSock,
			Default: "nvidia", Sandbox: "registry.example.com/pause:v3",
			CNI: CNI{BinDirs: []string{"/usr/lib/cni", "/opt/cni/bin"}, ConfDir: DefaultCNIConfDir},
			Runtimes: map[string]rt{
				"nvidia": {Type: RuncV2, BinaryName: nvidiaBin},
				"runc":   {Type: RuncV2, PodAnnotations: []string{"drop-in/*"}, SystemdCgroup: true},
			},
			NRI: &NRI{Enabled: true, Socket: "/run/containerd-test/nri.sock", PluginPath: DefaultNRIPluginPath, PluginConfigPath: DefaultNRIPluginConfs},
		}},
		{"v4-with-older-drop-ins", InferGeneration, "", answers{
			Files: []string{"config.toml", "conf.d/10-v2.toml", "conf.d/20-v3.toml"},
			Root:  "/var/lib/containerd-test", State: "/run/containerd-test", Address: "/run/containerd-test/from-v3.sock",
			Default: "kata", Sandbox: "registry.example.com/pause:from-v2",
			CNI: CNI{BinDirs: []string{"/usr/lib/cni"}, ConfDir: DefaultCNIConfDir},
			Runtimes: map[string]rt{
				"runc": {Type: RuncV2},
				"kata": {Type: "io.containerd.kata.v2", PodAnnotations: []string{"io.katacontainers.*"}},
			},
			NRI: &NRI{Enabled: true, Socket: DefaultNRISocket, PluginPath: DefaultNRIPluginPath, PluginConfigPath: DefaultNRIPluginConfs},
		}},
	} {
		t.Run(tc.scenario+"/"+tc.gen.String()+"/"+tc.release, func(t *testing.T) {
			root := hostWith(t, tc.scenario)
			c, err := Load(context.Background(), "/etc/containerd/config.toml", LoadOptions{Root: root, Generation: tc.gen, Release: tc.release})
			if err != nil {
				t.Fatal(err)
			}
			got := answersOf(t, c, "/etc/containerd")
			if tc.want.NRI != nil {
				n := c.NRI()
				got.NRI = &n
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestPluginIDs(t *testing.T) {
	for _, tc := range []struct {
		version         int
		runtime, images string
		cri             []string
	}{
		{2, "io.containerd.grpc.v1.cri", "io.containerd.grpc.v1.cri", []string{"io.containerd.grpc.v1.cri"}},
		{3, "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", []string{"io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"}},
		{4, "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images", []string{"io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"}},
	} {
		if RuntimePluginID(tc.version) != tc.runtime || ImagesPluginID(tc.version) != tc.images || !slices.Equal(CRIPluginIDs(tc.version), tc.cri) {
			t.Errorf("version %d: %s %s %v", tc.version, RuntimePluginID(tc.version), ImagesPluginID(tc.version), CRIPluginIDs(tc.version))
		}
	}
}

// TestDefaults reads containerd's own default configs (containerd config
// default of 1.6.20 and 2.4.2).
func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		file    string
		version int
		gen     Generation
		sandbox string
		cni     CNI
		nri     bool
	}{
		{"containerd-1.6.20-config-default.toml", 2, Containerd1, "registry.k8s.io/pause:3.6", defaultCNI(), false},
		{"containerd-2.4.2-config-default.toml", 4, Containerd2, "registry.k8s.io/pause:3.10.2", defaultCNI(), true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path, _ := filepath.Abs(filepath.Join("testdata", "read", tc.file))
			c, err := Load(context.Background(), path, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Version != tc.version || c.Generation != tc.gen || !c.Exists || !slices.Equal(c.Files, []string{path}) {
				t.Errorf("version %d, generation %v, exists %v, files %v", c.Version, c.Generation, c.Exists, c.Files)
			}
			if c.Root() != DefaultRoot || c.State() != DefaultState || c.Address() != DefaultAddress || c.DefaultRuntime() != "runc" {
				t.Errorf("root %s state %s address %s default %s", c.Root(), c.State(), c.Address(), c.DefaultRuntime())
			}
			if c.SandboxImage() != tc.sandbox || !reflect.DeepEqual(c.CNI(), tc.cni) || c.NRI().Enabled != tc.nri {
				t.Errorf("sandbox %q cni %+v nri %+v", c.SandboxImage(), c.CNI(), c.NRI())
			}
			r, ok := c.Runtime("runc")
			if !ok || r.Type != RuncV2 || r.LoadOptions["SystemdCgroup"] != false {
				t.Errorf("runc %+v", r)
			}
			if _, disabled := c.CRIDisabled(); disabled {
				t.Error("CRI disabled")
			}
		})
	}
}

func TestLoadMissingAndEmpty(t *testing.T) {
	root := t.TempDir()
	c, err := Load(context.Background(), "", LoadOptions{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if c.Exists || c.Path != DefaultConfigPath || len(c.Files) != 0 || c.Address() != DefaultAddress || c.DefaultRuntime() != "runc" || len(c.Runtimes()) != 0 {
		t.Errorf("missing config: %+v", c)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/containerd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, DefaultConfigPath), []byte("# nothing yet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = Load(context.Background(), "", LoadOptions{Root: root})
	if err != nil || !c.Exists || c.Version != 2 || c.Generation != Containerd1 {
		t.Errorf("empty config: %+v, %v", c, err)
	}
}

func TestLoadErrors(t *testing.T) {
	const cfg = "/etc/containerd/config.toml"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"syntax", map[string]string{cfg: "version = 2\n[plugins\n"}, cfg + ":2:9: toml:"},
		{"version 1", map[string]string{cfg: "[plugins.cri]\n  sandbox_image = \"pause\"\n"}, "no version key: a version 1 config"},
		{"version 5", map[string]string{cfg: "version = 5\n"}, cfg + ":1: version: unsupported config version 5"},
		{"version not an integer", map[string]string{cfg: "version = \"2\"\n"}, cfg + ":1: version is a string, want an integer"},
		{"missing import", map[string]string{cfg: "version = 2\nimports = [\n  \"/etc/containerd/a.toml\",\n  \"/etc/containerd/gone.toml\",\n]\n", "/etc/containerd/a.toml": "version = 2\n"},
			cfg + ":4: imports /etc/containerd/gone.toml, which does not exist: containerd does not start"},
		{"an import with an error", map[string]string{cfg: "version = 2\nimports = [\"conf.d/*.toml\"]\n", "/etc/containerd/conf.d/x.toml": "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = 7\n"},
			"/etc/containerd/conf.d/x.toml:4: plugins.\"io.containerd.grpc.v1.cri\".containerd.default_runtime_name is an integer, want a string"},
		{"imports not strings", map[string]string{cfg: "version = 2\nimports = [1]\n"}, cfg + ":2: imports[0] is an integer, want a string"},
		{"a runtime that is not a table", map[string]string{cfg: "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes]\n  gpurun = \"x\"\n"},
			cfg + ":3: plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gpurun is a string, want a table"},
		{"BinaryName not a string", map[string]string{cfg: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun.options]\n  BinaryName = [\"x\"]\n"},
			cfg + ":3: plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun.options.BinaryName is an array, want a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for p, data := range tc.files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(context.Background(), cfg, LoadOptions{Root: root})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	var ve *UnsupportedVersionError
	root := t.TempDir()
	_, err := Load(context.Background(), cfg, LoadOptions{Root: root, Overlay: map[string][]byte{cfg: []byte("root = \"/x\"\n")}})
	if !errors.As(err, &ve) || ve.Version != 1 {
		t.Errorf("version 1: %v", err)
	}
}

// TestOverlay reads a config as an edit would leave it: a main config on
// disk that imports a drop-in which exists only in the overlay.
func TestOverlay(t *testing.T) {
	root := hostWith(t, "v3-nested-imports")
	drop := "/etc/containerd/conf.d/99-gpurun.toml"
	o := LoadOptions{Root: root, Overlay: map[string][]byte{drop: []byte("version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\n  default_runtime_name = \"gpurun\"\n")}}
	c, err := Load(context.Background(), "", o)
	if err != nil {
		t.Fatal(err)
	}
	// Breadth first, as containerd: the drop-ins of the main config, then
	// what they import.
	if want := []string{"/etc/containerd/config.toml", "/etc/containerd/conf.d/10-default.toml", drop, "/etc/containerd/extra/nvidia.toml"}; c.DefaultRuntime() != "gpurun" || !slices.Equal(c.Files, want) {
		t.Errorf("default %s, files %v", c.DefaultRuntime(), c.Files)
	}
	if file, line := c.Defines("plugins", CRIRuntimePlugin, "containerd", "default_runtime_name"); file != drop || line != 3 {
		t.Errorf("Defines: %s:%d", file, line)
	}
}

func TestRelease(t *testing.T) {
	for _, tc := range []struct {
		out, release string
		gen          Generation
		workDirGlob  bool
	}{
		{"containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n", "1.6.20~ds1", Containerd1, true},
		{"containerd containerd.io 1.6.33 d2d58213f83a351ca8f528a95fbd145f5654e957\n", "1.6.33", Containerd1, false},
		{"containerd github.com/containerd/containerd v1.7.15 926c9586fe4a6236699318391cd44976a98e31f1\n", "1.7.15", Containerd1, true},
		{"containerd github.com/containerd/containerd v1.7.16 x\n", "1.7.16", Containerd1, false},
		{"containerd github.com/containerd/containerd/v2 2.4.2+unknown \n", "2.4.2+unknown", Containerd2, false},
	} {
		r, err := ParseRelease(tc.out)
		if err != nil || r != tc.release || generationOf(r) != tc.gen || globFromWorkDir(r) != tc.workDirGlob {
			t.Errorf("%q: %q %v, generation %v, glob from the working directory %v", tc.out, r, err, generationOf(r), globFromWorkDir(r))
		}
	}
	if _, err := ParseRelease("runc version 1.1.5\n"); err == nil {
		t.Error("runc's --version parsed")
	}
}

// TestDumpFixtures parses what containerd config dump printed (1.6.20 of
// its default config, 2.4.2 of its own default and of 1.6.20's).
func TestDumpFixtures(t *testing.T) {
	for _, tc := range []struct {
		file    string
		layout  int
		gen     Generation
		sandbox string
	}{
		{"containerd-1.6.20-config-dump-of-its-default.toml", 2, Containerd1, "registry.k8s.io/pause:3.6"},
		{"containerd-2.4.2-config-dump-of-its-default.toml", 4, Containerd2, "registry.k8s.io/pause:3.10.2"},
		{"containerd-2.4.2-config-dump-of-1.6.20-default.toml", 4, Containerd2, "registry.k8s.io/pause:3.6"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "read", "dump", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			c := &Config{}
			if err := c.useDump(data); err != nil {
				t.Fatal(err)
			}
			if c.Layout() != tc.layout || c.Generation != tc.gen || !c.Dumped || c.SandboxImage() != tc.sandbox || c.Address() != DefaultAddress || c.DefaultRuntime() != "runc" {
				t.Errorf("layout %d gen %v sandbox %q address %q default %q", c.Layout(), c.Generation, c.SandboxImage(), c.Address(), c.DefaultRuntime())
			}
			if r, ok := c.Runtime("runc"); !ok || r.Type != RuncV2 {
				t.Errorf("runc %+v", r)
			}
		})
	}
}

// containerd2 returns a containerd 2.x binary: $GPURUN_TEST_CONTAINERD2,
// which make test-unit builds and sets.
func containerd2(t *testing.T) string {
	t.Helper()
	p := os.Getenv("GPURUN_TEST_CONTAINERD2")
	if p == "" {
		t.Fatal("GPURUN_TEST_CONTAINERD2 is not set: run the tests with make (it builds containerd 2.x into /var/cache/gpurun-tools (.tools/ when not root)), or point it at a containerd 2.3+ binary")
	}
	return p
}

// TestMatchesConfigDump has containerd itself (Debian's 1.6.20, required
// as in CI, and 2.x) merge each scenario, and compares what the reader says
// from the files with what it says from containerd's dump.
func TestMatchesConfigDump(t *testing.T) {
	ctd16, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatalf("containerd binary not found (apt-get install containerd): %v", err)
	}
	scenarios, err := os.ReadDir(filepath.Join("testdata", "read", "imports"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range scenarios {
		for _, bin := range []string{ctd16, containerd2(t)} {
			label := "containerd-2.x"
			if bin == ctd16 {
				label = "containerd-1.x"
				if !strings.HasPrefix(s.Name(), "v2-") {
					continue // versions 3 and 4 are containerd 2.x's
				}
			}
			t.Run(s.Name()+"/"+label, func(t *testing.T) {
				dir, _ := filepath.Abs(filepath.Join("testdata", "read", "imports", s.Name()))
				path := filepath.Join(dir, "config.toml")
				dumped, err := Load(context.Background(), path, LoadOptions{Containerd: bin, Dump: true})
				if err != nil {
					t.Fatal(err)
				}
				if !dumped.Dumped || dumped.DumpErr != nil || dumped.Release == "" {
					t.Fatalf("not dumped (release %q): %v", dumped.Release, dumped.DumpErr)
				}
				read, err := Load(context.Background(), path, LoadOptions{Release: dumped.Release, Generation: generationOf(dumped.Release)})
				if err != nil {
					t.Fatal(err)
				}
				if read.Dumped || read.Generation != dumped.Generation {
					t.Fatalf("read: dumped %v, generation %v; dump's %v", read.Dumped, read.Generation, dumped.Generation)
				}
				want, got := answersOf(t, dumped, dir), answersOf(t, read, dir)
				want.Files = got.Files // a dump lists no files (2.x) or others' names (1.x)
				if got.Sandbox == "" {
					want.Sandbox = "" // containerd's built-in default
				}
				if len(want.Disabled) == 0 {
					want.Disabled = nil
				}
				// The dump has every runtime's settings, zero values
				// included; compare those the files set.
				for name, w := range want.Runtimes {
					g, ok := got.Runtimes[name]
					switch {
					case !ok && (len(got.Runtimes) == 0 || read.Generation == Containerd2) && name == "runc":
						delete(want.Runtimes, name) // the built-in runc
						continue
					case !ok:
						continue
					}
					if g.SystemdCgroup == nil {
						w.SystemdCgroup = nil
					}
					if len(w.PodAnnotations) == 0 {
						w.PodAnnotations = nil
					}
					if g.Type == "" {
						w.Type = ""
					}
					want.Runtimes[name] = w
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("from the files:\n  %+v\nfrom containerd config dump:\n  %+v", got, want)
				}
				if read.Generation == Containerd2 && !reflect.DeepEqual(read.NRI(), dumped.NRI()) {
					t.Errorf("NRI from the files %+v, from the dump %+v", read.NRI(), dumped.NRI())
				}
			})
		}
	}
}

// TestDumpFallsBack reads the files when the binary cannot dump.
func TestDumpFallsBack(t *testing.T) {
	dir, _ := filepath.Abs(filepath.Join("testdata", "read", "imports", "v3-nested-imports"))
	c, err := Load(context.Background(), filepath.Join(dir, "config.toml"), LoadOptions{Containerd: "/nonexistent/containerd", Dump: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Dumped || c.DumpErr == nil || !errors.Is(c.DumpErr, fs.ErrNotExist) || c.DefaultRuntime() != "nvidia" {
		t.Errorf("dumped %v, dump error %v, default %s", c.Dumped, c.DumpErr, c.DefaultRuntime())
	}
}

// TestReleaseAndVersion: a 1.x release means containerd 1.x's rules for a
// version 2 config, but not for a version 3 one (another containerd reads
// that).
func TestReleaseAndVersion(t *testing.T) {
	for _, tc := range []struct {
		scenario, release string
		want              Generation
	}{
		{"v2-cycle-and-arrays", "1.7.20", Containerd1},
		{"v2-cycle-and-arrays", "2.1.0", Containerd2},
		{"v3-nested-imports", "1.6.20~ds1", Containerd2},
	} {
		c, err := Load(context.Background(), "", LoadOptions{Root: hostWith(t, tc.scenario), Release: tc.release})
		if err != nil || c.Generation != tc.want {
			t.Errorf("%s with %s: %v, %v; want %v", tc.scenario, tc.release, c.Generation, err, tc.want)
		}
	}
}

// TestDefinesInOlderFiles finds a setting of the merged (version 4) view
// in the version 2 and 3 drop-ins that set it.
func TestDefinesInOlderFiles(t *testing.T) {
	c, err := Load(context.Background(), "", LoadOptions{Root: hostWith(t, "v4-with-older-drop-ins")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path []string
		file string
		line int
	}{
		{[]string{"plugins", CRIRuntimePlugin, "containerd", "default_runtime_name"}, "/etc/containerd/conf.d/20-v3.toml", 7},
		{[]string{"plugins", CRIRuntimePlugin, "containerd", "runtimes", "kata"}, "/etc/containerd/conf.d/10-v2.toml", 10},
		{[]string{"plugins", CRIImagesPlugin, "pinned_images", "sandbox"}, "/etc/containerd/conf.d/10-v2.toml", 5},
		{[]string{"plugins", GRPCServerPlugin, "address"}, "/etc/containerd/conf.d/20-v3.toml", 4},
		{[]string{"root"}, "/etc/containerd/config.toml", 2},
		{[]string{"nowhere"}, "", 0},
	} {
		if file, line := c.Defines(tc.path...); file != tc.file || line != tc.line {
			t.Errorf("%v: %s:%d, want %s:%d", tc.path, file, line, tc.file, tc.line)
		}
	}
}
