package harness

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// NvidiaMajor is the character device major number of /dev/nvidia[0-9]+.
const NvidiaMajor = 195

// MknodGPU creates dir/nvidia0, a character device node with major 195 and
// minor 0 (what /dev/nvidia0 is), and returns its path. Give it to a
// container as --device PATH:/dev/nvidia0 (Docker) or Device{Host: PATH,
// Container: "/dev/nvidia0"} (CRI) to make it look like a GPU container; no
// driver is needed because nothing opens it, and dir may be any directory
// (t.TempDir() will do).
func MknodGPU(t testing.TB, dir string) string {
	t.Helper()
	requireRoot(t)
	path := filepath.Join(dir, "nvidia0")
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(NvidiaMajor, 0))); err != nil {
		t.Fatalf("harness: mknod %s c %d 0: %v", path, NvidiaMajor, err)
	}
	return path
}
