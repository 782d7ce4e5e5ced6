package translate

import (
	"fmt"
	"strings"

	"github.com/gpurun/gpurun/docker/runargs"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// FromRun translates a docker run command line into the one form, as
// dockerd would lay the container out: the environment (env, the image's
// and the run's, merged), annotations, --memory, each --gpus request,
// --runtime, every --device (oci.ClassifyDevice judges them), --privileged,
// and /dev/shm — the user's own mount there, else what --ipc and
// --shm-size give (defaultShm is the daemon's default-shm-size; the
// namespace of --ipc container:<x> is joined, its /dev/shm not known from
// the command line).
func FromRun(run *runargs.Run, env []string, defaultShm int64) (*oci.Container, error) {
	s, err := RunSettings(run, env, defaultShm)
	if err != nil {
		return nil, err
	}
	return s.Container()
}

// RunSettings reads a docker run command line as the container's settings
// (see FromRun).
func RunSettings(run *runargs.Run, env []string, defaultShm int64) (Settings, error) {
	s := Settings{
		Env: env, Annotations: map[string]string{},
		Runtime: run.Runtime, RuntimeWords: runtimeWords(run.Runtime),
		IPC: run.IPC, Shm: Shm{Size: defaultShm},
	}
	for _, a := range run.Annotations {
		k, v, _ := strings.Cut(a, "=")
		s.Annotations[k] = v
	}
	for _, g := range run.GPURequests {
		dr, err := ParseGPUs(g)
		if err != nil {
			// docker refuses the run with its own message.
			return s, err
		}
		s.Requests = append(s.Requests, Request(dr))
	}
	for _, d := range run.Devices {
		if dst := runargs.DeviceTarget(d); dst != "" {
			s.Devices = append(s.Devices, dst)
		}
	}
	if run.Privileged {
		s.Privileged = "--privileged"
	}
	if how, ok := run.MountsDevShm(); ok {
		flag, value, _ := strings.Cut(strings.TrimPrefix(how, "--"), " ")
		s.UserShm = &UserShm{how, UserMount(flag, value)}
	}
	// The sizes last, together.
	if run.MemorySet {
		n, err := policy.ParseSize(run.Memory)
		if err != nil {
			return s, fmt.Errorf("--memory: %w", err)
		}
		s.Memory = n
	}
	if run.ShmSizeSet {
		n, err := policy.ParseSize(run.ShmSize)
		if err != nil {
			return s, fmt.Errorf("--shm-size: %w", err)
		}
		if n > 0 {
			s.Shm.Size, s.Shm.Choice = n, "--shm-size "+run.ShmSize
		}
	}
	return s, nil
}
