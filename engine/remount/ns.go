package remount

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/gpurun/gpurun/oci"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// GrowInNamespace makes the tmpfs mounted at path in the mount namespace of
// process pid at least size bytes, with a remount (MS_REMOUNT, size=) done
// inside that namespace. It is for a tmpfs that exists only there — a
// container's own /dev/shm, which no host path reaches:
//
//   - an OCI hook of a container being created (createRuntime, prestart:
//     pid is the container's init, not yet pivoted), path <rootfs>/dev/shm
//     with rootfs as the mount table shows it (absolute, no symbolic link);
//   - a running container (`gpurun resize` of a Docker container with its
//     own IPC namespace), path /dev/shm, as the container sees it.
//
// pid is a process id as the caller's /proc names it, or 0 for the caller's
// own mount namespace (an OCI createContainer hook, which runs inside the
// container's namespaces before pivot_root: there os.Getpid answers in the
// container's PID namespace, and the state's pid too).
//
// Rules, each a refusal (*RefusalError, matching ErrUnsafe and its rule)
// unless said otherwise:
//   - path is absolute and clean;
//   - the mount on top at path in that namespace's mount table
//     (/proc/<pid>/mountinfo) is a tmpfs;
//   - that tmpfs is not the host's /dev/shm (or /run/shm): its device is
//     compared with theirs as the caller sees them, so a container with host
//     IPC, whose /dev/shm binds the host's, is refused;
//   - inside the namespace, path is reached without following any symbolic
//     link, and what it reaches is that tmpfs (same device), so a container
//     that replaced a directory of the path with a link cannot redirect the
//     remount;
//   - it never shrinks: when the tmpfs is already size bytes or larger,
//     nothing changes (Result.Changed is false) and there is no error.
//
// The remount repeats the mount's per-mount flags (ro, nosuid, nodev, noexec,
// atime) from the mount table, so only the size changes; tmpfs's size is a
// property of the filesystem, so every mount of it (a bind elsewhere) sees
// the new size.
//
// The namespace is entered on a dedicated OS thread (runtime.LockOSThread,
// unshare(CLONE_FS), setns(CLONE_NEWNS)) that is never unlocked, so it ends
// with its goroutine instead of serving other goroutines from the wrong
// namespace, and that is never the main thread (see inNamespaceThread): a
// long-running caller may call it any number of times. The caller needs
// CAP_SYS_ADMIN and CAP_SYS_CHROOT over that namespace (root on the host).
func GrowInNamespace(pid int, path string, size int64) (Result, error) {
	return resizeInNamespace(pid, path, size, false)
}

// SetInNamespace is GrowInNamespace that may also shrink the tmpfs, but
// never below the bytes it holds (an error wrapping ErrInUse). It is for
// `gpurun resize`, where the user names the size.
func SetInNamespace(pid int, path string, size int64) (Result, error) {
	return resizeInNamespace(pid, path, size, true)
}

// resizeInNamespace carries out GrowInNamespace and SetInNamespace.
func resizeInNamespace(pid int, path string, size int64, shrink bool) (Result, error) {
	if pid < 0 {
		return Result{}, fmt.Errorf("grow %s: invalid pid %d", path, pid)
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return Result{}, refuse(ErrUnclean, path, "%q is not a clean absolute path", path)
	}
	// The caller's own namespace is read through /proc/thread-self: /proc/self
	// names the main thread, which may be parked in another namespace (see
	// inNamespaceThread).
	proc, who := "/proc/thread-self", "this process"
	if pid > 0 {
		proc, who = "/proc/"+strconv.Itoa(pid), "pid "+strconv.Itoa(pid)
	}
	f, err := os.Open(proc + "/mountinfo")
	if err != nil {
		return Result{}, fmt.Errorf("read the mount table of %s: %w", who, err)
	}
	m, err := topTmpfsAt(f, path)
	f.Close()
	if err != nil {
		return Result{}, fmt.Errorf("mount namespace of %s: %w", who, err)
	}
	if err := notHostShm(m, hostShmDevs()); err != nil {
		return Result{}, err
	}
	ns, err := unix.Open(proc+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Result{}, fmt.Errorf("open the mount namespace of %s: %w", who, err)
	}
	defer unix.Close(ns)
	return inNamespaceThread(ns, func() (Result, error) {
		return growMounted(path, m, size, shrink)
	})
}

// inNamespaceThread runs fn on an OS thread that has joined the mount
// namespace ns (an open /proc/.../ns/mnt), or stays in the caller's when ns
// is -1. The thread first unshares its filesystem attributes
// (setns(CLONE_NEWNS) refuses a thread that shares them, as every Go thread
// does; and fn may change the thread's working directory, which no other
// thread must see) and is never unlocked, so it ends with its goroutine
// instead of running other goroutines in the wrong namespace.
//
// Never on the main thread: Go cannot end it, so a main thread left locked
// by an ending goroutine is parked for good, still in the namespace it
// joined, and /proc/<pid> (which shows the main thread) would then describe
// that namespace to the rest of the process. A goroutine that finds itself
// on the main thread hands over to one that, the main thread being held,
// gets another thread, and leaves the main thread as it was.
func inNamespaceThread(ns int, fn func() (Result, error)) (Result, error) {
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	run := func() {
		res, err := func() (Result, error) {
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return Result{}, fmt.Errorf("unshare(CLONE_FS): %w", err)
			}
			if ns >= 0 {
				if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
					return Result{}, fmt.Errorf("enter the mount namespace: %w", err)
				}
			}
			return fn()
		}()
		done <- outcome{res, err}
	}
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			run() // and the thread ends with this goroutine
			return
		}
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			run()
		}()
		<-locked
		runtime.UnlockOSThread() // untouched: back to the scheduler
	}()
	o := <-done
	return o.res, o.err
}

// topTmpfsAt reads a mount table (mountinfo) and returns the mount on top
// of the stack at path — the one no other mount at path sits on — checking
// that it is a tmpfs. Mount points in the table are as the table's process
// sees them from its root.
func topTmpfsAt(r io.Reader, path string) (*mountinfo.Info, error) {
	mounts, err := mountinfo.GetMountsFromReader(r, func(m *mountinfo.Info) (skip, stop bool) {
		return m.Mountpoint != path, false
	})
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	under := map[int]bool{} // ids that another mount at path sits on
	for _, m := range mounts {
		under[m.Parent] = true
	}
	var top *mountinfo.Info
	for _, m := range mounts {
		if !under[m.ID] {
			top = m
		}
	}
	if top == nil {
		return nil, refuse(ErrNotTmpfs, path, "%s is not a mount point", path)
	}
	if top.FSType != "tmpfs" {
		return nil, refuse(ErrNotTmpfs, path, "%s is a %s mount, not a tmpfs", path, top.FSType)
	}
	return top, nil
}

// growMounted grows the tmpfs m, mounted at path in the current thread's
// mount namespace, to size bytes; with shrink it may also make it smaller,
// but never below the bytes it holds. The path is opened component by component
// without following links, checked to be m, and remounted through the
// thread's working directory (the thread has its own, after CLONE_FS).
func growMounted(path string, m *mountinfo.Info, size int64, shrink bool) (Result, error) {
	var res Result
	fd, err := openNoSymlinks(path)
	if err != nil {
		return res, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return res, fmt.Errorf("stat %s: %w", path, err)
	}
	if major, minor := unix.Major(st.Dev), unix.Minor(st.Dev); int(major) != m.Major || int(minor) != m.Minor {
		return res, refuse(ErrSwapped, path, "%s is device %d:%d, not the tmpfs %d:%d the mount table shows", path, major, minor, m.Major, m.Minor)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return res, fmt.Errorf("statfs %s: %w", path, err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return res, refuse(ErrNotTmpfs, path, "%s is not a tmpfs (type %#x)", path, fs.Type)
	}
	res.Before = int64(fs.Blocks) * int64(fs.Bsize)
	res.After = res.Before
	if size == res.Before || (size < res.Before && !shrink) {
		return res, nil
	}
	if used := int64(fs.Blocks-fs.Bfree) * int64(fs.Bsize); size < used {
		return res, fmt.Errorf("%w: %s holds %d bytes, more than %d", ErrInUse, path, used, size)
	}
	if err := unix.Fchdir(fd); err != nil {
		return res, fmt.Errorf("chdir %s: %w", path, err)
	}
	flags := uintptr(unix.MS_REMOUNT) | mountFlags(m.Options)
	if err := unix.Mount("", ".", "", flags, "size="+strconv.FormatInt(size, 10)); err != nil {
		return res, fmt.Errorf("remount %s with size=%d: %w", path, size, err)
	}
	if err := unix.Statfs(".", &fs); err != nil {
		return res, fmt.Errorf("statfs %s: %w", path, err)
	}
	res.After = int64(fs.Blocks) * int64(fs.Bsize)
	res.Changed = res.After != res.Before
	return res, nil
}

// openNoSymlinks opens the directory at the absolute path with O_PATH,
// walking it one component at a time with O_NOFOLLOW, so that no symbolic
// link anywhere in the path is followed. A link is a refusal (ErrUnsafe).
func openNoSymlinks(path string) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /: %w", err)
	}
	walked := ""
	for _, c := range strings.Split(path, "/") {
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			unix.Close(fd)
			return -1, refuse(ErrUnclean, path, "%q has a .. component", path)
		}
		walked += "/" + c
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			var st unix.Stat_t
			isLink := unix.Fstatat(fd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
			unix.Close(fd)
			if isLink || errors.Is(err, unix.ELOOP) {
				return -1, refuse(ErrSymlink, path, "%s goes through a symbolic link (%s)", path, walked)
			}
			return -1, fmt.Errorf("open %s: %w", walked, err)
		}
		unix.Close(fd)
		fd = next
	}
	return fd, nil
}

// hostShmDevs returns the devices of the host's shared memory directories
// as this process sees them.
func hostShmDevs() []uint64 {
	var devs []uint64
	for _, p := range oci.HostShmPaths() {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err == nil {
			devs = append(devs, st.Dev)
		}
	}
	return devs
}

// notHostShm refuses a mount whose device is one of the host's /dev/shm.
func notHostShm(m *mountinfo.Info, hostDevs []uint64) error {
	for _, d := range hostDevs {
		if int(unix.Major(d)) == m.Major && int(unix.Minor(d)) == m.Minor {
			return refuse(ErrHostShm, m.Mountpoint, "%s is the host's /dev/shm (device %d:%d)", m.Mountpoint, m.Major, m.Minor)
		}
	}
	return nil
}
