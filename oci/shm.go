package oci

import (
	"path"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/policy"
)

// ShmPath is where containers find POSIX shared memory.
const ShmPath = "/dev/shm"

// ShmKind says what a container's /dev/shm is.
type ShmKind string

// The values of ShmKind.
const (
	// ShmNone: the spec mounts nothing at /dev/shm.
	ShmNone ShmKind = "none"
	// ShmPrivate: the engine's own tmpfs, mounted in the container's mount
	// namespace (Docker IPC private/none, ctr, nerdctl, Podman).
	ShmPrivate ShmKind = "private-tmpfs"
	// ShmEngine: a bind of a tmpfs the engine mounted on the host for a
	// pod or a shareable container (containerd CRI sandbox, Docker
	// shareable and container:<id>, CRI-O/Podman userdata/shm).
	ShmEngine ShmKind = "engine-host-tmpfs"
	// ShmHost: a bind of the host's /dev/shm (hostIPC, --ipc=host).
	ShmHost ShmKind = "host"
	// ShmUser: the user's own mount (--tmpfs /dev/shm, a volume, a bind, a
	// Kubernetes emptyDir).
	ShmUser ShmKind = "user-mount"
)

// Shm describes a spec's /dev/shm.
type Shm struct {
	Kind ShmKind
	// Index is the position in spec.Mounts of the mount that wins at
	// /dev/shm (the last one), -1 for ShmNone.
	Index int
	// Type and Source are that mount's.
	Type, Source string
	// Size is the tmpfs size from its options, 0 when the spec does not
	// say (binds) or unknown.
	Size int64
	// SizeInKiB is true when the size option was written in kibibytes
	// ("size=65536k"), so a rewrite can keep the engine's style.
	SizeInKiB bool
	// Engine names who made an engine host tmpfs: "docker",
	// "containerd-cri" or "cri-o" (CRI-O and Podman share the layout).
	Engine string
	// OwnerID is the id in the host path: the Docker container that owns
	// the shareable IPC, or the pod sandbox.
	OwnerID string
}

// engineShmLayout is a host path where an engine mounts a pod's or a
// shareable container's /dev/shm: <anything>/<dir>/<owner id>/<suffix>.
type engineShmLayout struct {
	engine, dir, suffix string
	owner               func(string) bool
}

// engineShmLayouts are the engines' layouts, in the order they are tried.
func engineShmLayouts() [3]engineShmLayout {
	return [...]engineShmLayout{
		{"docker", "containers", "mounts/shm", isContainerID},
		{EngineContainerdCRI, "sandboxes", "shm", isSandboxID},
		{"cri-o", "overlay-containers", "userdata/shm", isContainerID},
	}
}

// isContainerID reports whether s is a Docker, CRI-O or Podman container id
// as they name dirs: 12 to 64 lower-case hex digits.
func isContainerID(s string) bool {
	if len(s) < 12 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}

// isSandboxID reports whether s can be a containerd sandbox dir's name:
// letters, digits, '_', '.' and '-'.
func isSandboxID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return s != ""
}

// hostShmPaths are the host's own POSIX shared memory directories.
var hostShmPaths = []string{"/dev/shm", "/run/shm"}

// IsBind reports whether an OCI mount is a bind mount.
func IsBind(m specs.Mount) bool {
	if m.Type == "bind" || m.Type == "rbind" {
		return true
	}
	return slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// SizeOption returns the value of the last "size=" option and its index.
func SizeOption(options []string) (string, int) {
	for i := len(options) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(options[i], "size="); ok {
			return v, i
		}
	}
	return "", -1
}

// EngineContainerdCRI is Shm.Engine's and Pod.Engine's name for
// containerd's CRI plugin.
const EngineContainerdCRI = "containerd-cri"

// WithSizeOption returns a copy of a mount's options with its last "size="
// option replaced by n bytes (policy.MountSizeOption's form), or one added.
func WithSizeOption(options []string, n int64, inKiB bool) []string {
	opts := slices.Clone(options)
	opt := policy.MountSizeOption(n, inKiB)
	if _, i := SizeOption(opts); i >= 0 {
		opts[i] = opt
		return opts
	}
	return append(opts, opt)
}

// EngineHostShm reports whether a host path is a tmpfs an engine made for
// a container's or pod's /dev/shm, and which engine and owner id.
func EngineHostShm(source string) (engine, owner string, ok bool) {
	src := path.Clean(source)
	for _, l := range engineShmLayouts() {
		rest, ok := strings.CutSuffix(src, "/"+l.suffix)
		if !ok {
			continue
		}
		i := strings.LastIndexByte(rest, '/')
		if i < 0 || !l.owner(rest[i+1:]) || !strings.HasSuffix(rest[:i], "/"+l.dir) {
			continue
		}
		return l.engine, rest[i+1:], true
	}
	return "", "", false
}

// ClassifyShm says what the spec mounts at /dev/shm. Mounts are applied in
// order, so the last one at /dev/shm is the one the container sees
// (containerd 1.6 gives the pause container a tmpfs and a bind on top).
// hostMemory (0 = unknown) resolves a tmpfs without a size option, whose
// kernel default is half of the host's memory.
func ClassifyShm(s *specs.Spec, hostMemory int64) Shm {
	idx := -1
	for i, m := range s.Mounts {
		if path.Clean(m.Destination) == ShmPath {
			idx = i
		}
	}
	if idx < 0 {
		return Shm{Kind: ShmNone, Index: -1}
	}
	m := s.Mounts[idx]
	sh := Shm{Index: idx, Type: m.Type, Source: m.Source}
	if IsBind(m) {
		src := path.Clean(m.Source)
		switch {
		case slices.Contains(hostShmPaths, src):
			sh.Kind = ShmHost
		default:
			if engine, owner, ok := EngineHostShm(src); ok {
				sh.Kind, sh.Engine, sh.OwnerID = ShmEngine, engine, owner
			} else {
				sh.Kind = ShmUser
			}
		}
		return sh
	}
	if m.Type == "tmpfs" || (m.Type == "" && m.Source == "tmpfs") {
		// Engines name their own tmpfs "shm"; Docker's --tmpfs and
		// Kubernetes name theirs "tmpfs".
		if m.Source == "shm" {
			sh.Kind = ShmPrivate
		} else {
			sh.Kind = ShmUser
		}
		if v, _ := SizeOption(m.Options); v != "" {
			if n, err := policy.ParseMountSize(v, hostMemory); err == nil {
				sh.Size = n
				sh.SizeInKiB = strings.HasSuffix(v, "k")
			}
		} else if hostMemory > 0 {
			sh.Size = hostMemory / 2 // the kernel's tmpfs default
		}
		return sh
	}
	sh.Kind = ShmUser
	return sh
}

// Pod says where a spec sits in a pod.
type Pod struct {
	// Sandbox is true for a pod's sandbox (pause) container.
	Sandbox bool
	// SandboxID is the pod sandbox id where an engine says it.
	SandboxID string
	// Engine is "containerd-cri", "cri-o" or "" when no CRI annotation says.
	Engine string
	// Namespace, Name and UID name the Kubernetes pod, and Container the
	// container in its spec, where the engine's annotations say ("" where
	// not).
	Namespace, Name, UID, Container string
}

// CRIPod reads the CRI annotations containerd and CRI-O set.
func CRIPod(s *specs.Spec) Pod {
	a := s.Annotations
	if t, ok := a[AnnotationCRIContainerType]; ok {
		return Pod{Sandbox: t == "sandbox", SandboxID: a[AnnotationCRISandboxID], Engine: EngineContainerdCRI,
			Namespace: a[AnnotationCRISandboxNamespace], Name: a[AnnotationCRISandboxName], UID: a[AnnotationCRISandboxUID], Container: a[AnnotationCRIContainerName]}
	}
	if t, ok := a[AnnotationCRIOContainerType]; ok {
		return Pod{Sandbox: t == "sandbox", SandboxID: a[AnnotationCRIOSandboxID], Engine: "cri-o",
			Namespace: a[AnnotationCRIOPodNamespace], Name: a[AnnotationCRIOPodName], UID: a[AnnotationCRIOPodUID], Container: a[AnnotationCRIOContainerName]}
	}
	return Pod{}
}

// MemoryLimit returns the spec's memory limit in bytes, 0 for none.
func MemoryLimit(s *specs.Spec) int64 {
	if s.Linux == nil || s.Linux.Resources == nil || s.Linux.Resources.Memory == nil || s.Linux.Resources.Memory.Limit == nil {
		return 0
	}
	if l := *s.Linux.Resources.Memory.Limit; l > 0 {
		return l
	}
	return 0
}

// HasPrivateIPC reports whether the spec creates a new IPC namespace (no
// path), rather than joining a pod's, a donor's or the host's.
func HasPrivateIPC(s *specs.Spec) bool {
	if s.Linux == nil {
		return false
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.IPCNamespace {
			return ns.Path == ""
		}
	}
	return false
}

// ShmMount is the tmpfs engines give a container at /dev/shm, of the given size.
func ShmMount(size int64) specs.Mount {
	return specs.Mount{
		Destination: ShmPath,
		Type:        "tmpfs",
		Source:      "shm",
		Options:     []string{"nosuid", "noexec", "nodev", "mode=1777", policy.MountSizeOption(size, false)},
	}
}
