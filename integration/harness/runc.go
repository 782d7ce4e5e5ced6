package harness

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BusyboxRootfs makes a read-only-usable root filesystem under dir: the
// static busybox at /bin/busybox and a symlink for each base applet.
func BusyboxRootfs(t testing.TB, dir string) string {
	t.Helper()
	rootfs := filepath.Join(dir, "rootfs")
	bin := filepath.Join(rootfs, "bin")
	for _, d := range []string{bin, filepath.Join(rootfs, "dev"), filepath.Join(rootfs, "proc"), filepath.Join(rootfs, "sys"), filepath.Join(rootfs, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("rootfs: %v", err)
		}
	}
	data, err := os.ReadFile(staticBusybox(t))
	if err != nil {
		t.Fatalf("rootfs: %v", err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755); err != nil {
		t.Fatalf("rootfs: %v", err)
	}
	for _, a := range baseApplets() {
		if err := os.Symlink("busybox", filepath.Join(bin, a)); err != nil && !os.IsExist(err) {
			t.Fatalf("rootfs: %v", err)
		}
	}
	return rootfs
}

// RuncBundle writes a bundle directory for runc: `runc spec`'s default
// config.json (a 64 MiB /dev/shm tmpfs, private namespaces) with no
// terminal, the given rootfs (absolute, so bundles can share one), args and
// extra env. edit, when set, may change the decoded spec before it is
// written.
func RuncBundle(t testing.TB, dir, rootfs string, args, env []string, edit func(spec map[string]any)) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("bundle: %v", err)
	}
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("bundle: %v", err)
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("bundle: %v", err)
	}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = args
	envList, _ := proc["env"].([]any)
	for _, e := range env {
		envList = append(envList, e)
	}
	proc["env"] = envList
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	if edit != nil {
		edit(spec)
	}
	out, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		t.Fatalf("bundle: %v", err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatalf("bundle: %v", err)
	}
	return dir
}
