package oci

import (
	"errors"
	"fmt"
	"path"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Container is the one form every front door translates a container into
// before gpurun plans its /dev/shm, and the only thing Decide reads besides
// the policy and the host's facts.
//
// Its Spec is the OCI runtime spec as far as it is known: all of it for a
// bundle (the shim, the hook), and for the other front doors — docker run's
// arguments, docker inspect, a compose service, a pod spec, NRI's container
// — the parts the engine would write that the planner reads, built with the
// Opts below. The other fields say what a spec cannot: GPUs asked for in the
// front door's own words, every host device, and a /dev/shm size the user
// chose even when it equals the engine's default.
type Container struct {
	Spec *specs.Spec
	// Name is the container's name in its pod, where the front door knows
	// it (a pod spec); otherwise the engine's CRI annotations say it.
	Name string
	// DeviceRequests are requests for devices that the engine resolves
	// only later, as the front door read them: docker's --gpus and
	// DeviceRequests, a CDI name given as a device, compose's deploy
	// devices and gpus. Decide judges them (Evidence).
	DeviceRequests []DeviceRequest
	// Runtime is the runtime handler the container runs under, as the user
	// named it: docker's --runtime, compose's runtime:, a pod's
	// runtimeClassName. Decide judges it (Evidence).
	Runtime Named
	// Resources are the Kubernetes extended resources the container asks
	// for. Decide judges them (Evidence).
	Resources []Resource
	// Claims are the Kubernetes DRA resource claims the container uses,
	// resolved as far as the front door could. Decide judges them
	// (Evidence.Claim).
	Claims []Claim
	// Privileged names the user's request for every device of the host
	// ("--privileged", "privileged: true"), "" when none: a GPU container
	// where the host has GPUs.
	Privileged string
	// ShmChoice names the user's explicit choice of the size of the engine's
	// own /dev/shm ("--shm-size 64m", "shm_size: 2g"), "" when none. A spec
	// cannot tell an explicit 64m from the engine's default; a front door
	// that reads the user's words can.
	ShmChoice string
	// UserShm names the user's own mount at /dev/shm in their words
	// ("--tmpfs /dev/shm:size=1g"), "" when none or where only the spec
	// tells (a bundle).
	UserShm string
	// HostIPC names the user's request for the host's IPC namespace in
	// their words ("--ipc host", "ipc: host", "hostIPC: true"), "" when
	// none or where only the spec tells.
	HostIPC string
	// JoinedIPC names, in the user's words ("--ipc container:trainer",
	// "ipc: service:trainer"), the IPC namespace of another container that
	// this one joins where the front door cannot tell where that
	// container's /dev/shm lies: it is the other container's shared tmpfs,
	// of a size not known here. "" when none, or when the spec binds the
	// shared tmpfs itself.
	JoinedIPC string
}

// Named is a name and the words the user gave it with ("--runtime
// nvidia", "runtimeClassName: nvidia").
type Named struct {
	Words, Name string
}

// DeviceRequest is a request for devices the engine resolves later, as the
// front door read it (docker's container.DeviceRequest, compose's device
// reservations): Decide, not the front door, says whether it asks for GPUs.
type DeviceRequest struct {
	// Words is the request as the user gave it: "--gpus all",
	// "deploy.resources.reservations.devices: driver nvidia".
	Words string
	// Driver is the device driver named ("nvidia", "cdi"), "" for any.
	Driver string
	// Capabilities are the capabilities asked for, every set of them
	// flattened ("gpu", "compute", "utility").
	Capabilities []string
	// DeviceIDs are the devices named: indexes or UUIDs, or CDI names for
	// driver "cdi".
	DeviceIDs []string
	// Count is the number of devices asked for: -1 for all, 0 when the
	// request names none (DeviceIDs may).
	Count int
}

// Resource is a Kubernetes extended resource a container asks for.
type Resource struct {
	// Words is the request in the pod spec's words ("resources.limits
	// nvidia.com/gpu: 2").
	Words string
	// Name is the resource ("nvidia.com/gpu") and Count its quantity.
	Name  string
	Count int64
}

// Opt changes a Container under construction: one small, separately
// testable step of a front door's translation, in the style of
// containerd's oci.SpecOpts.
type Opt func(*Container) error

// NewContainer returns a Container with an empty spec after applying opts
// in order.
func NewContainer(opts ...Opt) (*Container, error) {
	c := &Container{Spec: &specs.Spec{
		Process:     &specs.Process{},
		Linux:       &specs.Linux{},
		Annotations: map[string]string{},
	}}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// FromSpec wraps a whole runtime spec (a bundle's config.json) as a
// Container. A nil spec is an empty one.
func FromSpec(s *specs.Spec) *Container {
	if s == nil {
		s = &specs.Spec{}
	}
	return &Container{Spec: s}
}

func (c *Container) linux() *specs.Linux {
	if c.Spec.Linux == nil {
		c.Spec.Linux = &specs.Linux{}
	}
	return c.Spec.Linux
}

func (c *Container) annotations() map[string]string {
	if c.Spec.Annotations == nil {
		c.Spec.Annotations = map[string]string{}
	}
	return c.Spec.Annotations
}

// WithEnv appends KEY=VALUE entries to the process environment; a later
// entry for the same key wins, as for execve's consumers.
func WithEnv(env ...string) Opt {
	return func(c *Container) error {
		if c.Spec.Process == nil {
			c.Spec.Process = &specs.Process{}
		}
		c.Spec.Process.Env = append(c.Spec.Process.Env, env...)
		return nil
	}
}

// WithName names the container as its pod spec does.
func WithName(name string) Opt {
	return func(c *Container) error {
		c.Name = name
		return nil
	}
}

// WithDeviceRequest records a request for devices as the front door read
// it; Decide judges whether it asks for GPUs.
func WithDeviceRequest(r DeviceRequest) Opt {
	return func(c *Container) error {
		if r.Words == "" {
			return errors.New("a device request needs the words it was asked with")
		}
		c.DeviceRequests = append(c.DeviceRequests, r)
		return nil
	}
}

// WithRuntime records the runtime handler the container runs under, named
// as the user named it; Decide judges whether it gives GPUs.
func WithRuntime(words, name string) Opt {
	return func(c *Container) error {
		if name != "" && words == "" {
			return errors.New("a runtime needs the words it was named with")
		}
		c.Runtime = Named{Words: words, Name: name}
		return nil
	}
}

// WithResource records an extended resource the container asks for;
// Decide judges whether it is a GPU.
func WithResource(words, name string, count int64) Opt {
	return func(c *Container) error {
		if words == "" || name == "" {
			return errors.New("a resource needs its name and the words it was asked with")
		}
		c.Resources = append(c.Resources, Resource{Words: words, Name: name, Count: count})
		return nil
	}
}

// WithDevices adds device nodes by their paths inside the container. A CDI
// name among them (docker's --device vendor/class=name, compose's devices)
// is a request the engine resolves later: it is recorded as a device
// request of driver "cdi" named "device <name>", as docker 25+ turns it
// into one.
func WithDevices(paths ...string) Opt {
	return func(c *Container) error {
		for _, p := range paths {
			if IsCDIName(p) {
				c.DeviceRequests = append(c.DeviceRequests, DeviceRequest{Words: "device " + p, Driver: DriverCDI, DeviceIDs: []string{p}})
				continue
			}
			if !strings.HasPrefix(p, "/") {
				return fmt.Errorf("device %q: want an absolute path in the container or a CDI name", p)
			}
			l := c.linux()
			l.Devices = append(l.Devices, specs.LinuxDevice{Path: path.Clean(p), Type: "c"})
		}
		return nil
	}
}

// WithCDIDevices requests CDI devices by name, under the annotation
// cdi.k8s.io/<key>, the way the engines pass CDI requests to runtimes.
func WithCDIDevices(key string, names ...string) Opt {
	return func(c *Container) error {
		for _, n := range names {
			if !IsCDIName(n) {
				return fmt.Errorf("CDI device %q: want vendor/class=name", n)
			}
			addCDI(c, key, n)
		}
		return nil
	}
}

func addCDI(c *Container, key, name string) {
	a := c.annotations()
	k := CDIAnnotationPrefix + key
	if a[k] == "" {
		a[k] = name
	} else {
		a[k] += "," + name
	}
}

// WithAnnotations sets annotations (a size an allowed annotation asks for,
// CDI requests).
func WithAnnotations(m map[string]string) Opt {
	return func(c *Container) error {
		a := c.annotations()
		for k, v := range m {
			a[k] = v
		}
		return nil
	}
}

// WithMemoryLimit sets the memory limit in bytes; 0 or less means none.
func WithMemoryLimit(n int64) Opt {
	return func(c *Container) error {
		l := c.linux()
		if n <= 0 {
			if l.Resources != nil && l.Resources.Memory != nil {
				l.Resources.Memory.Limit = nil
			}
			return nil
		}
		if l.Resources == nil {
			l.Resources = &specs.LinuxResources{}
		}
		if l.Resources.Memory == nil {
			l.Resources.Memory = &specs.LinuxMemory{}
		}
		l.Resources.Memory.Limit = &n
		return nil
	}
}

// WithPrivileged records the user's request for every device of the host,
// named as the user wrote it.
func WithPrivileged(evidence string) Opt {
	return func(c *Container) error {
		c.Privileged = evidence
		return nil
	}
}

// The IPC and /dev/shm options below each replace whatever the container
// had at /dev/shm and set its IPC namespace: one of them describes the
// whole of it.

// WithPrivateShm gives the container its own IPC namespace and the engine's
// own tmpfs of size bytes at /dev/shm (Docker's IPC private, ctr, nerdctl).
func WithPrivateShm(size int64) Opt {
	return func(c *Container) error {
		setIPC(c, specs.LinuxNamespace{Type: specs.IPCNamespace})
		setShm(c, ShmMount(size))
		return nil
	}
}

// WithShmChoice records that the user chose the size of the engine's own
// /dev/shm, in their words ("--shm-size 64m").
func WithShmChoice(words string) Opt {
	return func(c *Container) error {
		c.ShmChoice = words
		return nil
	}
}

// WithSharedShm gives the container a bind of the tmpfs the engine mounted
// on the host at source for a pod, an IPC group or a shareable container
// (a CRI sandbox's shm, Docker's <root>/containers/<id>/mounts/shm), in an
// IPC namespace of its own (joinPath "") or joined (the namespace's path).
func WithSharedShm(source, joinPath string) Opt {
	return func(c *Container) error {
		if !path.IsAbs(source) {
			return fmt.Errorf("shared /dev/shm %q: want an absolute host path", source)
		}
		setIPC(c, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: joinPath})
		setShm(c, specs.Mount{Destination: ShmPath, Type: "bind", Source: path.Clean(source), Options: []string{"rbind", "rprivate"}})
		return nil
	}
}

// WithJoinedIPC puts the container in the IPC namespace of another
// container whose /dev/shm the front door cannot locate (docker run --ipc
// container:x before x is inspected, compose's ipc: service:x), named in
// the user's words: its /dev/shm is that container's shared tmpfs, of a
// size not known here.
func WithJoinedIPC(words string) Opt {
	return func(c *Container) error {
		if words == "" {
			return errors.New("a joined IPC namespace needs the words it was asked with")
		}
		// The namespace is joined; its path is not known here.
		setIPC(c, specs.LinuxNamespace{Type: specs.IPCNamespace, Path: "(" + words + ")"})
		setShm(c, specs.Mount{})
		c.JoinedIPC = words
		return nil
	}
}

// WithHostIPC puts the container in the host's IPC namespace, with the
// host's /dev/shm (docker --ipc host, Kubernetes hostIPC), asked for in
// the user's words ("" where the front door has none).
func WithHostIPC(words string) Opt {
	return func(c *Container) error {
		l := c.linux()
		ns := l.Namespaces[:0:0]
		for _, n := range l.Namespaces {
			if n.Type != specs.IPCNamespace {
				ns = append(ns, n)
			}
		}
		l.Namespaces = ns
		setShm(c, specs.Mount{Destination: ShmPath, Type: "bind", Source: ShmPath, Options: []string{"rbind"}})
		c.HostIPC = words
		return nil
	}
}

// WithNoShm gives the container its own IPC namespace and nothing at
// /dev/shm (docker --ipc none).
func WithNoShm() Opt {
	return func(c *Container) error {
		setIPC(c, specs.LinuxNamespace{Type: specs.IPCNamespace})
		setShm(c, specs.Mount{})
		return nil
	}
}

// WithUserShm records the user's own mount at /dev/shm: m as far as the
// front door knows it (its Type "tmpfs" with a size option for a tmpfs;
// "bind" or a volume type otherwise), named in the user's words ("--tmpfs
// /dev/shm:size=1g", "volume dshm"). The IPC namespace is left as it is.
// Decide leaves such a mount alone unless enforce_min raises a tmpfs.
func WithUserShm(words string, m specs.Mount) Opt {
	return func(c *Container) error {
		if words == "" {
			return errors.New("a user's /dev/shm mount needs the words it was given with")
		}
		m.Destination = ShmPath
		if m.Source == "" {
			m.Source = "user"
		}
		setShm(c, m)
		c.UserShm = words
		return nil
	}
}

// setIPC replaces the IPC namespace entry.
func setIPC(c *Container, ipc specs.LinuxNamespace) {
	l := c.linux()
	ns := l.Namespaces[:0:0]
	for _, n := range l.Namespaces {
		if n.Type != specs.IPCNamespace {
			ns = append(ns, n)
		}
	}
	l.Namespaces = append(ns, ipc)
}

// setShm drops every mount at /dev/shm and, unless m is the zero Mount,
// adds m.
func setShm(c *Container, m specs.Mount) {
	c.UserShm, c.JoinedIPC, c.HostIPC = "", "", ""
	ms := c.Spec.Mounts[:0:0]
	for _, x := range c.Spec.Mounts {
		if path.Clean(x.Destination) != ShmPath {
			ms = append(ms, x)
		}
	}
	if m.Destination != "" {
		ms = append(ms, m)
	}
	c.Spec.Mounts = ms
}
