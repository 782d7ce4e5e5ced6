package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
)

// TestDockerfileImageTar builds gpurun's image from deploy/image/Dockerfile
// over a context laid out as make image-context does, and checks the
// archive: the three files at /usr/local/bin with their modes and bytes, and
// the Dockerfile's entrypoint, command, user and labels.
func TestDockerfileImageTar(t *testing.T) {
	ctx := t.TempDir()
	arch := filepath.Join(ctx, "linux-"+runtime.GOARCH)
	if err := os.MkdirAll(arch, 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"gpurun": []byte("cli"), "gpurun-full": []byte("full"), "gpurun-runtime": []byte("shim")}
	for name, data := range want {
		if err := os.WriteFile(filepath.Join(arch, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := DockerfileImageTar(t, t.TempDir(), "gpurun-test/gpurun:x", "../../deploy/image/Dockerfile", ctx, map[string]string{"VERSION": "v9"})
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := readTar(t, data)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	if !reflect.DeepEqual(manifest[0].RepoTags, []string{"gpurun-test/gpurun:x"}) {
		t.Errorf("RepoTags %v", manifest[0].RepoTags)
	}
	var cfg struct {
		Config struct {
			Entrypoint, Cmd []string
			User            string
			Labels          map[string]string
		}
	}
	if err := json.Unmarshal(files[manifest[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Config.Entrypoint, []string{"/usr/local/bin/gpurun"}) || !reflect.DeepEqual(cfg.Config.Cmd, []string{"--help"}) ||
		cfg.Config.User != "0:0" || cfg.Config.Labels["org.opencontainers.image.version"] != "v9" {
		t.Errorf("image config %+v", cfg.Config)
	}
	layer, _ := readTar(t, files[manifest[0].Layers[0]])
	if len(layer) != len(want) {
		t.Errorf("layer files %v, want the two binaries only", keys(layer))
	}
	for name, data := range want {
		if got := layer["usr/local/bin/"+name]; string(got) != string(data) {
			t.Errorf("usr/local/bin/%s = %q, want %q", name, got, data)
		}
	}
}

// TestInterpretDockerfileRefuses: instructions a FROM-scratch image of
// files does not need are refused, not ignored.
func TestInterpretDockerfileRefuses(t *testing.T) {
	for _, text := range []string{
		"FROM debian\n",
		"FROM scratch\nRUN true\n",
		"FROM scratch\nCMD echo hi\n",
		"FROM scratch\nCOPY --chown=1 a /b\n",
		"COPY a /b\n",
		"ARG X\n",
	} {
		if _, err := interpretDockerfile(text, t.TempDir(), nil); err == nil {
			t.Errorf("%q accepted", text)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
