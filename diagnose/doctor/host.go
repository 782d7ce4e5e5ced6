package doctor

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/docker"
	"github.com/gpurun/gpurun/engine/nvidia"
	"github.com/gpurun/gpurun/policy"
)

// RuntimeName is the name gpurun-runtime is registered under by
// `gpurun install` (install.RuntimeName).
const RuntimeName = "gpurun"

// runtimeBinary is the shim's file name.
const runtimeBinary = "gpurun-runtime"

// Default configuration paths on a node.
const (
	DefaultDockerConfig     = docker.DefaultConfigFile
	DefaultContainerdConfig = containerd.DefaultConfigPath
)

// DockerAPI is the part of the Docker Engine API client doctor uses.
type DockerAPI interface {
	Info(ctx context.Context) (system.Info, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
}

// CRIRuntime is the part of the CRI runtime service doctor uses.
type CRIRuntime interface {
	Status(ctx context.Context, in *runtimeapi.StatusRequest, opts ...grpc.CallOption) (*runtimeapi.StatusResponse, error)
	ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest, opts ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error)
	ListContainers(ctx context.Context, in *runtimeapi.ListContainersRequest, opts ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error)
	PodSandboxStatus(ctx context.Context, in *runtimeapi.PodSandboxStatusRequest, opts ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error)
}

// criCallTimeout bounds each of doctor's calls to containerd: one that
// does not answer in that time is itself the problem.
const criCallTimeout = 10 * time.Second

// HostOptions configure Host. Configuration paths are paths on the node,
// read under the System's Root.
type HostOptions struct {
	Policy PolicySource
	Where  Where
	// DockerConfig is daemon.json ("" = DefaultDockerConfig).
	DockerConfig string
	// Docker asks the running dockerd; nil when there is no client
	// (DockerErr says why). DockerHost names its endpoint for people.
	Docker     DockerAPI
	DockerErr  error
	DockerHost string
	// ContainerdConfig is containerd's config.toml ("" =
	// DefaultContainerdConfig).
	ContainerdConfig string
	// InstallState is where gpurun install records what it changed and
	// what the admin asked for ("" = install.DefaultStatePath).
	InstallState string
	// CRI asks the running containerd what it loaded; nil to not ask.
	// CRIEndpoint names it for people.
	CRI         CRIRuntime
	CRIEndpoint string
}

// Host checks the engines of the host doctor runs on: dockerd (daemon.json
// and what the daemon loaded), containerd (config.toml with its imports, and
// what the CRI plugin loaded), the OCI hooks of Podman and CRI-O, gpurun's
// policy file and the low-level runtime it hands over to, the remounts
// gpurun's log says failed, and the host's /dev/shm.
func Host(ctx context.Context, sys *System, o HostOptions) *Report {
	r := &Report{Mode: ModeHost}
	r.add(Check{Name: "environment", Status: OK, Detail: whereDetail(o.Where)})
	src := o.Policy
	if !src.Explicit {
		src.Path = sys.path(src.Path)
	}
	pol, pc := loadPolicy(src)
	r.add(pc)

	dk := dockerChecks(ctx, sys, o, pol)
	r.Checks = append(r.Checks, dk.checks...)
	ct := containerdChecks(ctx, sys, o, pol)
	r.Checks = append(r.Checks, ct.checks...)
	r.add(hooksCheck(sys))
	if c, ok := chainCheck(sys, pol, src.Path, dk, ct); ok {
		r.add(c)
	}
	r.add(remountCheck(sys, pol))
	r.add(hostShmCheck(sys))
	return r.finish()
}

// installed is what an engine's configuration says about gpurun-runtime,
// for the chain check.
type installed struct {
	checks []Check
	// name is the runtime gpurun-runtime is registered as ("" = none),
	// isDefault whether it is the engine's default.
	name      string
	isDefault bool
	// nvidia is the path of an NVIDIA runtime the engine also has.
	nvidia string
}

// findRuntime returns the runtime in runtimes (name -> binary path) that
// is gpurun-runtime: the one named gpurun, else one whose binary is
// gpurun-runtime.
func findRuntime(runtimes map[string]string) (string, string) {
	if p, ok := runtimes[RuntimeName]; ok {
		return RuntimeName, p
	}
	names := make([]string, 0, len(runtimes))
	for n := range runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if path.Base(runtimes[n]) == runtimeBinary {
			return n, runtimes[n]
		}
	}
	return "", ""
}

// nvidiaRuntime returns the path of an NVIDIA runtime among runtimes.
func nvidiaRuntime(runtimes map[string]string) string {
	names := make([]string, 0, len(runtimes))
	for n := range runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if nvidia.IsRuntime(runtimes[n]) {
			return runtimes[n]
		}
	}
	return ""
}

// binDirs are searched for a runtime named without a path.
var binDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// resolveBinary finds an executable on the node: a path as it is, a bare
// name in the usual bin directories. It returns the node path.
func (s *System) resolveBinary(name string) (string, error) {
	candidates := []string{name}
	if !strings.Contains(name, "/") {
		candidates = candidates[:0]
		for _, d := range binDirs {
			candidates = append(candidates, path.Join(d, name))
		}
	}
	for _, c := range candidates {
		fi, err := os.Stat(s.path(c))
		if err == nil && !fi.IsDir() {
			if fi.Mode()&0o111 == 0 {
				return c, fmt.Errorf("%s is not executable", c)
			}
			return c, nil
		}
	}
	if strings.Contains(name, "/") {
		return "", fmt.Errorf("%s does not exist", name)
	}
	return "", fmt.Errorf("%s is not in %s", name, strings.Join(binDirs, ", "))
}

// chainCheck looks at the low-level runtime gpurun-runtime hands over to,
// where an engine runs gpurun-runtime.
func chainCheck(sys *System, pol *policy.Policy, policyPath string, engines ...installed) (Check, bool) {
	used := false
	nvidia := ""
	for _, e := range engines {
		if e.name == "" {
			continue
		}
		used = true
		if e.isDefault && e.nvidia != "" && nvidia == "" {
			nvidia = e.nvidia
		}
	}
	if !used {
		return Check{}, false
	}
	c := Check{Name: "runtime.chain", Status: OK, Data: map[string]any{"runtime": pol.Runtime}}
	resolved, err := sys.resolveBinary(pol.Runtime)
	switch {
	case err != nil:
		c.Status = Problem
		c.Detail = fmt.Sprintf("gpurun-runtime hands over to runtime %q from the policy, but %v: every container it starts fails", pol.Runtime, err)
		c.Fix = fmt.Sprintf("set runtime in %s to an installed runtime (runc, crun, nvidia-container-runtime)", policyPath)
	case path.Base(resolved) == runtimeBinary:
		c.Status = Problem
		c.Detail = fmt.Sprintf("the policy's runtime %q is gpurun-runtime itself: it would call itself, so it refuses and containers fail", pol.Runtime)
		c.Fix = fmt.Sprintf("set runtime in %s to runc (or the runtime that was the default, such as nvidia-container-runtime)", policyPath)
	case nvidia != "" && !strings.HasPrefix(path.Base(resolved), "nvidia-container-runtime"):
		c.Status = Warn
		c.Detail = fmt.Sprintf("gpurun is the default runtime and the NVIDIA runtime %s is registered too, but gpurun-runtime hands over to %s: containers that relied on the NVIDIA runtime being the default no longer get NVIDIA's hook (those started with --gpus still do)", nvidia, resolved)
		c.Fix = fmt.Sprintf("set runtime = %q in %s (gpurun install does this when the NVIDIA runtime was the default)", nvidia, policyPath)
	default:
		c.Detail = fmt.Sprintf("gpurun-runtime hands over to %s (policy runtime %q)", resolved, pol.Runtime)
	}
	c.Data["resolved"] = resolved
	return c, true
}

// hostShmCheck looks at the host's own /dev/shm, which --ipc host and
// hostIPC containers share.
func hostShmCheck(sys *System) Check {
	c := Check{Name: "host.shm", Status: OK}
	fs, err := sys.Statfs(sys.path("/dev/shm"))
	if err != nil {
		c.Status = Error
		c.Detail = fmt.Sprintf("cannot read the host's /dev/shm: %v", err)
		return c
	}
	c.Data = map[string]any{"size_bytes": fs.Size, "used_bytes": fs.Used}
	if !fs.Tmpfs {
		c.Status = Warn
		c.Detail = "the host's /dev/shm is not a tmpfs: POSIX shared memory of host processes and --ipc host containers lands on disk"
		c.Fix = "mount a tmpfs at /dev/shm (it is one on every common distribution)"
		return c
	}
	leftovers, bytes := shmLeftovers(sys)
	c.Data["leftover_files"], c.Data["leftover_bytes"] = len(leftovers), bytes
	pct := int64(0)
	if fs.Size > 0 {
		pct = fs.Used * 100 / fs.Size
	}
	c.Detail = fmt.Sprintf("tmpfs of %s, %s used (%d%%); shared by host processes and --ipc host / hostIPC containers, never resized by gpurun", policy.FormatSize(fs.Size), policy.FormatSize(fs.Used), pct)
	if len(leftovers) > 0 {
		c.Detail += fmt.Sprintf("; %d file(s) of PyTorch/NCCL/MPI jobs hold %s (%s)", len(leftovers), policy.FormatSize(bytes), strings.Join(leftovers[:min(3, len(leftovers))], ", "))
	}
	if pct >= usageWarnPercent {
		c.Status = Warn
		if pct >= usageProblemPercent {
			c.Status = Problem
		}
		c.Fix = "remove what crashed jobs left: ls -la /dev/shm (torch_*, nccl-shm-*, psm_*), and delete files no running process holds (fuser /dev/shm/*)"
	}
	return c
}

// shmLeftovers lists the files in the host's /dev/shm that jobs of the
// kind gpurun helps leave behind when they crash.
func shmLeftovers(sys *System) ([]string, int64) {
	entries, err := os.ReadDir(sys.path("/dev/shm"))
	if err != nil {
		return nil, 0
	}
	var names []string
	var total int64
	for _, e := range entries {
		n := e.Name()
		if !slices.ContainsFunc([]string{"torch_", "nccl-shm", "nccl-", "psm_", "sem.mp-", "pym-"}, func(p string) bool { return strings.HasPrefix(n, p) }) {
			continue
		}
		names = append(names, n)
		if fi, err := e.Info(); err == nil {
			total += fi.Size()
		}
	}
	return names, total
}
