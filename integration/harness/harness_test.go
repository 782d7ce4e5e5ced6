package harness

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// readTar returns the regular files and symlink targets of a tar archive.
func readTar(t *testing.T, data []byte) (files map[string][]byte, links map[string]string) {
	t.Helper()
	files, links = map[string][]byte{}, map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, links
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("read %s: %v", h.Name, err)
			}
			files[h.Name] = b
		case tar.TypeSymlink:
			links[h.Name] = h.Linkname
		}
	}
}

func TestBuildImageTar(t *testing.T) {
	fakeBusybox := []byte("\x7fELF not really")
	data, err := buildImageTar("gpurun-test/x:latest", []string{"/bin/sleep", "1"}, fakeBusybox, append(baseApplets(), "sh", "busybox", "a/b", ""))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, data)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest = %+v, want one image with one layer", manifest)
	}
	m := manifest[0]
	if !reflect.DeepEqual(m.RepoTags, []string{"gpurun-test/x:latest"}) {
		t.Errorf("RepoTags = %v", m.RepoTags)
	}
	cfgData, ok := files[m.Config]
	if !ok {
		t.Fatalf("config %s missing", m.Config)
	}
	if sum := sha256.Sum256(cfgData); hex.EncodeToString(sum[:])+".json" != m.Config {
		t.Errorf("config name %s is not its digest", m.Config)
	}
	var cfg struct {
		OS     string
		Config struct{ Cmd, Env []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	if err := json.Unmarshal(cfgData, &cfg); err != nil {
		t.Fatal(err)
	}
	layer, ok := files[m.Layers[0]]
	if !ok {
		t.Fatalf("layer %s missing", m.Layers[0])
	}
	sum := sha256.Sum256(layer)
	if want := []string{"sha256:" + hex.EncodeToString(sum[:])}; !reflect.DeepEqual(cfg.RootFS.DiffIDs, want) {
		t.Errorf("diff_ids = %v, want %v", cfg.RootFS.DiffIDs, want)
	}
	if cfg.OS != "linux" || !reflect.DeepEqual(cfg.Config.Cmd, []string{"/bin/sleep", "1"}) || len(cfg.Config.Env) != 1 {
		t.Errorf("config = %+v", cfg)
	}

	lfiles, llinks := readTar(t, layer)
	if !bytes.Equal(lfiles["bin/busybox"], fakeBusybox) {
		t.Errorf("bin/busybox not in the layer")
	}
	for _, a := range []string{"sh", "df", "stat", "sleep", "cat", "mount", "awk", "true", "env", "id"} {
		if llinks["bin/"+a] != "busybox" {
			t.Errorf("bin/%s -> %q, want busybox", a, llinks["bin/"+a])
		}
	}
	for name := range llinks {
		if name == "bin/busybox" || name == "bin/" || strings.Count(name, "/") != 1 {
			t.Errorf("unexpected symlink %s", name)
		}
	}
	if _, ok := lfiles["etc/passwd"]; !ok {
		t.Errorf("etc/passwd missing")
	}

	again, err := buildImageTar("gpurun-test/x:latest", []string{"/bin/sleep", "1"}, fakeBusybox, append(baseApplets(), "sh", "busybox", "a/b", ""))
	if err != nil || !bytes.Equal(again, data) {
		t.Errorf("buildImageTar is not deterministic (err %v)", err)
	}
}

func TestWithTag(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                        "busybox:latest",
		"gpurun-test/busybox":            "gpurun-test/busybox:latest",
		"gpurun-test/busybox:1":          "gpurun-test/busybox:1",
		"localhost:5000/x":               "localhost:5000/x:latest",
		"docker.io/a/b@sha256:0123":      "docker.io/a/b@sha256:0123",
		"docker.io/gpurun-test/pause:v1": "docker.io/gpurun-test/pause:v1",
	} {
		if got := withTag(in); got != want {
			t.Errorf("withTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestContainerdConfig(t *testing.T) {
	opts := ContainerdOptions{
		Runtimes:       map[string]string{"gpurun": "/usr/local/bin/gpurun-runtime", "odd.name": "/x"},
		DefaultRuntime: "gpurun",
		PodAnnotations: []string{"gpurun.io/*", `quote"d`},
		ExtraConfig:    "[plugins.\"io.containerd.gc.v1.scheduler\"]\n  pause_threshold = 0.02",
	}
	text := ContainerdConfig("/tmp/gpurun-hc-1", opts)
	get := tomlGetter(t, text)
	cri := []string{"plugins", "io.containerd.grpc.v1.cri"}
	rt := append(append([]string{}, cri...), "containerd", "runtimes")
	checks := []struct {
		path []string
		want any
	}{
		{[]string{"version"}, int64(2)},
		{[]string{"grpc", "address"}, "/tmp/gpurun-hc-1/containerd.sock"},
		{[]string{"state"}, "/tmp/gpurun-hc-1/state"},
		{append(append([]string{}, cri...), "restrict_oom_score_adj"), true},
		{append(append([]string{}, cri...), "sandbox_image"), PauseRef},
		{append(append([]string{}, cri...), "cni", "bin_dir"), "/usr/lib/cni"},
		{append(append([]string{}, cri...), "containerd", "default_runtime_name"), "gpurun"},
		{append(append([]string{}, rt...), "gpurun", "options", "BinaryName"), "/usr/local/bin/gpurun-runtime"},
		{append(append([]string{}, rt...), "gpurun", "options", "Root"), "/tmp/gpurun-hc-1/runc"},
		{append(append([]string{}, rt...), "odd.name", "options", "BinaryName"), "/x"},
		{append(append([]string{}, rt...), "runc", "runtime_type"), "io.containerd.runc.v2"},
		{append(append([]string{}, rt...), "runc", "pod_annotations"), []any{"gpurun.io/*", `quote"d`}},
		{[]string{"plugins", "io.containerd.gc.v1.scheduler", "pause_threshold"}, 0.02},
	}
	for _, c := range checks {
		if got := get(c.path...); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s = %#v, want %#v", strings.Join(c.path, "."), got, c.want)
		}
	}
	if _, ok := get(append(append([]string{}, rt...), "runc", "options")...).(map[string]any)["BinaryName"]; ok {
		t.Errorf("plain runc must not get a BinaryName")
	}
}

func TestImportedNames(t *testing.T) {
	out := "unpacking docker.io/gpurun-test/pause:latest (sha256:0123abcd)...done\nunpacking docker.io/library/x:1 (sha256:ff)...done\n"
	want := []string{"docker.io/gpurun-test/pause:latest", "docker.io/library/x:1"}
	if got := importedNames(out); !reflect.DeepEqual(got, want) {
		t.Errorf("importedNames = %v, want %v", got, want)
	}
}

func TestFlagValue(t *testing.T) {
	argv := []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", "/tmp/x.sock"}
	if got := flagValue(argv, "-id"); got != "abc" {
		t.Errorf("-id = %q", got)
	}
	if got := flagValue(argv, "-address"); got != "/tmp/x.sock" {
		t.Errorf("-address = %q", got)
	}
	if got := flagValue(argv, "-missing"); got != "" {
		t.Errorf("-missing = %q", got)
	}
}

// tomlGetter parses a generated config and returns a lookup of the value
// at a table path (nil where there is none); a config that does not parse
// fails the test.
func tomlGetter(t *testing.T, text string) func(path ...string) any {
	t.Helper()
	var cfg map[string]any
	if err := toml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("generated config does not parse: %v\n%s", err, text)
	}
	return func(path ...string) any {
		var cur any = cfg
		for _, p := range path {
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[p]
		}
		return cur
	}
}
