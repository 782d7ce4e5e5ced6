package harness

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// mountNS is a mount namespace of the harness's own, held by an OS thread
// parked in it until release. A cluster's daemons run in one (see
// [nodeMounts]) so that what they insist on writing outside their own
// directories lands in the test's files instead of the host's.
type mountNS struct {
	path    string // /proc/<pid>/task/<tid>/ns/mnt of the parked thread
	release chan struct{}
	done    chan struct{}
}

// nodeMounts describes the mount namespace of a test node.
type nodeMounts struct {
	// sysctls are /proc/sys files (relative, "vm/overcommit_memory") to
	// hide behind private copies of their current values: the kubelet
	// sets some of them at start (vm.overcommit_memory, kernel.panic, ...)
	// unless they already have its values.
	sysctls []string
	// overlays are directories made writable through an overlay whose
	// upper layer is private: the host's files stay visible, writes land
	// in the test's directory (libcni's cache in /var/lib/cni).
	overlays []string
	// binds are directories bound into the namespace after the overlays
	// (target -> source); a missing target is made, below an overlay in
	// its private upper layer.
	binds map[string]string
	// scratch holds the private copies and overlay layers.
	scratch string
}

// kubeletSysctls are the /proc/sys files the kubelet sets at start unless
// they already have its values: a test node's mount namespace hides them
// behind private copies (nodeMounts.sysctls).
func kubeletSysctls() []string {
	return []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}
}

// makeNodeDirs makes a test node's directory dir and its other
// directories, makes dir rshared (so that what the node mounts below it
// propagates between the node's mount namespace and the harness's) and
// makes its kubelet's cgroupRoot.
func makeNodeDirs(dir, cgroupRoot string, dirs ...string) error {
	for _, d := range append([]string{dir}, dirs...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := makeRShared(dir); err != nil {
		return err
	}
	return makeCgroupRoot(cgroupRoot)
}

// newMountNS makes a mount namespace from a copy of the caller's: the root
// mount becomes a shared mount of its own peer group (a node's / is
// shared, and containerd needs / shared or slave for a HostToContainer
// hostPath of /) that receives the host's later mounts but sends none
// back; mounts below directories the caller made rshared beforehand keep
// propagating both ways; then m's masks are set up.
func newMountNS(m nodeMounts) (*mountNS, error) {
	ns := &mountNS{release: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	onDisposableThread(func() {
		defer close(ns.done)
		// The thread ends with this function, which is what ends the
		// namespace once no process uses it.
		if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
			ready <- fmt.Errorf("unshare mount namespace: %w", err)
			return
		}
		if err := m.setup(); err != nil {
			ready <- err
			return
		}
		ns.path = fmt.Sprintf("/proc/%d/task/%d/ns/mnt", os.Getpid(), unix.Gettid())
		ready <- nil
		<-ns.release
	})
	if err := <-ready; err != nil {
		<-ns.done
		return nil, err
	}
	return ns, nil
}

// setup runs in the new namespace.
func (m nodeMounts) setup() error {
	for _, step := range []struct {
		target string
		flags  uintptr
	}{
		{"/", unix.MS_SLAVE}, {"/", unix.MS_SHARED}, {"/proc", unix.MS_SLAVE},
	} {
		if err := unix.Mount("", step.target, "", step.flags, ""); err != nil {
			return fmt.Errorf("mount propagation of %s: %w", step.target, err)
		}
	}
	for _, s := range m.sysctls {
		src := filepath.Join("/proc/sys", s)
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("read %s: %w", src, err)
		}
		copyPath := filepath.Join(m.scratch, "sysctl", strings.ReplaceAll(s, "/", "."))
		if err := os.MkdirAll(filepath.Dir(copyPath), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(copyPath, data, 0o644); err != nil {
			return err
		}
		if err := unix.Mount(copyPath, src, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("hide %s: %w", src, err)
		}
	}
	for i, dir := range m.overlays {
		// A file mounted below dir (a container's /etc/resolv.conf, say)
		// would be hidden by the overlay: the node gets a copy of it. (A
		// directory mounted below stays hidden.)
		files, err := mountedFiles(dir)
		if err != nil {
			return err
		}
		base := filepath.Join(m.scratch, fmt.Sprintf("overlay%d", i))
		upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
		for _, d := range []string{upper, work} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", dir, upper, work)
		if err := unix.Mount("overlay", dir, "overlay", 0, opts); err != nil {
			return fmt.Errorf("overlay on %s: %w", dir, err)
		}
		for p, data := range files {
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return fmt.Errorf("overlay on %s: %s, mounted below it: %w", dir, p, err)
			}
		}
	}
	for _, target := range slices.Sorted(maps.Keys(m.binds)) {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.binds[target], target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", m.binds[target], target, err)
		}
	}
	return nil
}

// mountedFiles returns the regular files mounted below dir, with their
// contents.
func mountedFiles(dir string) (map[string][]byte, error) {
	mps, err := mountPoints(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, mp := range mps {
		if st, err := os.Stat(mp); err != nil || !st.Mode().IsRegular() || mp == dir {
			continue
		}
		data, err := os.ReadFile(mp)
		if err != nil {
			return nil, err
		}
		files[mp] = data
	}
	return files, nil
}

// enter moves the calling (locked) thread into the namespace; the thread
// must not share its filesystem attributes with others, so it unshares
// them first.
func (ns *mountNS) enter() error {
	fd, err := unix.Open(ns.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open mount namespace %s: %w", ns.path, err)
	}
	defer unix.Close(fd)
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare filesystem attributes: %w", err)
	}
	if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter mount namespace %s: %w", ns.path, err)
	}
	return nil
}

// close lets the parked thread end; the namespace goes once the last
// process in it has exited.
func (ns *mountNS) close() {
	select {
	case <-ns.release:
	default:
		close(ns.release)
	}
	<-ns.done
}

// makeRShared bind-mounts dir on itself and makes it rshared, so that
// mounts below it propagate between every mount namespace that copies it.
func makeRShared(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		err = fmt.Errorf("make %s rshared: %w", dir, err)
		if uerr := unix.Unmount(dir, unix.MNT_DETACH); uerr != nil && !errors.Is(uerr, unix.EINVAL) {
			err = errors.Join(err, uerr)
		}
		return err
	}
	return nil
}
