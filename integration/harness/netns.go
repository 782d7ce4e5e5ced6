package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// The main goroutine keeps the main thread to itself. A goroutine that
// enters a namespace (NetNS.Do, startProcess) locks its thread and exits
// without unlocking it, so that the thread dies with it — except the main
// thread, which the Go runtime parks forever instead: had such a goroutine
// run there, /proc/<test pid>/ns/net would name an engine's namespace for
// the rest of the run.
func init() {
	runtime.LockOSThread()
}

// NetNS is a network namespace of the harness's own: private engines run in
// one so that nothing they do to networks (dockerd's bridge handling, CNI's
// bridges and veths, iptables) reaches the host's. It holds only a loopback
// interface, up. The namespace is kept alive by a bind mount of its nsfs
// file at Path, which the cleanup unmounts and removes; the namespace
// itself goes when its last process exits.
type NetNS struct {
	// Path is the bind-mounted namespace file (for nsenter --net=Path, or
	// setns).
	Path string

	// mnt, when set, is a mount namespace entered together with the
	// network namespace (a cluster's node).
	mnt *mountNS
}

// NewNetNS creates a network namespace held at dir/netns and registers its
// removal with t.Cleanup. Register it before the engines that run in it, so
// that their cleanups (which run first) have stopped them by then.
func NewNetNS(t testing.TB, dir string) *NetNS {
	t.Helper()
	requireRoot(t)
	ns, err := newNetNS(filepath.Join(dir, "netns"))
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() {
		if err := ns.remove(); err != nil {
			t.Errorf("harness: %v", err)
		}
	})
	return ns
}

func newNetNS(path string) (*NetNS, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return nil, fmt.Errorf("create network namespace file: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	onDisposableThread(func() {
		// The thread enters the new namespace and is never unlocked, so it
		// ends with this goroutine and no other goroutine runs in it.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare network namespace: %w", err)
			return
		}
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(self, path, "", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind %s to %s: %w", self, path, err)
			return
		}
		errc <- loopbackUp()
	})
	if err := <-errc; err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
		return nil, err
	}
	return &NetNS{Path: path}, nil
}

// loopbackUp sets lo up in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

func (ns *NetNS) remove() error {
	if err := unix.Unmount(ns.Path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount network namespace %s: %w", ns.Path, err)
	}
	if err := os.Remove(ns.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove network namespace file: %w", err)
	}
	return nil
}

// Do runs f on an OS thread that has entered the namespace. Whatever f does
// on its own goroutine (creating a socket, starting a process) happens in
// the namespace; goroutines f starts do not. The thread is discarded after.
func (ns *NetNS) Do(f func() error) error {
	if ns == nil {
		return f()
	}
	errc := make(chan error, 1)
	onDisposableThread(func() {
		if err := ns.enter(); err != nil {
			errc <- err
			return
		}
		errc <- f()
	})
	return <-errc
}

// onDisposableThread runs fn on a goroutine locked to an OS thread that is
// never unlocked, so the thread ends with it: whatever namespace fn moves
// the thread into goes with the thread. Never the main thread: Go cannot
// end that one and parks it instead, still in the namespace fn joined, and
// /proc/self (which shows the main thread) would then describe that
// namespace to the whole process (its mount table, say). A goroutine that
// finds itself on the main thread hands fn to one that, the main thread
// being held, gets another thread, and gives the main thread back as it
// was.
func onDisposableThread(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			fn()
			return
		}
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			fn()
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
}

// enter moves the calling (locked) thread into the namespace.
func (ns *NetNS) enter() error {
	fd, err := unix.Open(ns.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", ns.Path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace %s: %w", ns.Path, err)
	}
	if ns.mnt != nil {
		return ns.mnt.enter()
	}
	return nil
}

// Run runs a short command in the namespace (see runCmd).
func (ns *NetNS) Run(ctx context.Context, env []string, name string, args ...string) (stdout, stderr string, err error) {
	err = ns.Do(func() error {
		var runErr error
		stdout, stderr, runErr = runCmd(ctx, env, name, args...)
		return runErr
	})
	return stdout, stderr, err
}

// Command runs cmd (not yet started) in the namespace and waits for it.
func (ns *NetNS) Command(cmd *exec.Cmd) error {
	return ns.Do(cmd.Run)
}

// ReadFile reads a file as the namespace's processes see it (through its
// mount namespace, where it has one: a node's /var/log/gpurun.log is the
// node's, not the host's).
func (ns *NetNS) ReadFile(path string) ([]byte, error) {
	var data []byte
	err := ns.Do(func() error {
		var err error
		data, err = os.ReadFile(path)
		return err
	})
	return data, err
}

// DialContext dials from inside the namespace: the socket is made there,
// and stays there whichever thread uses it later. It fits
// http.Transport.DialContext, for clients of servers that listen on the
// namespace's loopback.
func (ns *NetNS) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := ns.Do(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}
