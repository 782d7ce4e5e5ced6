package hooksd

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestConfiguredDirs: the hooks.d directories Podman and CRI-O read follow
// the last of their configuration files that sets hooks_dir, drop-ins in
// the order of their names; without one (or with an empty list) they are
// the engine's defaults. Debian bookworm's packaged containers.conf (all
// of it commented out) sets nothing.
func TestConfiguredDirs(t *testing.T) {
	debian, err := os.ReadFile("testdata/debian-bookworm-containers-common-0.50.1-usr-share-containers.conf")
	if err != nil {
		t.Fatal(err)
	}
	podman := func(dirs ...string) string {
		return "[engine]\nhooks_dir = [\"" + strings.Join(dirs, "\", \"") + "\"]\n"
	}
	crio := func(dirs ...string) string {
		return "[crio.runtime]\nhooks_dir = [\"" + strings.Join(dirs, "\", \"") + "\"]\n"
	}
	tests := []struct {
		name     string
		read     func(string) (Configured, error)
		files    map[string]string // node path: content
		want     []string
		wantFrom string
		err      string // in the error; "" for none
	}{
		{name: "Podman, no file", read: PodmanDirs, want: Dirs()},
		{name: "Podman, Debian's packaged file", read: PodmanDirs, files: map[string]string{"/usr/share/containers/containers.conf": string(debian)}, want: Dirs()},
		{name: "Podman, /etc sets it", read: PodmanDirs,
			files: map[string]string{"/usr/share/containers/containers.conf": string(debian), "/etc/containers/containers.conf": podman("/opt/hooks.d")},
			want:  []string{"/opt/hooks.d"}, wantFrom: "/etc/containers/containers.conf"},
		{name: "Podman, a drop-in after /etc", read: PodmanDirs,
			files: map[string]string{"/etc/containers/containers.conf": podman("/opt/hooks.d"), "/etc/containers/containers.conf.d/50-gpu.conf": podman("/a", "/b")},
			want:  []string{"/a", "/b"}, wantFrom: "/etc/containers/containers.conf.d/50-gpu.conf"},
		{name: "Podman, drop-ins by name", read: PodmanDirs,
			files: map[string]string{"/etc/containers/containers.conf.d/20-b.conf": podman("/b"), "/etc/containers/containers.conf.d/10-a.conf": podman("/a"), "/etc/containers/containers.conf.d/30-c.conf.bak": podman("/c")},
			want:  []string{"/b"}, wantFrom: "/etc/containers/containers.conf.d/20-b.conf"},
		{name: "Podman, /usr/share's drop-in before /etc", read: PodmanDirs,
			files: map[string]string{"/usr/share/containers/containers.conf.d/10-vendor.conf": podman("/vendor"), "/etc/containers/containers.conf": podman("/admin")},
			want:  []string{"/admin"}, wantFrom: "/etc/containers/containers.conf"},
		{name: "Podman, a later file without hooks_dir keeps it", read: PodmanDirs,
			files: map[string]string{"/etc/containers/containers.conf": podman("/admin"), "/etc/containers/containers.conf.d/10-x.conf": "[engine]\ncgroup_manager = \"cgroupfs\"\n"},
			want:  []string{"/admin"}, wantFrom: "/etc/containers/containers.conf"},
		{name: "Podman, an empty list is the defaults", read: PodmanDirs,
			files: map[string]string{"/etc/containers/containers.conf": "[engine]\nhooks_dir = []\n"}, want: Dirs()},
		{name: "Podman, CRI-O's table does not count", read: PodmanDirs,
			files: map[string]string{"/etc/containers/containers.conf": crio("/x")}, want: Dirs()},
		{name: "Podman, bad TOML", read: PodmanDirs,
			files: map[string]string{"/etc/containers/containers.conf": "[engine]\nhooks_dir = [\n"}, err: "etc/containers/containers.conf:2:"},
		{name: "Podman, a relative directory", read: PodmanDirs,
			files: map[string]string{"/etc/containers/containers.conf": podman("hooks.d")}, err: `hooks_dir "hooks.d": want an absolute path`},
		{name: "CRI-O, no file", read: CRIODirs, want: []string{HooksDirShare}},
		{name: "CRI-O, crio.conf", read: CRIODirs,
			files: map[string]string{"/etc/crio/crio.conf": crio("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")},
			want:  []string{"/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d"}, wantFrom: "/etc/crio/crio.conf"},
		{name: "CRI-O, a drop-in after crio.conf", read: CRIODirs,
			files: map[string]string{"/etc/crio/crio.conf": crio("/a"), "/etc/crio/crio.conf.d/10-gpu.conf": crio("/gpu")},
			want:  []string{"/gpu"}, wantFrom: "/etc/crio/crio.conf.d/10-gpu.conf"},
		{name: "CRI-O, Podman's table does not count", read: CRIODirs,
			files: map[string]string{"/etc/crio/crio.conf": podman("/x")}, want: []string{HooksDirShare}},
		{name: "CRI-O, bad TOML in a drop-in", read: CRIODirs,
			files: map[string]string{"/etc/crio/crio.conf.d/10-gpu.conf": "[crio.runtime\n"}, err: "etc/crio/crio.conf.d/10-gpu.conf:1:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for p, body := range tt.files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := tt.read(root)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Dirs, tt.want) || got.From != tt.wantFrom {
				t.Errorf("got %q from %q, want %q from %q", got.Dirs, got.From, tt.want, tt.wantFrom)
			}
		})
	}
}
