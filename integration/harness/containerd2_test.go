package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestContainerd2Config(t *testing.T) {
	const dir = "/tmp/gpurun-hc2-1"
	text := Containerd2Config(dir)
	get := tomlGetter(t, text)
	rt := []string{"plugins", "io.containerd.cri.v1.runtime"}
	img := []string{"plugins", "io.containerd.cri.v1.images"}
	nri := []string{"plugins", "io.containerd.nri.v1.nri"}
	at := func(base []string, rest ...string) []string { return append(append([]string{}, base...), rest...) }
	checks := []struct {
		path []string
		want any
	}{
		{[]string{"version"}, int64(3)},
		{[]string{"root"}, dir + "/root"},
		{[]string{"state"}, dir + "/state"},
		{[]string{"grpc", "address"}, dir + "/containerd.sock"},
		{[]string{"ttrpc", "address"}, dir + "/containerd.sock.ttrpc"},
		{at(rt, "restrict_oom_score_adj"), true},
		{at(rt, "cni", "bin_dirs"), []any{"/usr/lib/cni"}},
		{at(rt, "cni", "conf_dir"), dir + "/cni"},
		{at(rt, "containerd", "default_runtime_name"), "runc"},
		{at(rt, "containerd", "runtimes", "runc", "runtime_type"), "io.containerd.runc.v2"},
		{at(rt, "containerd", "runtimes", "runc", "options", "Root"), dir + "/runc"},
		{at(img, "pinned_images", "sandbox"), PauseRef},
		{at(img, "snapshotter"), "overlayfs"},
		{at(nri, "disable"), false},
		{at(nri, "socket_path"), dir + "/nri/nri.sock"},
		{at(nri, "plugin_path"), dir + "/nri/plugins"},
		{at(nri, "plugin_config_path"), dir + "/nri/conf.d"},
	}
	for _, c := range checks {
		if got := get(c.path...); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s = %#v, want %#v", strings.Join(c.path, "."), got, c.want)
		}
	}
	// Every path the instance uses lies under its directory.
	for _, line := range strings.Split(text, "\n") {
		if i := strings.Index(line, `"/`); i >= 0 && !strings.Contains(line, dir) && !strings.Contains(line, "/usr/lib/cni") {
			t.Errorf("path outside %s: %s", dir, line)
		}
	}
}

func TestArchiveTags(t *testing.T) {
	data, err := buildImageTar("gpurun-test/x:1", []string{"/bin/true"}, []byte("\x7fELF not really"), baseApplets())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "x.tar")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := archiveTags(path), []string{"gpurun-test/x:1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("archiveTags = %v, want %v", got, want)
	}
	if got := archiveTags(filepath.Join(t.TempDir(), "absent.tar")); got != nil {
		t.Errorf("archiveTags of a missing file = %v, want nil", got)
	}
}
