package dockerapi

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestOnThisHost: a unix socket is this host's daemon only when the
// process that listens on it is one, as its peer credentials say.
func TestOnThisHost(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// A procfs in which this process, which listens, has the comm a test
	// case gives it.
	proc := func(t *testing.T, comm string) string {
		p := filepath.Join(t.TempDir(), "proc")
		d := filepath.Join(p, strconv.Itoa(os.Getpid()))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name  string
		host  string
		comm  string // "" keeps the real /proc
		local bool
		why   string // in the reason when not local
	}{
		{"dockerd listens", "unix://" + sock, "dockerd", true, ""},
		{"podman's API service listens", "unix://" + sock, "podman", true, ""},
		{"ssh -L forwards it", "unix://" + sock, "ssh", false, "served by ssh (pid "},
		{"systemd other than pid 1", "unix://" + sock, "systemd", false, "served by systemd"},
		{"the real /proc names this test", "unix://" + sock, "", false, "not by a daemon on this host"},
		{"no socket", "unix://" + filepath.Join(dir, "none.sock"), "dockerd", false, "none.sock"},
		{"tcp", "tcp://127.0.0.1:2375", "dockerd", false, "not a unix socket"},
		{"ssh", "ssh://user@gpu-box", "dockerd", false, "not a unix socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := "/proc"
			if tt.comm != "" {
				p = proc(t, tt.comm)
			}
			local, why := onThisHost(tt.host, p)
			if local != tt.local || !tt.local && !strings.Contains(why, tt.why) || tt.local && why != "" {
				t.Errorf("onThisHost(%s) = %v, %q; want %v, %q", tt.host, local, why, tt.local, tt.why)
			}
		})
	}
}

// TestIsDaemon: systemd stands in for the daemon only as pid 1, which
// listens under socket activation.
func TestIsDaemon(t *testing.T) {
	tests := []struct {
		comm string
		pid  int32
		want bool
	}{
		{"dockerd", 4242, true},
		{"podman", 4242, true},
		{"systemd", 1, true},
		{"systemd", 900, false}, // a user's systemd: its sockets are its own services'
		{"ssh", 4242, false},
		{"socat", 4242, false},
		{"com.docker.back", 4242, false},
	}
	for _, tt := range tests {
		if got := isDaemon(tt.comm, tt.pid); got != tt.want {
			t.Errorf("isDaemon(%q, %d) = %v, want %v", tt.comm, tt.pid, got, tt.want)
		}
	}
}

// TestDaemonBehind: the dockerd behind a socket is its peer, or under
// socket activation (systemd, pid 1) the only dockerd running.
func TestDaemonBehind(t *testing.T) {
	type proc struct {
		pid  int
		comm string
		args []string
	}
	dockerd := proc{812, "dockerd", []string{"/usr/bin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"}}
	second := proc{1312, "dockerd", []string{"/usr/bin/dockerd", "--config-file", "/etc/docker/gpu.json", "-H", "unix:///run/gpu.sock"}}
	systemd := proc{1, "systemd", []string{"/sbin/init"}}
	tests := []struct {
		name     string
		procs    []proc
		peer     int
		wantPID  int
		wantArgs []string
	}{
		{"dockerd listens itself", []proc{systemd, dockerd, second}, 1312, 1312, second.args},
		{"socket activation, one dockerd", []proc{systemd, dockerd}, 1, 812, dockerd.args},
		{"socket activation, two dockerd", []proc{systemd, dockerd, second}, 1, 0, nil},
		{"socket activation, no dockerd yet", []proc{systemd}, 1, 0, nil},
		{"a forwarder", []proc{systemd, {77, "socat", []string{"socat"}}}, 77, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, p := range tt.procs {
				d := filepath.Join(dir, strconv.Itoa(p.pid))
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				cmdline := strings.Join(p.args, "\x00") + "\x00"
				if err := os.WriteFile(filepath.Join(d, "comm"), []byte(p.comm+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmdline), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			pid, args, err := daemonBehind(tt.peer, dir)
			if err != nil || pid != tt.wantPID || !slices.Equal(args, tt.wantArgs) {
				t.Errorf("daemonBehind(%d) = %d, %q, %v; want %d, %q", tt.peer, pid, args, err, tt.wantPID, tt.wantArgs)
			}
		})
	}
}
