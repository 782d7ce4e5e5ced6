//go:build integration

package integration

import (
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestRunDockerGlobals: docker's global options before run, create,
// container run and container create name the daemon — -H, a --context in
// a --config directory — for docker and for gpurun's own questions, and the
// container gets the policy's size; create + start keeps it.
func TestRunDockerGlobals(t *testing.T) {
	e := newRunEnv(t)
	cfgDir := t.TempDir()
	if _, _, err := e.d.Docker("--config", cfgDir, "context", "create", "gpurun-test", "--docker", "host="+e.d.Host); err != nil {
		t.Fatal(err)
	}
	// Neither gpurun nor docker sees the daemon in the environment.
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "DOCKER_") && k != "GPURUN_CONFIG" && k != "XDG_CACHE_HOME" {
			env = append(env, kv)
		}
	}
	env = append(env, "DOCKER_HOST=unix:///nonexistent/gpurun-test.sock", "GPURUN_CONFIG="+e.config, "XDG_CACHE_HOME="+t.TempDir())
	gpurun := func(t *testing.T, args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(e.bin(), args...)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("gpurun %q: %v\nstdout %s\nstderr %s", args, err, out.String(), errOut.String())
		}
		if s := errOut.String(); strings.Contains(s, "unreachable") || strings.Contains(s, "environment unknown") || strings.Contains(s, "no docker daemon") {
			t.Errorf("gpurun %q did not ask the daemon the options name:\n%s", args, s)
		}
		return out.String(), errOut.String()
	}
	want := e.target(0) / 1024
	gpuRun := []string{"--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "df", "-k", "/dev/shm"}
	for _, tt := range []struct {
		name string
		opts []string
		cmd  []string
	}{
		{"-H run", []string{"-v", "-H", e.d.Host}, []string{"run"}},
		{"--host= container run", []string{"--host=" + e.d.Host, "-v"}, []string{"container", "run"}},
		{"--config --context run", []string{"--config", cfgDir, "-v", "--context", "gpurun-test"}, []string{"run"}},
		{"-c container run, -D", []string{"-v", "--config=" + cfgDir, "-c", "gpurun-test", "-D"}, []string{"container", "run"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr := gpurun(t, append(append(append([]string{}, tt.opts...), tt.cmd...), gpuRun...)...)
			if got := dfKiB(t, stdout); got != want {
				t.Errorf("/dev/shm %d KiB, want %d KiB\nstderr: %s", got, want, stderr)
			}
		})
	}
	for _, tt := range []struct {
		name string
		opts []string
		cmd  []string
	}{
		{"-H create", []string{"-v", "-H", e.d.Host}, []string{"create"}},
		{"--context container create", []string{"--config", cfgDir, "--context=gpurun-test", "-v"}, []string{"container", "create"}},
	} {
		t.Run(tt.name+" + start", func(t *testing.T) {
			args := append(append(append([]string{}, tt.opts...), tt.cmd...), "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "df", "-k", "/dev/shm")
			stdout, stderr := gpurun(t, args...)
			id := strings.TrimSpace(stdout)
			if id == "" {
				t.Fatalf("no container id; stderr %s", stderr)
			}
			defer e.d.Docker("rm", "-f", id)
			out, _, err := e.d.Docker("start", "-a", id)
			if err != nil {
				t.Fatal(err)
			}
			if got := dfKiB(t, out); got != want {
				t.Errorf("/dev/shm %d KiB, want %d KiB\nstderr: %s", got, want, stderr)
			}
			inspect, _, err := e.d.Docker("inspect", "--format", "{{.HostConfig.ShmSize}}", id)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := strconv.ParseInt(strings.TrimSpace(inspect), 10, 64); n != want*1024 {
				t.Errorf("ShmSize %s, want %d", inspect, want*1024)
			}
		})
	}
}

// TestRunForwardedSocket: a unix socket that another process serves (here
// a forwarder in this test, as ssh -L or Docker Desktop's proxy would be)
// is not taken for a daemon on this host: gpurun asks the daemon behind it
// for its host's memory (docker info) instead of reading this machine's,
// and the container still gets the policy's size.
func TestRunForwardedSocket(t *testing.T) {
	e := newRunEnv(t)
	fwd := filepath.Join(t.TempDir(), "fwd.sock")
	l, err := net.Listen("unix", fwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var asked atomic.Bool // a request for /info passed through
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("unix", e.d.Socket)
				if err != nil {
					return
				}
				defer up.Close()
				// Half-closes travel on, as docker's attach streams need.
				down := make(chan struct{})
				go func() {
					_, _ = io.Copy(c, up)
					_ = c.(*net.UnixConn).CloseWrite()
					close(down)
				}()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if bytes.Contains(buf[:n], []byte("/info ")) {
							asked.Store(true)
						}
						if _, werr := up.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = up.(*net.UnixConn).CloseWrite()
						<-down
						return
					}
				}
			}()
		}
	}()
	run := func(args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(e.bin(), append([]string{"-v", "-H", "unix://" + fwd}, args...)...)
		cmd.Env = append(e.d.Env(), "GPURUN_CONFIG="+e.config, "XDG_CACHE_HOME="+t.TempDir())
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("gpurun %q: %v\nstdout %s\nstderr %s", args, err, out.String(), errOut.String())
		}
		if !strings.Contains(errOut.String(), "not by a daemon on this host: asking the daemon for its host's memory") {
			t.Errorf("gpurun took the forwarded socket for a local daemon:\n%s", errOut.String())
		}
		return out.String(), errOut.String()
	}
	want := e.target(0)
	gpuRun := []string{"run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "df", "-k", "/dev/shm"}
	// A dry run: only gpurun talks to the daemon.
	out, errOut := run(append([]string{"--dry-run"}, gpuRun...)...)
	if !asked.Load() {
		t.Errorf("gpurun did not ask the daemon behind the forwarded socket for its memory (no /info request)\nstderr: %s", errOut)
	}
	if !strings.Contains(out, "--shm-size="+strconv.FormatInt(want, 10)+" ") {
		t.Errorf("dry run %q, want --shm-size=%d", out, want)
	}
	// The container, through the forwarder.
	out, errOut = run(gpuRun...)
	if got := dfKiB(t, out); got != want/1024 {
		t.Errorf("/dev/shm %d KiB, want %d KiB\nstderr: %s", got, want/1024, errOut)
	}
}
