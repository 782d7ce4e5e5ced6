// Package resize changes the size of a running container's /dev/shm in
// place, without a restart: a host-side remount for a tmpfs the engine
// mounted on the host (Docker shareable IPC, a CRI pod's sandbox shm), a
// remount inside the container's mount namespace for a tmpfs that exists
// only there (Docker private IPC). It changes nothing else: the engine's
// own record of the size (Docker's HostConfig.ShmSize) stays as it was.
package resize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/docker/translate"
	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/remount"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// Kind says from where a target's tmpfs is remounted.
type Kind string

// The values of Kind.
const (
	// HostTmpfs: a tmpfs the engine mounted on the host and bound into
	// the container(s); remounted at its host path.
	HostTmpfs Kind = "host-tmpfs"
	// Namespace: a tmpfs that exists only in the container's mount
	// namespace; remounted there, at /dev/shm.
	Namespace Kind = "namespace"
)

// Target is a running container's /dev/shm and the way to reach it.
type Target struct {
	Engine    string // "docker" or "cri"
	Container string // the container's full id
	Name      string // its name, for messages
	Kind      Kind
	// Path is the host path of the tmpfs (HostTmpfs) or its path inside
	// the container's mount namespace (Namespace).
	Path string
	// PID is a process in the container's mount namespace (Namespace).
	PID int
	// Named is the host tmpfs the engine itself named for the container
	// (HostTmpfs): <DockerRootDir>/containers/<donor id>/mounts/shm from
	// docker info, <CRI stateDir>/sandboxes/<sandbox id>/shm from
	// containerd's verbose status; "" when it named none.
	Named string
	// Roots are engine roots the engine itself reported, allowed in
	// addition to the policy's engine_roots when it named no tmpfs.
	Roots []string
	// SharedWith names the containers that see the same tmpfs, when
	// known (Docker IPC donor).
	SharedWith string
	// Note is what the user must know about the engine's record.
	Note string
}

// Docker is the part of the Docker Engine API client resize uses.
type Docker interface {
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	Info(ctx context.Context) (system.Info, error)
}

// DockerNote is said after every Docker resize.
const DockerNote = "Docker's own record (HostConfig.ShmSize) is unchanged: a restart of the container returns /dev/shm to its old size; recreate it with --shm-size (or run it with gpurun) to keep the new size"

// DockerTarget finds the /dev/shm of the running Docker container ref
// (a name or an id).
func DockerTarget(ctx context.Context, d Docker, ref string) (Target, error) {
	c, err := d.ContainerInspect(ctx, ref)
	if err != nil {
		return Target{}, fmt.Errorf("inspect container %s: %w", ref, err)
	}
	t := Target{Engine: "docker", Container: c.ID, Name: strings.TrimPrefix(c.Name, "/"), Note: DockerNote}
	if c.State == nil || !c.State.Running || c.State.Pid <= 0 {
		return t, fmt.Errorf("container %s is not running", ref)
	}
	if c.HostConfig == nil {
		return t, fmt.Errorf("container %s: inspect has no HostConfig", ref)
	}
	mode := c.HostConfig.IpcMode
	if mode.IsContainer() {
		donor := mode.Container()
		dt, err := DockerTarget(ctx, d, donor)
		if err != nil {
			return t, fmt.Errorf("container %s shares the IPC namespace of %s: %w", ref, donor, err)
		}
		dt.SharedWith = t.Name
		return dt, nil
	}
	root := ""
	if mode.IsShareable() {
		info, err := d.Info(ctx)
		if err != nil {
			return t, fmt.Errorf("docker info: %w", err)
		}
		if info.DockerRootDir == "" {
			return t, errors.New("docker info reports no DockerRootDir")
		}
		root = info.DockerRootDir
		l, _ := oci.LayoutOf(oci.EngineDocker)
		t.Roots = []string{filepath.Join(root, l.Dir)}
		t.Named = l.Path(root, c.ID)
	}
	form, err := translate.FromInspect(c, root, nil)
	if err != nil {
		return t, fmt.Errorf("container %s: %w", ref, err)
	}
	sh := oci.ClassifyShm(form.Spec, 0)
	switch sh.Kind {
	case oci.ShmEngine:
		t.Kind, t.Path = HostTmpfs, sh.Source
	case oci.ShmPrivate:
		t.Kind, t.Path, t.PID = Namespace, oci.ShmPath, c.State.Pid
	case oci.ShmUser:
		if sh.Type == "tmpfs" {
			// --tmpfs /dev/shm, --mount type=tmpfs: the container's own.
			t.Kind, t.Path, t.PID = Namespace, oci.ShmPath, c.State.Pid
			return t, nil
		}
		return t, fmt.Errorf("container %s mounts %s at /dev/shm, not a tmpfs Docker made; gpurun resizes only engine-made tmpfs", ref, form.UserShm)
	case oci.ShmHost:
		if form.UserShm != "" {
			return t, fmt.Errorf("container %s mounts %s at /dev/shm, not a tmpfs Docker made: the host's /dev/shm, which gpurun never resizes", ref, form.UserShm)
		}
		return t, fmt.Errorf("container %s uses the host's IPC namespace (--ipc host): its /dev/shm is the host's, which gpurun never resizes", ref)
	default:
		return t, fmt.Errorf("container %s has --ipc none: Docker mounted nothing at /dev/shm", ref)
	}
	return t, nil
}

// CRI is the part of the CRI runtime service client resize uses.
type CRI interface {
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
	Status(ctx context.Context, in *runtimeapi.StatusRequest, opts ...grpc.CallOption) (*runtimeapi.StatusResponse, error)
}

// criStateDir asks the runtime for its CRI plugin's state dir (containerd's
// verbose Status reports its configuration, stateDir included); "" when it
// does not say.
func criStateDir(ctx context.Context, c CRI) string {
	resp, err := c.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return ""
	}
	cfg, ok := containerd.ReadRunning(resp.GetInfo())
	if !ok || !filepath.IsAbs(cfg.StateDir) {
		return ""
	}
	return filepath.Clean(cfg.StateDir)
}

// criInfo is the verbose "info" of containerd's CRI ContainerStatus.
type criInfo struct {
	PID         int         `json:"pid"`
	SandboxID   string      `json:"sandboxID"`
	RuntimeSpec *specs.Spec `json:"runtimeSpec"`
}

// CRITarget finds the /dev/shm of the running CRI container id from the
// verbose ContainerStatus (its pid and OCI spec).
func CRITarget(ctx context.Context, c CRI, id string) (Target, error) {
	resp, err := c.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return Target{}, fmt.Errorf("CRI ContainerStatus %s: %w", id, err)
	}
	st := resp.GetStatus()
	t := Target{Engine: "cri", Container: st.GetId(), Name: st.GetMetadata().GetName(),
		Note: "the pod spec is unchanged: a new pod (or a restarted sandbox) gets the size its runtime gives"}
	if st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return t, fmt.Errorf("CRI container %s is %s, not running", id, st.GetState())
	}
	raw, ok := resp.GetInfo()["info"]
	if !ok {
		return t, fmt.Errorf("CRI container %s: the runtime's verbose status has no \"info\" (gpurun reads containerd's)", id)
	}
	var info criInfo
	if err := json.Unmarshal([]byte(raw), &info); err != nil {
		return t, fmt.Errorf("CRI container %s: verbose info: %w", id, err)
	}
	if info.RuntimeSpec == nil || info.PID <= 0 {
		return t, fmt.Errorf("CRI container %s: verbose info lacks the runtime spec or pid", id)
	}
	sh := oci.ClassifyShm(info.RuntimeSpec, 0)
	switch sh.Kind {
	case oci.ShmEngine:
		t.Kind, t.Path = HostTmpfs, sh.Source
		t.SharedWith = "every container of pod sandbox " + sh.OwnerID
		if state := criStateDir(ctx, c); state != "" && info.SandboxID != "" {
			// The CRI plugin's state dir is <containerd state>/io.containerd.grpc.v1.cri.
			l, _ := oci.LayoutOf(oci.EngineContainerdCRI)
			t.Named = l.Path(filepath.Dir(state), info.SandboxID)
			if t.Named != sh.Source {
				return t, fmt.Errorf("CRI container %s binds %s at /dev/shm, not the tmpfs containerd made for its pod sandbox (%s)", id, sh.Source, t.Named)
			}
		}
	case oci.ShmPrivate:
		t.Kind, t.Path, t.PID = Namespace, oci.ShmPath, info.PID
	case oci.ShmHost:
		return t, fmt.Errorf("CRI container %s uses the host's IPC namespace (hostIPC): its /dev/shm is the host's, which gpurun never resizes", id)
	case oci.ShmUser:
		return t, fmt.Errorf("CRI container %s has its own %s mount at /dev/shm (%s); resize the volume (e.g. emptyDir sizeLimit) instead", id, sh.Type, sh.Source)
	default:
		return t, fmt.Errorf("CRI container %s has no /dev/shm mount", id)
	}
	return t, nil
}

// Check applies the policy's limit to a requested size: above the policy's
// max only with force.
func Check(size int64, p *policy.Policy, force bool) error {
	if size <= 0 {
		return fmt.Errorf("size %d: must be positive", size)
	}
	if p != nil && p.Max > 0 && size > p.Max && !force {
		return fmt.Errorf("%s is above the policy's max of %s; use --force to go beyond it", policy.FormatSize(size), policy.FormatSize(p.Max))
	}
	return nil
}

// Options control Apply.
type Options struct {
	Policy *policy.Policy
	// Force allows a size above the policy's max.
	Force bool
}

// Apply makes the target's /dev/shm size bytes. It may shrink it, but never
// below the bytes in use; it never touches the host's /dev/shm, nor
// another path than the tmpfs the engine named (or, where it named none,
// one outside the engine roots: the policy's and the engine's own).
func Apply(t Target, size int64, opt Options) (remount.Result, error) {
	if err := Check(size, opt.Policy, opt.Force); err != nil {
		return remount.Result{}, err
	}
	var roots []string
	if opt.Policy != nil {
		roots = append(roots, opt.Policy.EngineRoots...)
	}
	roots = append(roots, t.Roots...)
	switch t.Kind {
	case HostTmpfs:
		return remount.Set(t.Path, size, remount.Scope{Named: t.Named, Roots: roots})
	case Namespace:
		// SetInNamespace refuses the host's /dev/shm by device number.
		return remount.SetInNamespace(t.PID, t.Path, size)
	default:
		return remount.Result{}, fmt.Errorf("container %s: unknown /dev/shm kind %q", t.Name, t.Kind)
	}
}
