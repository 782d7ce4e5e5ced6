package remount

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCheckPath(t *testing.T) {
	root := t.TempDir()
	shm := filepath.Join(root, "sandboxes", "abc", "shm")
	if err := os.MkdirAll(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(filepath.Join(root, "sandboxes"), link); err != nil {
		t.Fatal(err)
	}
	linkRoot := filepath.Join(t.TempDir(), "varrun")
	if err := os.Symlink(root, linkRoot); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		path   string
		roots  []string
		unsafe bool
	}{
		{"under a root", shm, []string{root}, false},
		{"under a root given through a symlink", shm, []string{linkRoot}, false},
		{"not under any root", shm, []string{"/var/lib/docker"}, true},
		{"the root itself", root, []string{root}, true},
		{"a symlinked path", filepath.Join(link, "abc", "shm"), []string{root}, true},
		{"relative", "sandboxes/abc/shm", []string{root}, true},
		{"not clean", shm + "/../shm", []string{root}, true},
		{"the host's /dev/shm", "/dev/shm", []string{"/"}, true},
		{"root / is no root", shm, []string{"/"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPath(tt.path, tt.roots)
			if tt.unsafe != errors.Is(err, ErrUnsafe) {
				t.Errorf("CheckPath(%q, %q) = %v, unsafe want %v", tt.path, tt.roots, err, tt.unsafe)
			}
		})
	}
	if err := CheckPath(filepath.Join(root, "missing"), []string{root}); err == nil {
		t.Error("a missing path passed")
	}
}

func TestMountFlags(t *testing.T) {
	got := mountFlags("rw,nosuid,nodev,noexec,relatime")
	want := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RELATIME)
	if got != want {
		t.Errorf("mountFlags = %#x, want %#x", got, want)
	}
	if got := mountFlags("ro,noatime"); got != uintptr(unix.MS_RDONLY|unix.MS_NOATIME) {
		t.Errorf("mountFlags(ro,noatime) = %#x", got)
	}
}

func TestTmpfsMountRefusesNonMounts(t *testing.T) {
	dir := t.TempDir()
	if _, err := TmpfsMount(dir); !errors.Is(err, ErrUnsafe) {
		t.Errorf("TmpfsMount(plain dir) = %v, want a refusal", err)
	}
}
