package remount

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// SetInNamespace makes the tmpfs mounted at path in the mount namespace of
// process pid size bytes: a remount there that keeps the mount's flags. Like
// Set it may shrink the tmpfs, but never below the bytes it holds. path is
// resolved in that namespace (/dev/shm for a running container).
func SetInNamespace(pid int, path string, size int64) (Result, error) {
	// The mount table is read from the host's /proc: inside, /proc is the
	// container's, where this thread does not exist.
	m, err := namespaceTmpfsMount(pid, path)
	if err != nil {
		return Result{}, err
	}
	return inMountNamespace(pid, func() (Result, error) {
		return setMounted(path, m, size)
	})
}

// inMountNamespace runs fn on an OS thread that has joined the mount
// namespace of process pid. The thread first unshares its filesystem
// attributes (setns(CLONE_NEWNS) refuses a thread that shares them with
// others, as every Go thread does) and is never unlocked, so it ends with
// the goroutine instead of going back to the scheduler in another namespace.
func inMountNamespace(pid int, fn func() (Result, error)) (Result, error) {
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		runtime.LockOSThread()
		res, err := func() (Result, error) {
			nsPath := "/proc/" + strconv.Itoa(pid) + "/ns/mnt"
			fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return Result{}, fmt.Errorf("open %s: %w", nsPath, err)
			}
			defer unix.Close(fd)
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return Result{}, fmt.Errorf("unshare(CLONE_FS): %w", err)
			}
			if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
				return Result{}, fmt.Errorf("enter the mount namespace of pid %d: %w", pid, err)
			}
			return fn()
		}()
		done <- outcome{res, err}
	}()
	o := <-done
	return o.res, o.err
}

// namespaceTmpfsMount is TmpfsMount for the mount namespace of process pid,
// where path is seen from that process's root.
func namespaceTmpfsMount(pid int, path string) (*mountinfo.Info, error) {
	table := "/proc/" + strconv.Itoa(pid) + "/mountinfo"
	f, err := os.Open(table)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, mountinfo.SingleEntryFilter(path))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	return lastTmpfs(mounts, path)
}

// lastTmpfs checks that the last mount stacked at path is a tmpfs.
func lastTmpfs(mounts []*mountinfo.Info, path string) (*mountinfo.Info, error) {
	if len(mounts) == 0 {
		return nil, fmt.Errorf("%w: %s is not a mount point", ErrUnsafe, path)
	}
	m := mounts[len(mounts)-1]
	if m.FSType != "tmpfs" {
		return nil, fmt.Errorf("%w: %s is a %s mount, not a tmpfs", ErrUnsafe, path, m.FSType)
	}
	return m, nil
}
