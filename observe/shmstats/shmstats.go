// Package shmstats finds every running container of dockerd, containerd
// (every namespace, Kubernetes' k8s.io and dockerd's moby included) and
// Podman on a host, and reads its /dev/shm from the host side: the size and
// the bytes in use (statfs of /proc/<pid>/root/dev/shm, never an exec into
// the container), which containers share one tmpfs (its device number),
// whether it is the host's own /dev/shm, the highest use gpurun has seen
// (Peaks), the bytes held by files no live process has open or mapped
// (Orphans), what gpurun decides for the container (oci.Decide over the
// container's own runtime spec, the one translation every front door uses)
// and, where the measured peak and the size disagree, the size that would
// fit and the setting that gives it (Suggest).
//
// Containers are found from what the engines keep on the host:
//
//   - containerd: <state>/io.containerd.runtime.v2.task/<namespace>/<id>/
//     config.json and init.pid, for each state dir in Options.Containerd;
//   - dockerd: the Docker Engine API (names, IPC mode, --shm-size) for the
//     containers whose bundles lie in the moby namespace of one of those
//     state dirs, or, where the bundle is not found, a spec built from
//     docker inspect (translate.FromInspect);
//   - Podman: <root>/overlay-containers/<id>/userdata/config.json under each
//     storage root in Options.Podman, its pidfile and containers.json.
package shmstats

import (
	"context"

	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/policy/remedy"
)

// Engine names, as Container.Engine gives them: remedy's, which turns them
// into a container's front door (remedy.WhereFor).
const (
	EngineDocker     = remedy.EngineDocker
	EngineContainerd = remedy.EngineContainerd
	EnginePodman     = remedy.EnginePodman
)

// Options say where to look and what to compute. The zero value looks in
// the usual places of this host.
type Options struct {
	// HostRoot is where the node's root is mounted when gpurun runs in a
	// pod ("/host"); "" means this host. Paths below are node paths, read
	// under HostRoot; /proc is this process's (the pod runs with hostPID).
	HostRoot string
	// Docker is dockerd's endpoint ("unix:///run/docker.sock", "tcp://…");
	// "" means DOCKER_HOST or the default socket, and a dockerd that does
	// not answer there is skipped without an error; "none" skips dockerd.
	// An endpoint given explicitly that does not answer is an error.
	Docker string
	// Containerd are containerd state dirs; nil means DefaultContainerdStates.
	// A state dir that does not exist is skipped without an error.
	Containerd []string
	// Podman are containers/storage roots of Podman: graph roots (which
	// hold each container's userdata/config.json and shm) and run roots
	// (which hold userdata/pidfile); nil means DefaultPodmanRoots, an empty
	// non-nil slice skips Podman.
	Podman []string
	// Policy says what gpurun decides; nil means the node's policy file or,
	// without one, the defaults.
	Policy *policy.Policy
	// Orphans computes Shm.Orphaned: it walks each tmpfs and every
	// process's open files and memory maps under /proc, which costs far
	// more than the rest. `gpurun stats` does; a sampler may not.
	Orphans bool
	// Peaks is the peak store Collect updates with each Used it reads and
	// from which it fills Shm.Peak; nil keeps no peaks (Peak = Used).
	Peaks *Peaks
	// DockerClient, when set, is used instead of a client for Docker's
	// endpoint.
	DockerClient DockerAPI
	// Proc is where this process's procfs is mounted; "" means "/proc".
	Proc string
	// SweepState is the restart sweep's records dir, a node path read
	// under HostRoot ("" means engine/shmsweep's default).
	SweepState string
	// Specs, when set, keeps the containers' specs between Collects
	// (a sampler's, `stats --watch`): nil reads every config.json each
	// time.
	Specs *Specs
	// Cgroup is the node's cgroup filesystem as this process reaches it,
	// where each container's memory cgroup is read; "" means
	// /sys/fs/cgroup under HostRoot. The NRI plugin, which has no /host,
	// passes its --cgroup-root (its DaemonSet mounts the node's cgroups at
	// /host/sys/fs/cgroup).
	Cgroup string
}

// Container is one running container and its /dev/shm, as Collect found it.
// Its JSON form is what `gpurun stats --json` prints, one array of them;
// the field names are stable.
type Container struct {
	// Engine is EngineDocker, EngineContainerd or EnginePodman.
	Engine string `json:"engine"`
	// Namespace is the containerd namespace ("k8s.io", "moby", "default");
	// "" for Podman.
	Namespace string `json:"namespace,omitempty"`
	// ID is the engine's full container id.
	ID string `json:"id"`
	// Name is the engine's name for it (Docker's and Podman's name, a
	// Kubernetes container's name); "" when the engine gives none.
	Name string `json:"name,omitempty"`
	// Pod is the Kubernetes pod the container belongs to, nil outside one.
	Pod *Pod `json:"pod,omitempty"`
	// PID is the container's init process, as this host's /proc numbers it.
	PID int `json:"pid"`
	// GPU says whether gpurun sees GPU evidence in the container's spec.
	GPU bool `json:"gpu"`
	// Decision is what gpurun decides for this container's /dev/shm.
	Decision Decision `json:"decision"`
	// Shm is the container's /dev/shm as the host sees it.
	Shm Shm `json:"shm"`
	// SharedWith are the ids of the other running containers on the same
	// tmpfs (an IPC group, a pod); empty when it is its own, and for the
	// host's /dev/shm.
	SharedWith []string `json:"shared_with,omitempty"`
	// Suggestion is the size the measured peak calls for, nil when the
	// size fits it (or when nothing was measured).
	Suggestion *Suggestion `json:"suggestion,omitempty"`
	// Memory is the container's memory cgroup beside its /dev/shm: the
	// limit, the usage, and /dev/shm's share of both; nil without a
	// process.
	Memory *Memory `json:"memory,omitempty"`
	// Err says what could not be read for this container (its /dev/shm
	// gone with a process that just exited, an unreadable spec); the rest
	// of the fields are as far as known.
	Err string `json:"error,omitempty"`
}

// Pod names a Kubernetes pod and the container's place in it, from the CRI
// annotations the engine writes into the spec.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
	// Container is the container's name in the pod spec.
	Container string `json:"container,omitempty"`
	// SandboxID is the pod sandbox's id.
	SandboxID string `json:"sandbox_id,omitempty"`
}

// Decision is oci.Decide's plan for the container as its engine made it
// (before any gpurun front door acted on it), in a JSON-friendly form.
type Decision struct {
	// Action is oci.Action's value: none, set-size, remount, inject,
	// ipc-host.
	Action string `json:"action"`
	// Applies says the policy applies to the container (oci.Plan.Applies).
	Applies bool `json:"applies"`
	// Size is the size the plan gives, in bytes; 0 where unknown.
	Size int64 `json:"size_bytes"`
	// Target is the size the policy gives this container, whatever the
	// action, and Why how it was reached.
	Target int64  `json:"target_bytes"`
	Why    string `json:"target_why,omitempty"`
	// Reason is why the action.
	Reason string `json:"reason"`
	// GPUs is the GPU count the plan went by, 0 when unknown.
	GPUs int `json:"gpus"`
	// InEffect says the container's /dev/shm, as read now, is what the plan
	// gives: at least Size (for none: the size it has), or the host's for
	// ipc-host. An acting plan in effect is one a gpurun front door carried
	// out; one not in effect was not (the container was not started through
	// gpurun, or the remount was refused).
	InEffect bool `json:"in_effect"`
}

// The values of Shm.Kind other than oci.ShmKind's.
const (
	// KindHost: the container's /dev/shm is the host's own (--ipc host,
	// hostIPC), found by its device number.
	KindHost = "host"
)

// Shm is a container's /dev/shm as the host sees it.
type Shm struct {
	// Kind is oci.ShmKind's value for the spec's /dev/shm
	// (private-tmpfs, engine-host-tmpfs, host, user-mount, none).
	Kind string `json:"kind"`
	// Device is the tmpfs's device number "major:minor"; containers with
	// the same Device share one tmpfs.
	Device string `json:"device,omitempty"`
	// Source is the host path of an engine-made tmpfs (a pod's sandbox
	// shm, Docker's shareable shm, Podman's userdata/shm), "" for one that
	// exists only in the container's mount namespace.
	Source string `json:"source,omitempty"`
	// HostIPC says /dev/shm is the host's own.
	HostIPC bool `json:"host_ipc"`
	// Tmpfs says the filesystem at /dev/shm is a tmpfs.
	Tmpfs bool `json:"tmpfs"`
	// Size and Used are statfs's, in bytes: the tmpfs's size and the
	// bytes its pages hold.
	Size int64 `json:"size_bytes"`
	Used int64 `json:"used_bytes"`
	// Peak is the highest Used gpurun has seen for this tmpfs (Options.Peaks),
	// at least Used.
	Peak int64 `json:"peak_bytes"`
	// Orphaned are the bytes (allocated blocks) of files in the tmpfs that
	// no live process has open or mapped; -1 when not computed
	// (Options.Orphans unset, or the walk failed).
	Orphaned int64 `json:"orphaned_bytes"`
	// OrphanedFiles names those files, as paths inside /dev/shm, at most
	// a few.
	OrphanedFiles []string `json:"orphaned_files,omitempty"`
	// SweptBytes and SweptFiles are what gpurun's node doors removed from
	// a pod's /dev/shm at its containers' restarts so far: the files dead
	// earlier instances left (the restart sweep's records, under
	// Options.SweepState); 0 outside a pod.
	SweptBytes int64 `json:"swept_bytes"`
	SweptFiles int64 `json:"swept_files"`
	// Percent is 100 × Used / Size, 0 for a size of 0.
	Percent float64 `json:"percent"`
}

// Suggestion is the /dev/shm size that holds a container's measured peak
// with headroom (see Suggest for the rule), and the settings that would
// give it.
type Suggestion struct {
	// Size is the suggested size in bytes.
	Size int64 `json:"size_bytes"`
	// Why says which case applies: near the ceiling, or far below it.
	Why string `json:"why"`
	// Settings are the ways to get it, best first: a pod annotation, a
	// docker run or compose option, a policy setting.
	Settings []string `json:"settings"`
}

// Collect returns every running container it finds, sorted by engine,
// namespace and id, and the errors of the engines it could not read, joined
// (each names its engine): one engine's failure does not hide the others'
// containers.
func Collect(ctx context.Context, o Options) ([]Container, error) {
	c := newCollector(o)
	return c.collect(ctx)
}
