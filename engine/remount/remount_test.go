package remount

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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
		name  string
		path  string
		scope Scope
		rule  error // the rule it breaks; nil: allowed
	}{
		{"under a root", shm, roots(root), nil},
		{"under a root given through a symlink", shm, roots(linkRoot), nil},
		{"not under any root", shm, roots("/var/lib/docker"), ErrNotUnderRoot},
		{"the root itself", root, roots(root), ErrNotUnderRoot},
		{"a symlinked path", filepath.Join(link, "abc", "shm"), roots(root), ErrSymlink},
		{"relative", "sandboxes/abc/shm", roots(root), ErrUnclean},
		{"not clean", shm + "/../shm", roots(root), ErrUnclean},
		{"the host's /dev/shm", "/dev/shm", roots("/"), ErrHostShm},
		{"root / is no root", shm, roots("/"), ErrNotUnderRoot},
		{"the named tmpfs", shm, Scope{Named: shm}, nil},
		{"named: no root needed", shm, Scope{Named: shm, Roots: []string{"/var/lib/docker"}}, nil},
		{"named: another path under the same root", other, Scope{Named: shm, Roots: []string{root}}, ErrOutsideScope},
		{"named through a symlink", filepath.Join(link, "abc", "shm"), Scope{Named: filepath.Join(link, "abc", "shm")}, ErrSymlink},
		{"named: the host's /dev/shm", "/dev/shm", Scope{Named: "/dev/shm"}, ErrHostShm},
		{"named: not clean", shm + "/../shm", Scope{Named: shm + "/../shm"}, ErrUnclean},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPath(tt.path, tt.scope)
			checkRefusal(t, err, tt.path, tt.rule)
		})
	}
	if err := CheckPath(filepath.Join(root, "missing"), roots(root)); err == nil {
		t.Error("a missing path passed")
	}
}

// rules are the rules a refusal may break.
var rules = []error{ErrUnclean, ErrHostShm, ErrOutsideScope, ErrSymlink, ErrNotUnderRoot, ErrNotTmpfs, ErrSwapped, ErrNotPods, ErrUnproven}

// checkRefusal checks that err is a refusal of path by rule and by no
// other rule (errors.Is), or no error when rule is nil.
func checkRefusal(t *testing.T, err error, path string, rule error) {
	t.Helper()
	if rule == nil {
		if err != nil {
			t.Errorf("refused %s: %v", path, err)
		}
		return
	}
	var ref *RefusalError
	if !errors.Is(err, ErrUnsafe) || !errors.As(err, &ref) || ref.Path != path {
		t.Fatalf("%v: want a *RefusalError of %s", err, path)
	}
	for _, r := range rules {
		if errors.Is(err, r) != (r == rule) {
			t.Errorf("%v: errors.Is(%v) = %v", err, r, r != rule)
		}
	}
	if !strings.HasPrefix(err.Error(), "refused: ") {
		t.Errorf("message %q", err)
	}
}

// TestRefusalsInTheMountTable: what the mount table and the opened path
// show is refused by its own rule.
func TestRefusalsInTheMountTable(t *testing.T) {
	// /proc/self/mountinfo lines as Linux writes them: a tmpfs with a
	// bind over it, an ext4 directory, the host's /dev/shm.
	const table = `36 25 0:32 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw
901 30 0:77 / /run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm rw,nosuid,nodev,noexec,relatime shared:400 - tmpfs shm rw,size=65536k
902 901 259:2 /data /run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
903 30 259:2 /var/lib/x /var/lib/x rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
`
	tests := []struct {
		name string
		path string
		rule error
	}{
		{"no mount at the path", "/var/lib/y", ErrNotTmpfs},
		{"not a tmpfs", "/var/lib/x", ErrNotTmpfs},
		{"a bind over the tmpfs", "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm", ErrNotTmpfs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := topTmpfsAt(strings.NewReader(table), tt.path)
			checkRefusal(t, err, tt.path, tt.rule)
		})
	}
	t.Run("the host's /dev/shm by device", func(t *testing.T) {
		m, err := topTmpfsAt(strings.NewReader(table), "/dev/shm")
		if err != nil {
			t.Fatal(err)
		}
		checkRefusal(t, notHostShm(m, []uint64{unix.Mkdev(0, 32)}), "/dev/shm", ErrHostShm)
		checkRefusal(t, notHostShm(m, []uint64{unix.Mkdev(0, 33)}), "/dev/shm", nil)
	})
	t.Run("a link in the path as it is opened", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink(t.TempDir(), filepath.Join(dir, "shm")); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "shm")
		_, err := openNoSymlinks(p)
		checkRefusal(t, err, p, ErrSymlink)
		_, err = openNoSymlinks(dir + "/../x")
		checkRefusal(t, err, dir+"/../x", ErrUnclean)
	})
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
	other := &mountinfo.Info{Major: int(unix.Major(st.Dev)) + 1, Minor: int(unix.Minor(st.Dev))}
	checkRefusal(t, sameAs(dir, other, dir), dir, ErrNotPods)
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
			if tt.unproven {
				checkRefusal(t, err, dir, ErrUnproven)
			}
		})
	}
}
