package dockerapi

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// OnThisHost reports whether the Docker daemon at host (an endpoint such as
// "unix:///var/run/docker.sock") runs on this machine, and when it does
// not, why. Only a unix socket can be this machine's, and only when the
// process serving it is a daemon: a connection's peer credentials
// (SO_PEERCRED) name the process that listens on the socket, which is
// dockerd or Podman, or systemd where it listens in the daemon's place
// (socket activation: docker.socket with dockerd -H fd://). Any other
// process forwards the socket elsewhere (ssh -L, socat, Docker Desktop's
// proxy to its VM), and a peer this process cannot see (one in another PID
// namespace) is not taken as local either: gpurun then asks the daemon for
// its host's memory, which is slower but right.
func OnThisHost(host string) (bool, string) {
	return onThisHost(host, "/proc")
}

// onThisHost is OnThisHost with procfs at proc.
func onThisHost(host, proc string) (bool, string) {
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return false, "not a unix socket"
	}
	pid, err := socketServer(path)
	if err != nil {
		return false, err.Error()
	}
	if pid == 0 {
		return false, fmt.Sprintf("%s is served by a process in another PID namespace", path)
	}
	data, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(int(pid)), "comm"))
	if err != nil {
		return false, fmt.Sprintf("%s is served by pid %d: %v", path, pid, err)
	}
	comm := strings.TrimSpace(string(data))
	if isDaemon(comm, pid) {
		return true, ""
	}
	return false, fmt.Sprintf("%s is served by %s (pid %d), not by a daemon on this host", path, comm, pid)
}

// isDaemon reports whether the process comm (pid) serving a Docker API
// socket is the daemon itself, or systemd holding the socket for it.
func isDaemon(comm string, pid int32) bool {
	switch comm {
	case "dockerd", "podman":
		return true
	case "systemd":
		return pid == 1
	}
	return false
}

// socketServer returns the pid of the process serving the unix socket at
// path, as this process's PID namespace numbers it (0: not in it).
func socketServer(path string) (int32, error) {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("%s: peer credentials: %w", path, credErr)
	}
	return cred.Pid, nil
}

// DaemonProcess returns the pid and command line of the dockerd serving
// the unix socket endpoint host: the socket's peer (SO_PEERCRED) when it
// is dockerd, or, where systemd holds the socket for it (socket
// activation, pid 1), the one dockerd process running. It returns 0 and
// nil when it cannot tell: another kind of endpoint, a peer in another PID
// namespace, or several dockerd behind systemd.
func DaemonProcess(host string) (int, []string, error) {
	return daemonProcess(host, "/proc")
}

// daemonProcess is DaemonProcess with procfs at proc.
func daemonProcess(host, proc string) (int, []string, error) {
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return 0, nil, nil
	}
	pid, err := socketServer(path)
	if err != nil || pid == 0 {
		return 0, nil, err
	}
	return daemonBehind(int(pid), proc)
}

// daemonBehind returns the dockerd behind the socket that process pid
// serves (see DaemonProcess).
func daemonBehind(pid int, proc string) (int, []string, error) {
	comm, args, err := process(proc, pid)
	if err != nil {
		return 0, nil, err
	}
	switch {
	case comm == "dockerd":
		return pid, args, nil
	case comm != "systemd" || pid != 1:
		return 0, nil, nil
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return 0, nil, fmt.Errorf("list processes: %w", err)
	}
	found, foundArgs := 0, []string(nil)
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n <= 1 {
			continue
		}
		if c, a, err := process(proc, n); err == nil && c == "dockerd" {
			if found != 0 {
				return 0, nil, nil // more than one: which holds the socket is not known
			}
			found, foundArgs = n, a
		}
	}
	return found, foundArgs, nil
}

// process returns the comm and command line of process pid.
func process(proc string, pid int) (string, []string, error) {
	dir := filepath.Join(proc, strconv.Itoa(pid))
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		return "", nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return "", nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return strings.TrimSpace(string(comm)), strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00"), nil
}
