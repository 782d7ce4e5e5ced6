// Package dirs learns where an engine keeps the tmpfs it made for a
// container's shared /dev/shm from what the engine itself says about that
// container: the bundle path it hands the runtime or the hook, the sandbox
// id it writes into the spec, the mounts and pod id it gives an NRI plugin,
// and dockerd's data-root as `gpurun install docker` passes it in the
// runtime's runtimeArgs. Many GPU hosts move these directories to a big
// disk; a list of the usual places (the policy's engine_roots) is only the
// fallback where an engine named nothing.
//
// The layouts, as the engines' sources build them:
//
//   - containerd 1.6, 1.7 and 2.x: a task's bundle is
//     <state>/io.containerd.runtime.v2.task/<namespace>/<id> and a pod's
//     /dev/shm the tmpfs <state>/io.containerd.grpc.v1.cri/sandboxes/<sandbox id>/shm
//     (the CRI plugin's state dir is named io.containerd.grpc.v1.cri in 2.x too);
//   - Podman and CRI-O (containers/storage, overlay driver): the bundle is
//     <root>/overlay-containers/<id>/userdata — Podman's graph root, CRI-O's
//     run root — and /dev/shm the tmpfs userdata/shm of the container itself
//     or of its pod's infra container (CRI-O: the sandbox id);
//   - dockerd: --ipc shareable and its container:<id> peers bind
//     <data-root>/containers/<donor id>/mounts/shm; the bundle does not show
//     the data-root, so gpurun-runtime is told it (DockerRootFlag).
package dirs

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/oci"
)

// Directory names of the engines' layouts.
const (
	// ContainerdTaskDir holds containerd's task bundles under its state
	// dir: <state>/io.containerd.runtime.v2.task/<namespace>/<id>.
	ContainerdTaskDir = "io.containerd.runtime.v2.task"
	// StorageContainersDir holds containers/storage's per-container dirs
	// (overlay driver) under Podman's graph root and CRI-O's run root.
	StorageContainersDir = "overlay-containers"
	// DockerRootFlag is gpurun-runtime's own flag naming dockerd's
	// data-root ("--gpurun-docker-data-root=/var/lib/docker"). `gpurun
	// install docker` writes it into the runtime's runtimeArgs in
	// daemon.json: dockerd passes runtimeArgs on every call, ahead of its
	// own arguments, so the engine itself names its data-root to the shim,
	// which removes the flag before it execs the low-level runtime.
	DockerRootFlag = "--gpurun-docker-data-root"
)

// ErrNotNamed is wrapped when a container's /dev/shm binds a host tmpfs
// other than the one its engine named for it.
var ErrNotNamed = errors.New("not the tmpfs the engine named for this container")

// ErrUnknownRoot is wrapped (with ErrNotNamed) when an NRI request's
// /dev/shm has the engine's layout under a directory that is not one of
// the known engine dirs, and nothing proves it the pod's.
var ErrUnknownRoot = errors.New("not under an engine dir gpurun knows")

// ErrStaleRoot is matched (with ErrNotNamed) by a *StaleRootError: the
// data-root gpurun-runtime was told is not the one dockerd keeps the
// container's /dev/shm under.
var ErrStaleRoot = errors.New("the data-root gpurun-runtime was told is not dockerd's")

// StaleRootError is a Docker container whose /dev/shm is a tmpfs in
// dockerd's layout under another data-root than the one gpurun-runtime
// was told (DockerRootFlag): dockerd moved its data-root, or took up
// userns-remap, after gpurun install told gpurun-runtime where it was.
type StaleRootError struct {
	// Told is the data-root gpurun-runtime was told; Found the one the
	// container's /dev/shm is under.
	Told, Found string
	// Source is the tmpfs the container's /dev/shm binds.
	Source string
}

func (e *StaleRootError) Error() string {
	return fmt.Sprintf("%v: /dev/shm binds %s, under data-root %s; gpurun-runtime was told data-root %s (%v)", ErrNotNamed, e.Source, e.Found, e.Told, ErrStaleRoot)
}

// Unwrap returns ErrNotNamed and ErrStaleRoot, so that errors.Is matches
// both.
func (e *StaleRootError) Unwrap() []error { return []error{ErrNotNamed, ErrStaleRoot} }

// Dirs are the directories an engine named for one container. The zero
// value names nothing.
type Dirs struct {
	// ContainerdState is containerd's state dir, from a bundle at
	// <state>/io.containerd.runtime.v2.task/<namespace>/<id>.
	ContainerdState string
	// StorageRoot is the containers/storage root of a bundle at
	// <root>/overlay-containers/<id>/userdata: Podman's graph root or
	// CRI-O's run root.
	StorageRoot string
	// DockerRoot is dockerd's data-root, as dockerd passed it to
	// gpurun-runtime (DockerRootFlag).
	DockerRoot string
	// PodID is the pod sandbox id as the engine's own API gave it (NRI's
	// pod); it wins over the spec's sandbox-id annotation.
	PodID string
	// FromMounts says the container's mounts come from the engine itself
	// (an NRI request): the root is read from the bind's source, which must
	// have the engine's layout for PodID. A mount's source is the pod spec's
	// word as much as the engine's (a hostPath volume at /dev/shm looks
	// the same), so the root read from it must also be vouched for: it is
	// one of Roots, or the tmpfs is proved to be the pod's by PodShm.
	FromMounts bool
	// Roots are the engine dirs a root read from the mounts may be without
	// proof (FromMounts): the policy's engine_roots, which list where
	// containerd, k3s and CRI-O keep their state by default.
	Roots []string
	// PodShm is the pod sandbox's own /dev/shm as the host sees it,
	// /proc/<sandbox pid>/root/dev/shm, from the pid the runtime gave
	// (NRI's PodSandbox.Pid); "" when it gave none. A tmpfs under a root
	// not in Roots is remounted only if it is that filesystem (Confirm).
	PodShm string
}

// FromBundle returns what a bundle path names: containerd's state dir for
// <state>/io.containerd.runtime.v2.task/<namespace>/<id>, the storage root
// for <root>/overlay-containers/<id>/userdata. id, when not "", is the
// container id the engine gave with the bundle, and must be the bundle's.
// A path that is not absolute and clean, or of another shape, names
// nothing.
func FromBundle(bundle, id string) Dirs {
	var d Dirs
	if !filepath.IsAbs(bundle) || filepath.Clean(bundle) != bundle {
		return d
	}
	base := filepath.Base(bundle)
	nsDir := filepath.Dir(bundle)
	taskDir := filepath.Dir(nsDir)
	if filepath.Base(taskDir) == ContainerdTaskDir && oci.IsSandboxID(filepath.Base(nsDir)) && oci.IsSandboxID(base) && (id == "" || id == base) {
		d.ContainerdState = filepath.Dir(taskDir)
	}
	if base == "userdata" {
		ctrDir := filepath.Dir(bundle)
		owner := filepath.Base(ctrDir)
		listDir := filepath.Dir(ctrDir)
		if filepath.Base(listDir) == StorageContainersDir && oci.IsContainerID(owner) && (id == "" || id == owner) {
			d.StorageRoot = filepath.Dir(listDir)
		}
	}
	return d
}

// ForPod returns the dirs an NRI request names: the pod's id; the root is
// read from the container's mounts, and must be one of roots (the policy's
// engine_roots) or be proved by the pod sandbox's pid (0: none given).
func ForPod(podID string, sandboxPid uint32, roots []string) Dirs {
	d := Dirs{PodID: podID, FromMounts: true, Roots: roots}
	if sandboxPid > 0 {
		d.PodShm = fmt.Sprintf("/proc/%d/root/dev/shm", sandboxPid)
	}
	return d
}

// trusted reports whether root is one of d.Roots, as written or with the
// root's own symbolic links resolved (/var/run is often a link to /run).
func (d Dirs) trusted(root string) bool {
	for _, r := range d.Roots {
		c := filepath.Clean(r)
		if c == "/" {
			continue
		}
		if c == root {
			return true
		}
		if res, err := filepath.EvalSymlinks(c); err == nil && res == root {
			return true
		}
	}
	return false
}

// Confirm returns the path whose filesystem the tmpfs that Shm named for
// sh must be, or "" when the name needs no proof: for an NRI request
// whose root, read from the mounts, is not one of Roots, the pod
// sandbox's own /dev/shm (PodShm). The remount checks it on the directory
// it opens (remount.Scope.SameAs).
func (d Dirs) Confirm(sh oci.Shm) string {
	l, ok := oci.LayoutOf(sh.Engine)
	if !ok || !d.FromMounts || sh.Engine == oci.EngineDocker {
		return ""
	}
	switch {
	case sh.Engine == oci.EngineContainerdCRI && d.ContainerdState != "", sh.Engine == oci.EngineCRIO && d.StorageRoot != "":
		return ""
	}
	root, err := rootOf(sh.Source, l)
	if err != nil || d.trusted(root) {
		return ""
	}
	return d.PodShm
}

// Shm says which host tmpfs the engine named for a container whose
// /dev/shm is sh (an engine-host-tmpfs) in pod:
//
//   - the path and true when the engine named dirs for sh's kind of tmpfs
//     and sh.Source is exactly the tmpfs they give this container;
//   - "" and false when it named nothing for that kind (a bundle of another
//     shape, a dockerd that did not pass its data-root): the caller falls
//     back to the policy's engine_roots;
//   - an error wrapping ErrNotNamed when it named dirs and sh.Source is not
//     that tmpfs: under another root, another pod's sandbox, not clean; a
//     *StaleRootError (ErrStaleRoot) for a Docker tmpfs under another
//     data-root than gpurun-runtime was told.
//
// The exact tmpfs is <containerd state>/io.containerd.grpc.v1.cri/sandboxes/<sandbox
// id>/shm for containerd (the sandbox id from NRI's pod, else the spec's
// io.kubernetes.cri.sandbox-id); <root>/overlay-containers/<id>/userdata/shm
// for Podman and CRI-O (CRI-O and Podman pods: the sandbox id; a Podman
// container outside a pod: any container's, its own or a donor's, since
// the spec names neither); <data-root>/containers/<id>/mounts/shm for
// dockerd (any container's: a peer's spec does not name its donor).
func (d Dirs) Shm(sh oci.Shm, pod oci.Pod) (string, bool, error) {
	l, ok := oci.LayoutOf(sh.Engine)
	if !ok || sh.Kind != oci.ShmEngine {
		return "", false, nil
	}
	var root string
	switch sh.Engine {
	case oci.EngineContainerdCRI:
		root = d.ContainerdState
	case oci.EngineCRIO:
		root = d.StorageRoot
	case oci.EngineDocker:
		root = d.DockerRoot
	}
	if root == "" && d.FromMounts && sh.Engine != oci.EngineDocker {
		r, err := rootOf(sh.Source, l)
		if err != nil {
			return "", true, err
		}
		if !d.trusted(r) && d.PodShm == "" {
			return "", true, fmt.Errorf("%w (%w): /dev/shm binds %s, under %s, which is not a %s dir in engine_roots, and the runtime gave no pod sandbox pid to prove the tmpfs is the pod's", ErrNotNamed, ErrUnknownRoot, sh.Source, r, l.RootName)
		}
		root = r
	}
	if root == "" {
		return "", false, nil
	}
	owner, err := d.owner(sh, pod, l)
	if err != nil {
		return "", true, err
	}
	want := l.Path(root, owner)
	if sh.Source != want {
		if found, err := rootOf(sh.Source, l); err == nil && found != root && sh.Engine == oci.EngineDocker {
			return "", true, &StaleRootError{Told: root, Found: found, Source: sh.Source}
		}
		return "", true, fmt.Errorf("%w: /dev/shm binds %s; %s named %s", ErrNotNamed, sh.Source, l.RootName, want)
	}
	return want, true, nil
}

// owner returns the sandbox or container id whose tmpfs the container may
// grow.
func (d Dirs) owner(sh oci.Shm, pod oci.Pod, l oci.ShmLayout) (string, error) {
	id := d.PodID
	if id == "" && pod.Engine == sh.Engine {
		id = pod.SandboxID
	}
	switch {
	case id != "":
		if !oci.IsSandboxID(id) {
			return "", fmt.Errorf("%w: sandbox id %q is not one %s gives", ErrNotNamed, id, l.RootName)
		}
		return id, nil
	case sh.Engine == oci.EngineContainerdCRI:
		return "", fmt.Errorf("%w: /dev/shm binds %s, but containerd names no pod sandbox for this container", ErrNotNamed, sh.Source)
	case !oci.IsContainerID(sh.OwnerID):
		return "", fmt.Errorf("%w: %q in %s is not a container id", ErrNotNamed, sh.OwnerID, sh.Source)
	}
	return sh.OwnerID, nil
}

// rootOf returns the root of source in layout l: the part before
// /<Dir>/<owner>/<Suffix>.
func rootOf(source string, l oci.ShmLayout) (string, error) {
	if root, ok := l.Root(source); ok {
		return root, nil
	}
	return "", fmt.Errorf("%w: /dev/shm binds %s, which is not where %s makes a pod's /dev/shm (…/%s/<id>/%s)", ErrNotNamed, source, l.RootName, l.Dir, l.Suffix)
}

// Root returns the engine directory a shared /dev/shm tmpfs lies under in
// its engine's layout — containerd's state dir, the storage root, dockerd's
// data-root — or "" when source has no such layout. It names the directory
// in messages and fixes.
func Root(sh oci.Shm) string {
	l, ok := oci.LayoutOf(sh.Engine)
	if !ok {
		return ""
	}
	r, err := rootOf(sh.Source, l)
	if err != nil {
		return ""
	}
	return r
}

// CheckDockerRoot returns an error when root cannot be passed to
// gpurun-runtime in daemon.json's runtimeArgs: dockerd writes runtimeArgs
// into a shell script, joined by spaces and unquoted, so only an absolute,
// clean path of plain characters survives it.
func CheckDockerRoot(root string) error {
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return fmt.Errorf("data-root %q is not a clean absolute path", root)
	}
	for _, r := range root {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+@:,", r)) {
			return fmt.Errorf("data-root %q has %q, which dockerd's runtime wrapper script (runtimeArgs joined unquoted) would not pass through", root, r)
		}
	}
	return nil
}

// KubeletEmptyDirPlugin is the directory of the kubelet's emptyDir volumes
// in a pod's directory: <kubelet root>/pods/<pod uid>/volumes/<plugin>/<name>.
const KubeletEmptyDirPlugin = "kubernetes.io~empty-dir"

// PodEmptyDir reports whether source, a bind's host path, is an emptyDir
// volume the kubelet made for the pod with uid podUID:
// <kubelet root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>, any
// kubelet root (the kubelet's --root-dir; k3s and RKE2 keep the default),
// absolute and clean. The uid ties it to this pod: another pod's, or a
// hostPath of the same shape, is not it.
func PodEmptyDir(source, podUID string) bool {
	if podUID == "" || !filepath.IsAbs(source) || filepath.Clean(source) != source {
		return false
	}
	plugin := filepath.Dir(source)
	volumes := filepath.Dir(plugin)
	uid := filepath.Dir(volumes)
	return filepath.Base(plugin) == KubeletEmptyDirPlugin && filepath.Base(volumes) == "volumes" &&
		filepath.Base(uid) == podUID && filepath.Base(filepath.Dir(uid)) == "pods" && filepath.Base(source) != ".."
}

// PodShmDir returns the host tmpfs that is the pod's /dev/shm for a
// container of pod whose /dev/shm is sh, as far as the engine named it:
// the sandbox's tmpfs the engine made for exactly this pod (Shm), or a
// Memory emptyDir the kubelet made for it (PodEmptyDir; the admission
// webhook's, KubeRay's). false for anything else: a container outside a
// pod, the pod's sandbox, the host's /dev/shm, another pod's or a
// container's own tmpfs, a path the engine did not name.
func (d Dirs) PodShmDir(sh oci.Shm, pod oci.Pod) (string, bool) {
	if pod.Sandbox || pod.SandboxID == "" {
		return "", false
	}
	switch sh.Kind {
	case oci.ShmEngine:
		if sh.Engine != pod.Engine {
			return "", false
		}
		named, ok, err := d.Shm(sh, pod)
		if !ok || err != nil {
			return "", false
		}
		// A tmpfs under a root the policy does not list is the pod's only
		// when it is the filesystem the pod's sandbox sees at /dev/shm.
		if proof := d.Confirm(sh); proof != "" && !sameFilesystem(named, proof) {
			return "", false
		}
		return named, true
	case oci.ShmUser:
		return sh.Source, sh.Type == "bind" && PodEmptyDir(sh.Source, pod.UID)
	}
	return "", false
}

// sameFilesystem reports whether the directories a and b are on one
// filesystem (their device numbers), false when either cannot be read.
func sameFilesystem(a, b string) bool {
	var x, y unix.Stat_t
	return unix.Stat(a, &x) == nil && unix.Stat(b, &y) == nil && x.Dev == y.Dev
}
