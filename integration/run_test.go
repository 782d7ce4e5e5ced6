//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// runEnv is a private dockerd, its busybox image, and a gpurun policy file.
type runEnv struct {
	d         *harness.Dockerd
	img       string
	config    string
	gpu       string // a char device node of major 195, a fake /dev/nvidia0
	pol       *policy.Policy
	mem       int64  // the daemon host's memory, as the daemon reports it
	gpurunBin string // the gpurun binary under test
}

func newRunEnv(t *testing.T) *runEnv {
	t.Helper()
	d := harness.StartDockerd(t, harness.DockerdOptions{})
	e := &runEnv{d: d, img: harness.BusyboxImage(t, d), gpu: harness.MknodGPU(t, t.TempDir()), gpurunBin: bin(t, "gpurun")}
	e.config = filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(e.config, []byte("log_file = \"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.pol, err = policy.Load(e.config, true); err != nil {
		t.Fatal(err)
	}
	out, _, err := d.Docker("info", "--format", "{{.MemTotal}}")
	if err != nil {
		t.Fatal(err)
	}
	if e.mem, err = strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil {
		t.Fatalf("docker info MemTotal %q: %v", out, err)
	}
	return e
}

// cmd is `gpurun ARGS` aimed at the private daemon.
func (e *runEnv) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(e.bin(), args...)
	cmd.Env = append(e.d.Env(), "GPURUN_CONFIG="+e.config)
	return cmd
}

func (e *runEnv) bin() string { return e.gpurunBin }

// gpurun runs `gpurun ARGS` and returns stdout, stderr and the exit status.
func (e *runEnv) gpurun(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := e.cmd(args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("gpurun %q: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// target is the policy's size for a container with the given memory limit.
func (e *runEnv) target(limit int64) int64 {
	n, _ := e.pol.Target(policy.Request{MemoryLimit: limit, HostMemory: e.mem})
	return n
}

func TestRunDockerShm(t *testing.T) {
	e := newRunEnv(t)
	tests := []struct {
		name     string
		args     []string
		wantKiB  int64
		wantWarn string
	}{
		{"GPU by env", []string{"run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "df", "-k", "/dev/shm"}, e.target(0) / 1024, ""},
		{"GPU by device major 195", []string{"run", "--rm", "--network", "none", "--device", e.gpu + ":/dev/nvidia0", e.img, "df", "-k", "/dev/shm"}, e.target(0) / 1024, ""},
		{"bare gpurun IMAGE form", []string{"--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=0", e.img, "df", "-k", "/dev/shm"}, e.target(0) / 1024, ""},
		{"non-GPU stays 64 MiB", []string{"run", "--rm", "--network", "none", e.img, "df", "-k", "/dev/shm"}, 65536, ""},
		{"NVIDIA_VISIBLE_DEVICES=void is no GPU", []string{"run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=void", e.img, "df", "-k", "/dev/shm"}, 65536, ""},
		{"explicit --shm-size stays, with a warning", []string{"run", "--rm", "--network", "none", "--shm-size", "256m", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "df", "-k", "/dev/shm"}, 262144, "--shm-size 256m is below the policy minimum"},
		{"--memory 2g caps at half", []string{"run", "--rm", "--network", "none", "--memory", "2g", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "df", "-k", "/dev/shm"}, e.target(2*policy.GiB) / 1024, ""},
		{"--ipc host is left alone", []string{"run", "--rm", "--network", "none", "--ipc", "host", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "df", "-k", "/dev/shm"}, hostShmKiB(t), ""},
		{"NCCL_SHM_DISABLE=1 is pointed out", []string{"run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", "-e", "NCCL_SHM_DISABLE=1", e.img, "df", "-k", "/dev/shm"}, e.target(0) / 1024, "NCCL_SHM_DISABLE=1 is set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := e.gpurun(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
			}
			if got := dfKiB(t, stdout); got != tt.wantKiB {
				t.Errorf("/dev/shm %d KiB, want %d KiB\nstderr: %s", got, tt.wantKiB, stderr)
			}
			if tt.wantWarn != "" && !strings.Contains(stderr, "gpurun: warning: "+tt.wantWarn) {
				t.Errorf("stderr %q lacks warning %q", stderr, tt.wantWarn)
			}
			if tt.wantWarn == "" && strings.Contains(stderr, "warning") {
				t.Errorf("unexpected warning: %s", stderr)
			}
		})
	}
}

func TestRunDryRun(t *testing.T) {
	e := newRunEnv(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"--gpus all is parsed", []string{"--dry-run", "run", "--rm", "--gpus", "all", e.img, "true"},
			"docker run --shm-size=" + strconv.FormatInt(e.target(0), 10) + " --rm --gpus all " + e.img + " true\n"},
		{"--runtime nvidia", []string{"--dry-run", "run", "--runtime=nvidia", "-m", "4g", e.img},
			"docker run --shm-size=" + strconv.FormatInt(e.target(4*policy.GiB), 10) + " --runtime=nvidia -m 4g " + e.img + "\n"},
		{"a CUDA-like image's env", []string{"--dry-run", "run", "--rm", e.img + "-cuda", "sh"},
			"docker run --shm-size=" + strconv.FormatInt(e.target(0), 10) + " --rm " + e.img + "-cuda sh\n"},
		{"non-GPU unchanged", []string{"--dry-run", "run", "--rm", e.img, "sh", "-c", "echo 'a b'"},
			"docker run --rm " + e.img + " sh -c 'echo '\\''a b'\\'''\n"},
		{"docker's own error is docker's", []string{"--dry-run", "run", "--no-such-flag", e.img},
			"docker run --no-such-flag " + e.img + "\n"},
	}
	// An image whose config sets NVIDIA_VISIBLE_DEVICES, as CUDA images do.
	ctx := filepath.Join(t.TempDir(), "ctx")
	if err := os.MkdirAll(ctx, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte("FROM "+e.img+"\nENV NVIDIA_VISIBLE_DEVICES=all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := e.d.Docker("build", "-q", "-t", e.img+"-cuda", ctx); err != nil {
		t.Fatalf("build: %v %s", err, stderr)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := e.gpurun(t, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			first, reason, _ := strings.Cut(stdout, "\n")
			if first+"\n" != tt.want {
				t.Errorf("command line\n got %q\nwant %q", first+"\n", tt.want)
			}
			if !strings.HasPrefix(reason, "# ") {
				t.Errorf("no reason line: %q", stdout)
			}
		})
	}
}

func TestRunPassesThrough(t *testing.T) {
	e := newRunEnv(t)
	t.Run("exit status", func(t *testing.T) {
		_, _, code := e.gpurun(t, "run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "sh", "-c", "exit 7")
		if code != 7 {
			t.Errorf("exit %d, want 7", code)
		}
	})
	t.Run("docker's error for an unknown flag", func(t *testing.T) {
		_, stderr, code := e.gpurun(t, "run", "--no-such-flag", e.img)
		if code == 0 || !strings.Contains(stderr, "unknown flag: --no-such-flag") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("stdin and stdout", func(t *testing.T) {
		cmd := e.cmd("run", "--rm", "-i", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "sh", "-c", "cat; df -k /dev/shm >&2")
		cmd.Stdin = strings.NewReader("hello through gpurun\n")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %s", err, errOut.String())
		}
		if out.String() != "hello through gpurun\n" {
			t.Errorf("stdout %q", out.String())
		}
		if got := dfKiB(t, errOut.String()); got != e.target(0)/1024 {
			t.Errorf("/dev/shm %d KiB", got)
		}
	})
	t.Run("a TTY under a pty", func(t *testing.T) {
		// script(1) gives gpurun a pty; the container must get one too.
		line := e.bin() + " run --rm -t --network none -e NVIDIA_VISIBLE_DEVICES=all " + e.img + " sh -c 'tty; df -k /dev/shm'"
		cmd := exec.Command("script", "-qefc", line, "/dev/null")
		cmd.Env = append(e.d.Env(), "GPURUN_CONFIG="+e.config)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		text := strings.ReplaceAll(string(out), "\r", "")
		if !strings.Contains(text, "/dev/pts/") {
			t.Errorf("container has no tty: %q", text)
		}
		if !strings.Contains(text, strconv.FormatInt(e.target(0)/1024, 10)) {
			t.Errorf("no policy-sized /dev/shm under a tty: %q", text)
		}
	})
	t.Run("SIGTERM reaches the container", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := e.cmd("run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img,
			"sh", "-c", "trap 'echo got-term; exit 3' TERM; echo ready; while true; do sleep 0.1; done")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { <-ctx.Done(); _ = cmd.Process.Kill() }()
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("container did not start: %q %s", sc.Text(), errOut.String())
		}
		// gpurun replaced itself with docker: the pid we started is docker's.
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		var rest []string
		for sc.Scan() {
			rest = append(rest, sc.Text())
		}
		err = cmd.Wait()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 3 {
			t.Errorf("exit %v, want 3 from the container's trap; stderr %s", err, errOut.String())
		}
		if strings.Join(rest, "\n") != "got-term" {
			t.Errorf("container output after SIGTERM: %q", rest)
		}
	})
}

// TestRunShmCacheReload: gpurun keeps the daemon's default-shm-size
// between runs, but a reload of the daemon's configuration (SIGHUP) that
// raises it is seen by the next run: a GPU container then keeps the
// daemon's larger default instead of being given the smaller target.
func TestRunShmCacheReload(t *testing.T) {
	e := newRunEnv(t)
	args := []string{"run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "df", "-k", "/dev/shm"}
	stdout, stderr, code := e.gpurun(t, args...)
	if code != 0 || dfKiB(t, stdout) != e.target(0)/1024 {
		t.Fatalf("first run: exit %d, %s\n%s", code, stdout, stderr)
	}
	larger := (e.target(0)/policy.GiB + 1) * policy.GiB
	var cfg map[string]any
	data, err := os.ReadFile(e.d.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["default-shm-size"] = strconv.FormatInt(larger, 10)
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.d.ConfigPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.d.For(t).Reload()
	stdout, stderr, code = e.gpurun(t, args...)
	if code != 0 {
		t.Fatalf("second run: exit %d\n%s", code, stderr)
	}
	if got := dfKiB(t, stdout); got != larger/1024 {
		t.Errorf("after the reload /dev/shm is %d KiB, want the daemon's new default %d KiB (a stale cached default would give the target %d KiB)", got, larger/1024, e.target(0)/1024)
	}
}
