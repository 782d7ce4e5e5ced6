// Package translate knows what dockerd writes into a container's OCI spec
// for the parts gpurun plans over — the IPC mode and its /dev/shm, GPU
// device requests, devices, privileged mode, the memory limit — and gives
// it as oci.Opts. Two front doors see a Docker container from outside
// dockerd and translate it with these: `gpurun run` (docker run's
// arguments, package docker/launch) and the host-side tools that read docker
// inspect (doctor, resize), through FromInspect.
package translate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// ParseGPUs reads a --gpus value the way the docker CLI's GpuOpts does:
// "all", a count, or one CSV record of count=, device=, capabilities=,
// driver= and options= fields. Like the CLI, it asks for the "gpu"
// capability when none is named.
func ParseGPUs(v string) (container.DeviceRequest, error) {
	req := container.DeviceRequest{}
	fields, err := csv.NewReader(strings.NewReader(v)).Read()
	if err != nil {
		return req, fmt.Errorf("--gpus %q: %w", v, err)
	}
	for _, field := range fields {
		key, val, ok := strings.Cut(field, "=")
		if !ok {
			if len(fields) > 1 {
				return req, fmt.Errorf("--gpus %q: %q is not key=value", v, field)
			}
			switch field {
			case "all":
				req.Count = -1
			default:
				n, err := strconv.Atoi(field)
				if err != nil {
					return req, fmt.Errorf("--gpus %q: want all, a count or key=value fields", v)
				}
				req.Count = n
			}
			continue
		}
		switch key {
		case "count":
			if val == "all" {
				req.Count = -1
				continue
			}
			n, err := strconv.Atoi(val)
			if err != nil {
				return req, fmt.Errorf("--gpus %q: count %q: want all or a number", v, val)
			}
			req.Count = n
		case "device":
			req.DeviceIDs = strings.Split(val, ",")
		case "capabilities":
			req.Capabilities = [][]string{strings.Split(val, ",")}
		case "driver":
			req.Driver = val
		case "options":
			// driver options are the driver's business, not gpurun's
		default:
			return req, fmt.Errorf("--gpus %q: unknown field %q", v, key)
		}
	}
	if len(req.Capabilities) == 0 {
		req.Capabilities = [][]string{{"gpu"}}
	}
	return req, nil
}

// Request is one device request as Decide judges it, named as `docker run`
// spells it (--gpus for the driver or capability the CLI gives it, --device
// for CDI names): the request as dockerd gets it.
func Request(dr container.DeviceRequest) oci.DeviceRequest {
	var caps []string
	for _, set := range dr.Capabilities {
		caps = append(caps, set...)
	}
	return oci.DeviceRequest{Words: requestWords(dr), Driver: dr.Driver, Capabilities: caps, DeviceIDs: dr.DeviceIDs, Count: dr.Count}
}

// requestWords writes a device request as the flag that asks for it.
func requestWords(dr container.DeviceRequest) string {
	switch {
	case dr.Driver == oci.DriverCDI:
		return "--device " + strings.Join(dr.DeviceIDs, ",")
	case len(dr.DeviceIDs) > 0:
		return "--gpus device=" + strings.Join(dr.DeviceIDs, ",")
	case dr.Count < 0:
		return "--gpus all"
	default:
		return "--gpus " + strconv.Itoa(dr.Count)
	}
}

// runtimeWords is how `--runtime NAME` asks for a runtime, "" for none
// (NVIDIA's runtimes give the container the GPUs its
// NVIDIA_VISIBLE_DEVICES names, which Decide judges).
func runtimeWords(name string) string {
	if name == "" {
		return ""
	}
	return "--runtime " + name
}

// Shm is what dockerd needs to lay out a container's /dev/shm.
type Shm struct {
	// Size is the container's ShmSize (--shm-size, else the daemon's
	// default-shm-size), in bytes.
	Size int64
	// Choice is the user's --shm-size in their words, "" when not given.
	Choice string
	// DataRoot is the daemon's data root (DockerRootDir), "" when unknown.
	DataRoot string
	// ID is the container's id; DonorID the full id of the container whose
	// IPC namespace it joins (--ipc container:<x>). "" when unknown.
	ID, DonorID string
	// IPCWords is the IPC mode in the user's words ("ipc: service:x"),
	// "" for "--ipc <mode>".
	IPCWords string
}

// IPC returns the Opt for an IPC mode as dockerd sets /dev/shm up:
//
//   - "", "private": a namespace of its own and a tmpfs of shm.Size;
//   - "shareable": a namespace of its own and a tmpfs of shm.Size that
//     dockerd mounts on the host at <data-root>/containers/<id>/mounts/shm
//     and binds, so that others can join; before the container exists
//     (docker run) it is sized exactly like a private one;
//   - "container:<x>": x's namespace, binding x's host tmpfs; where that
//     lies is unknown without the data root and x's id, and the container
//     then joins a namespace whose /dev/shm is not known here
//     (oci.WithJoinedIPC);
//   - "host": the host's namespace and /dev/shm;
//   - "none": a namespace of its own and nothing at /dev/shm.
//
// A shareable mode whose host path cannot be told (an id, but no data
// root) is an error.
func IPC(mode string, shm Shm) oci.Opt {
	return func(c *oci.Container) error {
		own := func() error {
			if err := oci.WithPrivateShm(shm.Size)(c); err != nil {
				return err
			}
			if shm.Choice != "" {
				return oci.WithShmChoice(shm.Choice)(c)
			}
			return nil
		}
		hostShm := func(id string) (string, error) {
			if shm.DataRoot == "" || id == "" {
				return "", fmt.Errorf("--ipc %s: where dockerd keeps the shared /dev/shm is unknown (no data root or container id)", mode)
			}
			l, _ := oci.LayoutOf(oci.EngineDocker)
			return l.Path(shm.DataRoot, id), nil
		}
		switch {
		case mode == "" || mode == "private":
			return own()
		case mode == "shareable":
			if shm.ID == "" {
				return own()
			}
			p, err := hostShm(shm.ID)
			if err != nil {
				return err
			}
			return oci.WithSharedShm(p, "")(c)
		case strings.HasPrefix(mode, "container:"):
			if shm.DataRoot == "" || shm.DonorID == "" {
				words := shm.IPCWords
				if words == "" {
					words = "--ipc " + mode
				}
				return oci.WithJoinedIPC(words)(c)
			}
			p, err := hostShm(shm.DonorID)
			if err != nil {
				return err
			}
			return oci.WithSharedShm(p, "container:"+strings.TrimPrefix(mode, "container:"))(c)
		case mode == "host":
			words := shm.IPCWords
			if words == "" {
				words = "--ipc=host"
			}
			if err := oci.WithHostIPC(words)(c); err != nil {
				return err
			}
			// Docker ignores the size; the decision warns of it.
			return oci.WithShmChoice(shm.Choice)(c)
		case mode == "none":
			return oci.WithNoShm()(c)
		}
		return fmt.Errorf("--ipc %q: not an IPC mode docker knows", mode)
	}
}

// FromInspect translates what docker inspect says of a container into the
// one form: its env (the image's and the user's, as dockerd merged them),
// annotations, memory limit, GPU device requests and runtime, devices,
// privileged mode, and its /dev/shm: the user's own mount there, else what
// its IPC mode gives. dataRoot is the daemon's DockerRootDir, donor the
// container whose IPC namespace it joins (nil when none or unknown).
func FromInspect(c container.InspectResponse, dataRoot string, donor *container.InspectResponse) (*oci.Container, error) {
	s, err := InspectSettings(c, dataRoot, donor)
	if err != nil {
		return nil, err
	}
	return s.Container()
}

// InspectSettings reads what docker inspect says of a container as its
// settings (see FromInspect).
func InspectSettings(c container.InspectResponse, dataRoot string, donor *container.InspectResponse) (Settings, error) {
	if c.ContainerJSONBase == nil || c.HostConfig == nil {
		return Settings{}, errors.New("docker inspect: incomplete answer (no HostConfig)")
	}
	h := c.HostConfig
	s := Settings{
		Annotations: h.Annotations, Memory: h.Memory,
		Runtime: h.Runtime, RuntimeWords: runtimeWords(h.Runtime),
		IPC: string(h.IpcMode),
		Shm: Shm{Size: h.ShmSize, DataRoot: dataRoot, ID: c.ID},
	}
	if c.Config != nil {
		s.Env = c.Config.Env
	}
	for _, dr := range h.DeviceRequests {
		s.Requests = append(s.Requests, Request(dr))
	}
	for _, d := range h.Devices {
		s.Devices = append(s.Devices, path.Clean(d.PathInContainer))
	}
	if h.Privileged {
		s.Privileged = "--privileged"
	}
	if s.Shm.Size <= 0 {
		s.Shm.Size = policy.EngineDefaultShm
	}
	if donor != nil && donor.ContainerJSONBase != nil {
		s.Shm.DonorID = donor.ID
	}
	// The user's own mount at /dev/shm wins, as in dockerd.
	for _, m := range c.Mounts {
		if path.Clean(m.Destination) == oci.ShmPath {
			s.UserShm = &UserShm{fmt.Sprintf("a %s mount of %s", m.Type, m.Source), specs.Mount{Type: userMountType(string(m.Type)), Source: m.Source}}
		}
	}
	if o, ok := h.Tmpfs[oci.ShmPath]; ok {
		s.UserShm = &UserShm{strings.TrimSuffix("--tmpfs /dev/shm:"+o, ":"), tmpfsMount(o)}
	}
	return s, nil
}

// userMountType is the OCI mount type dockerd writes for a mount of a
// docker mount type: its tmpfs stays a tmpfs, everything else is a bind.
func userMountType(t string) string {
	if t == "tmpfs" {
		return "tmpfs"
	}
	return "bind"
}

// tmpfsMount is the OCI mount of `--tmpfs /dev/shm:<options>`.
func tmpfsMount(options string) specs.Mount {
	m := specs.Mount{Type: "tmpfs", Source: "tmpfs"}
	if options != "" {
		m.Options = strings.Split(options, ",")
	}
	return m
}

// UserMount returns the OCI mount dockerd makes for a docker run flag that
// mounts something at /dev/shm ("--tmpfs /dev/shm:size=1g", "--mount
// type=tmpfs,dst=/dev/shm", "--volume x:/dev/shm"): a tmpfs with the
// flag's options for a tmpfs, else a bind.
func UserMount(flag, value string) specs.Mount {
	switch flag {
	case "tmpfs":
		_, opts, _ := strings.Cut(value, ":")
		return tmpfsMount(opts)
	case "mount":
		fields, _ := csv.NewReader(strings.NewReader(value)).Read()
		typ, size := "volume", ""
		for _, f := range fields {
			k, v, _ := strings.Cut(f, "=")
			switch strings.ToLower(k) {
			case "type":
				typ = v
			case "tmpfs-size":
				size = v
			}
		}
		if typ == "tmpfs" {
			m := specs.Mount{Type: "tmpfs", Source: "tmpfs"}
			if size != "" {
				m.Options = []string{"size=" + size}
			}
			return m
		}
	}
	return specs.Mount{Type: "bind"}
}
