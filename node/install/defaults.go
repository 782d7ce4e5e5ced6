package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpurun/gpurun/engine/dockerapi"
	"github.com/gpurun/gpurun/node/hook"
)

// The installed locations of gpurun's programs, where the engines run them
// when no other path is known.
const (
	InstalledRuntimePath = "/usr/local/bin/gpurun-runtime"
	InstalledGPURunPath  = "/usr/local/bin/gpurun"
)

// onThisHost says whether hostRoot names this host's own root.
func onThisHost(hostRoot string) bool { return hostRoot == "" || hostRoot == "/" }

// DefaultRuntimePath is gpurun-runtime as the engine will run it: the one
// next to this executable (executable: os.Executable) when the node is this
// host (hostRoot "" or "/") and it is there, else InstalledRuntimePath.
func DefaultRuntimePath(hostRoot string, executable func() (string, error)) string {
	if self, err := executable(); err == nil && onThisHost(hostRoot) {
		sib := filepath.Join(filepath.Dir(self), "gpurun-runtime")
		if fi, err := os.Stat(sib); err == nil && !fi.IsDir() {
			return sib
		}
	}
	return InstalledRuntimePath
}

// DefaultHookPath is the program the runtime will run from gpurun's
// hooks.d entry. On this host (hostRoot "" or "/"): the gpurun-runtime
// next to this executable (links resolved) when it has the hook mode
// (runsHook, RunsHook for the real one: a gpurun-runtime from before it
// would hand "hook" to runc and fail every container start), since it
// starts in a fraction of gpurun's CPU time, which a hook adds to every
// container start; else this executable. On another host's root:
// InstalledGPURunPath, which no check here can run.
func DefaultHookPath(hostRoot string, executable func() (string, error), runsHook func(path string) bool) string {
	if !onThisHost(hostRoot) {
		return InstalledGPURunPath
	}
	self, err := executable()
	if err != nil {
		return InstalledGPURunPath
	}
	if p, err := filepath.EvalSymlinks(self); err == nil {
		self = p
	}
	if sib := filepath.Join(filepath.Dir(self), "gpurun-runtime"); runsHook(sib) {
		return sib
	}
	return self
}

// hookProbeTimeout bounds RunsHook's run of the program.
const hookProbeTimeout = 5 * time.Second

// RunsHook says whether the program at path is a gpurun-runtime with the
// hook mode: `path hook --help` exits 0 and prints its usage
// (hook.RuntimeUsage). A missing file, or an older build, says no.
func RunsHook(path string) bool {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), hookProbeTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "hook", "--help").CombinedOutput()
	return err == nil && strings.Contains(string(out), hook.RuntimeUsage)
}

// dockerInfoTimeout bounds the question to the running dockerd.
const dockerInfoTimeout = 5 * time.Second

// RunningDockerRoot asks the dockerd at $DOCKER_HOST (else the default
// socket) for its data-root, within a few seconds, and finds its process
// (dockerapi.DaemonProcess; unknown, the data-root is taken as it answers):
// Docker.Daemon, for install docker.
func RunningDockerRoot(ctx context.Context, getenv func(string) string) func() (RunningDockerd, error) {
	return func() (RunningDockerd, error) {
		c, err := dockerapi.NewClient(getenv)
		if err != nil {
			return RunningDockerd{}, err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(ctx, dockerInfoTimeout)
		defer cancel()
		info, err := c.Info(ctx)
		if err != nil {
			return RunningDockerd{}, err
		}
		r := RunningDockerd{DataRoot: info.DockerRootDir}
		r.PID, r.Args, _ = dockerapi.DaemonProcess(c.DaemonHost())
		return r, nil
	}
}
