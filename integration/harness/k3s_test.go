package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/k3stest"
)

func TestK3sNodeRender(t *testing.T) {
	base := "version = 2\n# by {{ .Program }}\n{{ range $k, $v := .ExtraRuntimes }}[r.{{ $k }}]\n{{ end }}"
	tests := []struct {
		name      string
		templates map[string]string
		want      string
	}{
		{"no template: the base alone", nil, "version = 2\n# by k3s\n[r.nvidia]\n"},
		{"config.toml.tmpl extends base", map[string]string{"config.toml.tmpl": "# mine\n{{ template \"base\" . }}[extra]\n"}, "# mine\nversion = 2\n# by k3s\n[r.nvidia]\n[extra]\n"},
		{"config-v3.toml.tmpl first", map[string]string{"config.toml.tmpl": "v2\n", "config-v3.toml.tmpl": "v3 {{ .Program }}\n"}, "v3 k3s\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := K3sNode{HostRoot: t.TempDir(), DataDir: "/var/lib/rancher/k3s", Program: "k3s", Release: k3stest.Release{Version: 2, NVIDIA: map[string]string{"nvidia": "nvidia-container-runtime"}}, Base: base, NVIDIA: true}
			for name, text := range tc.templates {
				p := n.Host(filepath.Join(n.ContainerdDir(), name))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := n.Render()
			if err != nil {
				t.Fatal(err)
			}
			onDisk, _ := os.ReadFile(n.Host(n.ConfigPath()))
			if string(got) != tc.want || string(onDisk) != tc.want {
				t.Fatalf("rendered %q (on disk %q), want %q", got, onDisk, tc.want)
			}
			if !strings.HasPrefix(n.ConfigPath(), "/var/lib/rancher/k3s/agent/etc/containerd/") {
				t.Errorf("config path %s", n.ConfigPath())
			}
		})
	}
}
