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
