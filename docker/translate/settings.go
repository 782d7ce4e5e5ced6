package translate

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/oci"
)

// Settings are a Docker container's settings as dockerd is handed them, as
// far as gpurun plans over them — from docker run's arguments (FromRun), a
// compose service (package compose) or docker inspect (FromInspect) — each
// in the words the user wrote it in, so that a plan's reason names the
// user's flag or key. They are plain data; Container lays them out as
// dockerd does, the one place the docker door meets the one form.
type Settings struct {
	// Env is the process environment (the image's and the user's, merged).
	Env         []string
	Annotations map[string]string
	// Memory is the memory limit in bytes, 0 for none.
	Memory int64
	// Runtime is the runtime the container runs with, "" for the daemon's
	// default; RuntimeWords how it was asked for ("--runtime nvidia").
	Runtime, RuntimeWords string
	// Requests are the device requests (--gpus, deploy devices, gpus:).
	Requests []oci.DeviceRequest
	// Devices are the device nodes by their path in the container; a CDI
	// name stays whole (oci.WithDevices makes it a request).
	Devices []string
	// Privileged is how privileged mode was asked for, "" when it was not.
	Privileged string
	// IPC is the IPC mode as dockerd takes it: "", private, shareable,
	// container:<x>, host or none (see IPC).
	IPC string
	// Shm is what dockerd needs to lay /dev/shm out for the IPC mode.
	Shm Shm
	// UserShm is the user's own mount at /dev/shm, nil when none: it wins
	// over the IPC mode's, as in dockerd.
	UserShm *UserShm
}

// UserShm is a mount of the user's own at /dev/shm.
type UserShm struct {
	// Words name it as the user wrote it ("--tmpfs /dev/shm:size=1g").
	Words string
	// Mount is the OCI mount dockerd makes of it.
	Mount specs.Mount
}

// Container lays the settings out as dockerd does: /dev/shm first (the IPC
// mode's, then the user's own mount, which wins), then the rest.
func (s Settings) Container() (*oci.Container, error) {
	opts := []oci.Opt{IPC(s.IPC, s.Shm)}
	if s.UserShm != nil {
		opts = append(opts, oci.WithUserShm(s.UserShm.Words, s.UserShm.Mount))
	}
	opts = append(opts,
		oci.WithEnv(s.Env...),
		oci.WithAnnotations(s.Annotations),
		oci.WithMemoryLimit(s.Memory),
		oci.WithRuntime(s.RuntimeWords, s.Runtime),
	)
	for _, r := range s.Requests {
		opts = append(opts, oci.WithDeviceRequest(r))
	}
	if len(s.Devices) > 0 {
		opts = append(opts, oci.WithDevices(s.Devices...))
	}
	if s.Privileged != "" {
		opts = append(opts, oci.WithPrivileged(s.Privileged))
	}
	return oci.NewContainer(opts...)
}
