package remount

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/moby/sys/mountinfo"
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
	other := filepath.Join(root, "sandboxes", "other", "shm")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	roots := func(r ...string) Scope { return Scope{Roots: r} }
	tests := []struct {
		name   string
		path   string
		scope  Scope
		unsafe bool
	}{
		{"under a root", shm, roots(root), false},
		{"under a root given through a symlink", shm, roots(linkRoot), false},
		{"not under any root", shm, roots("/var/lib/docker"), true},
		{"the root itself", root, roots(root), true},
		{"a symlinked path", filepath.Join(link, "abc", "shm"), roots(root), true},
		{"relative", "sandboxes/abc/shm", roots(root), true},
		{"not clean", shm + "/../shm", roots(root), true},
		{"the host's /dev/shm", "/dev/shm", roots("/"), true},
		{"root / is no root", shm, roots("/"), true},
		{"the named tmpfs", shm, Scope{Named: shm}, false},
		{"named: no root needed", shm, Scope{Named: shm, Roots: []string{"/var/lib/docker"}}, false},
		{"named: another path under the same root", other, Scope{Named: shm, Roots: []string{root}}, true},
		{"named through a symlink", filepath.Join(link, "abc", "shm"), Scope{Named: filepath.Join(link, "abc", "shm")}, true},
		{"named: the host's /dev/shm", "/dev/shm", Scope{Named: "/dev/shm"}, true},
		{"named: not clean", shm + "/../shm", Scope{Named: shm + "/../shm"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPath(tt.path, tt.scope)
			if tt.unsafe != errors.Is(err, ErrUnsafe) {
				t.Errorf("CheckPath(%q, %s) = %v, unsafe want %v", tt.path, tt.scope, err, tt.unsafe)
			}
		})
	}
	if err := CheckPath(filepath.Join(root, "missing"), roots(root)); err == nil {
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

// TestSameAsUnproven: a proof path that cannot be read (the pod's pid not
// in this PID namespace) is a refusal that says it is unproven.
func TestSameAsUnproven(t *testing.T) {
	dir := t.TempDir()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		proof    string
		unproven bool
		unsafe   bool
	}{
		{"no proof asked", "", false, false},
		{"the proof's pid is not visible", filepath.Join(dir, "proc", "4242", "root", "dev", "shm"), true, true},
		{"the same filesystem", dir, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &mountinfo.Info{Major: int(unix.Major(st.Dev)), Minor: int(unix.Minor(st.Dev))}
			err := sameAs(dir, m, tt.proof)
			if errors.Is(err, ErrUnproven) != tt.unproven || errors.Is(err, ErrUnsafe) != tt.unsafe || errors.Is(err, os.ErrNotExist) != tt.unproven {
				t.Errorf("sameAs = %v; want unproven %v, unsafe %v", err, tt.unproven, tt.unsafe)
			}
		})
	}
}
