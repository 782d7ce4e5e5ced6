package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
// hooks.d entry. On this host (hostRoot "" or "/"): the gpurun-runtime an
// install of the runtime would register (DefaultRuntimePath) when it has
// the hook mode (runsHook: RunsHook), since it starts in a fraction of
// gpurun's CPU time, which a hook adds to every container start; else this
// executable (links resolved). On another host's root:
// InstalledGPURunPath, which no check here can run.
func DefaultHookPath(hostRoot string, executable func() (string, error), runsHook func(path string) bool) string {
	if !onThisHost(hostRoot) {
		return InstalledGPURunPath
	}
	if rt := DefaultRuntimePath(hostRoot, executable); runsHook(rt) {
		return rt
	}
	self, err := executable()
	if err != nil {
		return InstalledGPURunPath
	}
	if p, err := filepath.EvalSymlinks(self); err == nil {
		self = p
	}
	return self
}

// hookProbeTimeout bounds RunsHook's run of the program.
const hookProbeTimeout = 5 * time.Second

// RunsHook says whether the program at path is a gpurun-runtime with the
// hook mode (hook.CheckRuntimeMode). A missing file says no.
func RunsHook(path string) bool {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), hookProbeTimeout)
	defer cancel()
	return hook.CheckRuntimeMode(path, func(name string, args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, name, args...).Output()
	}) == nil
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
