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
	// Engine names who made an engine host tmpfs: EngineDocker,
	// EngineContainerdCRI or EngineCRIO (CRI-O and Podman share the layout).
	Engine string
	// OwnerID is the id in the host path: the Docker container that owns
	// the shareable IPC, or the pod sandbox.
	OwnerID string
}

// The engines whose host-side /dev/shm gpurun knows: the values of
// Shm.Engine and Pod.Engine.
const (
	// EngineDocker is dockerd (shareable IPC and the containers that join it).
	EngineDocker = "docker"
	// EngineContainerdCRI is containerd's CRI plugin (Kubernetes pods).
	EngineContainerdCRI = "containerd-cri"
	// EngineCRIO is CRI-O, and Podman, which shares containers/storage's
	// layout with it.
	EngineCRIO = "cri-o"
)

// ShmLayout is where an engine mounts, on the host, the tmpfs that a pod's
// containers or a shareable container's IPC group share at /dev/shm:
// <root>/<Dir>/<owner id>/<Suffix>, root being the engine's own directory
// (RootName). It is the one table of these layouts: classification
// (ClassifyShm), the dirs an engine names for a container (engine/dirs),
// resize and the docker translator all read it.
type ShmLayout struct {
	// Engine is EngineDocker, EngineContainerdCRI or EngineCRIO.
	Engine string
	// RootName names the engine's root in messages: "dockerd" (its
	// data-root), "containerd" (its state dir), "containers/storage" (the
	// graph root of Podman, the run root of CRI-O).
	RootName string
	// Dir is the path from the root to the owners' directories, Suffix
	// the path from an owner's directory to the tmpfs.
	Dir, Suffix string
	// Files is the path from an owner's directory to where the engine
	// keeps the other files it binds into the container (its hostname,
	// hosts and resolv.conf); "" for the owner's directory itself.
	Files string
	// hexOwner says owners are container ids (12 to 64 lower-case hex
	// digits); otherwise they are containerd identifiers (sandbox ids).
	hexOwner bool
}

// ShmLayouts returns the engines' layouts, in the order they are tried.
func ShmLayouts() []ShmLayout {
	return []ShmLayout{
		{Engine: EngineDocker, RootName: "dockerd", Dir: "containers", Suffix: "mounts/shm", hexOwner: true},
		{Engine: EngineContainerdCRI, RootName: "containerd", Dir: "io.containerd.grpc.v1.cri/sandboxes", Suffix: "shm"},
		{Engine: EngineCRIO, RootName: "containers/storage", Dir: "overlay-containers", Suffix: "userdata/shm", Files: "userdata", hexOwner: true},
	}
}

// LayoutOf returns an engine's layout.
func LayoutOf(engine string) (ShmLayout, bool) {
	for _, l := range ShmLayouts() {
		if l.Engine == engine {
			return l, true
		}
	}
	return ShmLayout{}, false
}

// Path is the tmpfs the engine mounts for owner under root.
func (l ShmLayout) Path(root, owner string) string {
	return path.Join(root, l.Dir, owner, l.Suffix)
}

// ValidOwner reports whether id can name an owner's directory.
func (l ShmLayout) ValidOwner(id string) bool {
	if l.hexOwner {
		return IsContainerID(id)
	}
	return IsSandboxID(id)
}

// Root returns the engine root of a tmpfs path in this layout: the part
// before /<Dir>/<owner>/<Suffix>, with a valid owner.
func (l ShmLayout) Root(source string) (string, bool) {
	rest, owner, ok := l.split(path.Clean(source), l.Dir)
	if !ok || rest == "" || !l.ValidOwner(owner) {
		return "", false
	}
	return rest, true
}

// split cuts <rest>/<dir>/<owner>/<Suffix> into rest and owner.
func (l ShmLayout) split(src, dir string) (rest, owner string, ok bool) {
	r, ok := strings.CutSuffix(src, "/"+l.Suffix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(r, '/')
	if i < 0 {
		return "", "", false
	}
	rest, ok = strings.CutSuffix(r[:i], "/"+dir)
	return rest, r[i+1:], ok
}

// IsContainerID reports whether s is a Docker, CRI-O or Podman container id
// as they name dirs: 12 to 64 lower-case hex digits.
func IsContainerID(s string) bool {
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

// IsSandboxID reports whether s is a valid containerd identifier (what a
// sandbox dir is named): letters and digits joined by single '.', '_' or
// '-', at most 76 bytes — one clean path element. (A loop, not a regular
// expression: the shim is a new process for every container, and would
// compile it every time.)
func IsSandboxID(s string) bool {
	if s == "" || len(s) > 76 {
		return false
	}
	sep := true // at the start, as after a separator
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isAlnum(c):
			sep = false
		case c == '.' || c == '_' || c == '-':
			if sep {
				return false
			}
			sep = true
		default:
			return false
		}
	}
	return !sep
}

// HostShmPaths are the host's own POSIX shared memory directories, which
// gpurun never resizes.
func HostShmPaths() []string { return []string{"/dev/shm", "/run/shm"} }

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
// a container's or pod's /dev/shm, and which engine and owner id. It
// matches the last element of each layout's Dir (an engine whose state
// dir sits elsewhere still shows its layout); where the engine itself
// named its root, engine/dirs checks the whole path.
func EngineHostShm(source string) (engine, owner string, ok bool) {
	src := path.Clean(source)
	for _, l := range ShmLayouts() {
		if _, owner, ok := l.split(src, path.Base(l.Dir)); ok && l.ValidOwner(owner) {
			return l.Engine, owner, true
		}
	}
	return "", "", false
}

// EngineFile reports whether a path is one of the files an engine keeps
// for a container or pod and binds into it — its hostname, hosts or
// resolv.conf, in the owner's directory of the engine's layout — and
// which engine. Like EngineHostShm it matches the last element of each
// layout's Dir. Doctor takes such a bind at /etc/hostname as proof that it
// runs in a container.
func EngineFile(source string) (engine string, ok bool) {
	src := path.Clean(source)
	switch path.Base(src) {
	case "hostname", "hosts", "resolv.conf":
	default:
		return "", false
	}
	for _, l := range ShmLayouts() {
		dir := path.Dir(src)
		if l.Files != "" {
			if dir, ok = strings.CutSuffix(dir, "/"+l.Files); !ok {
				continue
			}
		}
		if path.Base(path.Dir(dir)) == path.Base(l.Dir) && l.ValidOwner(path.Base(dir)) {
			return l.Engine, true
		}
	}
	return "", false
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
		case slices.Contains(HostShmPaths(), src):
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
	// Engine is EngineContainerdCRI, EngineCRIO or "" when no CRI
	// annotation says.
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
		return Pod{Sandbox: t == "sandbox", SandboxID: a[AnnotationCRIOSandboxID], Engine: EngineCRIO,
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
