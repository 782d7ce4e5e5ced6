package install

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/gpurun/gpurun/engine/dockerapi"
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

// DefaultHookPath is gpurun as the runtime will run it from a hooks.d
// entry: this executable (links resolved) when the node is this host, else
// InstalledGPURunPath.
func DefaultHookPath(hostRoot string, executable func() (string, error)) string {
	if onThisHost(hostRoot) {
		if self, err := executable(); err == nil {
			if p, err := filepath.EvalSymlinks(self); err == nil {
				return p
			}
			return self
		}
	}
	return InstalledGPURunPath
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
