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

// A mount table as /proc/<pid>/mountinfo shows it for a runc container's
// init before pivot_root: the rootfs bind, its private /dev/shm tmpfs, and a
// few stacks of two mounts at one path, in either order in the table.
const sampleMountinfo = `22 1 0:21 / / rw,relatime - overlay overlay rw
30 22 0:26 / /dev/shm rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=12345k
40 22 8:1 /bundles/c/rootfs /run/c/rootfs ro,relatime - ext4 /dev/sda1 rw
41 40 0:55 / /run/c/rootfs/dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k
42 40 8:1 /data /run/c/rootfs/data rw - ext4 /dev/sda1 rw
43 40 0:56 / /run/c/rootfs/stacked rw - tmpfs tmpfs rw,size=1024k
44 43 8:1 /data /run/c/rootfs/stacked rw - ext4 /dev/sda1 rw
45 40 0:57 / /run/c/rootfs/restacked rw - ext4 /dev/sdb1 rw
46 45 0:58 / /run/c/rootfs/restacked rw,nosuid - tmpfs t rw,size=2048k
48 47 0:60 / /run/c/rootfs/moved rw,noexec - tmpfs t rw,size=4096k
47 40 8:1 /data /run/c/rootfs/moved rw - ext4 /dev/sda1 rw
`

func TestNamespaceMountSelection(t *testing.T) {
	tests := []struct {
		path         string
		major, minor int
		options      string
		err          string // "" for a tmpfs found
	}{
		{"/run/c/rootfs/dev/shm", 0, 55, "rw,nosuid,nodev,noexec,relatime", ""},
		{"/run/c/rootfs/restacked", 0, 58, "rw,nosuid", ""},
		{"/run/c/rootfs/moved", 0, 60, "rw,noexec", ""},
		{"/run/c/rootfs/stacked", 0, 0, "", "is a ext4 mount, not a tmpfs"},
		{"/run/c/rootfs/data", 0, 0, "", "is a ext4 mount, not a tmpfs"},
		{"/run/c/rootfs/missing", 0, 0, "", "is not a mount point"},
		{"/run/c/rootfs/dev", 0, 0, "", "is not a mount point"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			m, err := topTmpfsAt(strings.NewReader(sampleMountinfo), tt.path)
			if tt.err != "" {
				if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("topTmpfsAt = %v, want a refusal saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Major != tt.major || m.Minor != tt.minor || m.Options != tt.options {
				t.Errorf("got %d:%d %q, want %d:%d %q", m.Major, m.Minor, m.Options, tt.major, tt.minor, tt.options)
			}
		})
	}
}

func TestNotHostShm(t *testing.T) {
	m := &mountinfo.Info{Major: 0, Minor: 26, Mountpoint: "/dev/shm"}
	tests := []struct {
		name string
		devs []uint64
		host bool
	}{
		{"same device as the host's /dev/shm", []uint64{unix.Mkdev(0, 26)}, true},
		{"one of several", []uint64{unix.Mkdev(0, 3), unix.Mkdev(0, 26)}, true},
		{"another tmpfs", []uint64{unix.Mkdev(0, 27)}, false},
		{"host /dev/shm unknown", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := notHostShm(m, tt.devs)
			if got := errors.Is(err, ErrUnsafe); got != tt.host {
				t.Errorf("notHostShm = %v, refusal want %v", err, tt.host)
			}
		})
	}
}

func TestOpenNoSymlinks(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "rootfs", "dev", "shm")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "rootfs"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev", filepath.Join(root, "rootfs", "devlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		path   string
		unsafe bool
		fail   bool
	}{
		{"plain directories", real, false, false},
		{"a linked parent", filepath.Join(root, "link", "dev", "shm"), true, true},
		{"a linked directory inside", filepath.Join(root, "rootfs", "devlink", "shm"), true, true},
		{"a linked last component", filepath.Join(root, "link"), true, true},
		{"missing", filepath.Join(root, "rootfs", "nope"), false, true},
		{"not a directory", filepath.Join(root, "file"), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := openNoSymlinks(tt.path)
			if tt.fail {
				if err == nil {
					unix.Close(fd)
					t.Fatalf("openNoSymlinks(%s) succeeded", tt.path)
				}
				if errors.Is(err, ErrUnsafe) != tt.unsafe {
					t.Fatalf("openNoSymlinks(%s) = %v, refusal want %v", tt.path, err, tt.unsafe)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			var got, want unix.Stat_t
			if err := unix.Fstat(fd, &got); err != nil {
				t.Fatal(err)
			}
			if err := unix.Stat(tt.path, &want); err != nil {
				t.Fatal(err)
			}
			if got.Dev != want.Dev || got.Ino != want.Ino {
				t.Errorf("opened %d/%d, want %d/%d", got.Dev, got.Ino, want.Dev, want.Ino)
			}
		})
	}
}

func TestGrowInNamespaceRefusesBadArguments(t *testing.T) {
	tests := []struct {
		name   string
		pid    int
		path   string
		unsafe bool
	}{
		{"negative pid", -1, "/dev/shm", false},
		{"own namespace: the host's /dev/shm", 0, "/dev/shm", true},
		{"relative path", os.Getpid(), "dev/shm", true},
		{"unclean path", os.Getpid(), "/dev/../dev/shm", true},
		{"not a mount point here", os.Getpid(), t.TempDir(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := GrowInNamespace(tt.pid, tt.path, 1<<30)
			if err == nil || res.Changed {
				t.Fatalf("GrowInNamespace(%d, %s) = %+v, %v; want an error", tt.pid, tt.path, res, err)
			}
			if errors.Is(err, ErrUnsafe) != tt.unsafe {
				t.Errorf("GrowInNamespace(%d, %s) = %v, refusal want %v", tt.pid, tt.path, err, tt.unsafe)
			}
		})
	}
}
