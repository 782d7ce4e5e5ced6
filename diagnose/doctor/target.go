package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/docker/translate"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
)

// TargetOptions configure DockerContainer and CRIContainer.
type TargetOptions struct {
	Policy PolicySource
}

// DockerContainer checks one Docker container from the host: its IPC mode,
// its /dev/shm (size and use, read through /proc/<pid>/root), its GPU
// evidence, memory limit and NCCL environment, and what gpurun would do.
// The plan is made over the container's runtime config.json when it can be
// found (the bundle of its containerd shim), else over a spec built from
// docker inspect the way gpurun run builds one.
func DockerContainer(ctx context.Context, sys *System, api DockerAPI, ref string, o TargetOptions) *Report {
	r := &Report{Mode: ModeDocker, Target: ref}
	pol, pc := loadPolicy(o.Policy)
	c, err := api.ContainerInspect(ctx, ref)
	if err != nil {
		r.add(Check{Name: "container", Status: Error, Detail: fmt.Sprintf("inspect container %s: %v", ref, err)})
		r.add(pc)
		return r.finish()
	}
	if c.ContainerJSONBase == nil || c.HostConfig == nil || c.Config == nil {
		r.add(Check{Name: "container", Status: Error, Detail: fmt.Sprintf("inspect container %s: incomplete answer", ref)})
		return r.finish()
	}
	info, infoErr := api.Info(ctx)
	name := strings.TrimPrefix(c.Name, "/")
	running := c.State != nil && c.State.Running && c.State.Pid > 0
	hostMem := info.MemTotal
	if infoErr != nil || hostMem == 0 {
		hostMem, _ = sys.MemTotal()
	}

	sub := subject{fix: fixTarget{mode: ModeDocker, ref: name}, hostMemory: hostMem, recordedShm: c.HostConfig.ShmSize}
	if c.HostConfig.Memory > 0 {
		sub.memoryLimit, sub.limitSource = c.HostConfig.Memory, "docker run --memory"
	}
	rt := c.HostConfig.Runtime
	if p, ok := info.Runtimes[rt]; ok && path.Base(p.Path) == runtimeBinary || rt == RuntimeName {
		sub.viaGPUrun = true
	}
	ipc := c.HostConfig.IpcMode
	var donor *container.InspectResponse
	if ipc.IsContainer() {
		if d, err := api.ContainerInspect(ctx, ipc.Container()); err == nil && d.ContainerJSONBase != nil {
			donor = &d
			sub.fix.donor = strings.TrimPrefix(d.Name, "/")
		} else {
			sub.fix.donor = ipc.Container()
		}
	}

	// The spec: the runtime's own config.json, else the one form built
	// from inspect.
	specFrom := "built from docker inspect"
	var spec *specs.Spec
	if running {
		if s, p, err := bundleSpec(sys, c.State.Pid); err == nil {
			spec, specFrom = s, p
		}
	}
	if spec != nil {
		sub.container = oci.FromSpec(spec)
	} else if sub.container, err = translate.FromInspect(c, info.DockerRootDir, donor); err != nil {
		r.add(Check{Name: "container", Status: Error, Detail: fmt.Sprintf("container %s: %v", ref, err)})
		r.add(pc)
		return r.finish()
	}
	spec = sub.container.Spec
	sub.planPrefix = "for its spec (" + specFrom + "), "
	sub.hostTmpfsSize = sys.tmpfsSize

	status := "not running"
	if running {
		status = fmt.Sprintf("running, pid %d", c.State.Pid)
	} else if c.State != nil && c.State.Status != "" {
		status = c.State.Status
	}
	rtWord := rt
	if rtWord == "" {
		rtWord = "the default"
	}
	cc := Check{Name: "container", Status: OK,
		Detail: fmt.Sprintf("%s (%s), image %s, %s, runtime %s, IPC %s", name, shortID(c.ID), c.Config.Image, status, rtWord, ipcWord(string(ipc))),
		Data:   map[string]any{"id": c.ID, "name": name, "running": running, "runtime": rt, "ipc_mode": string(ipc), "shm_size_bytes": c.HostConfig.ShmSize}}
	r.add(cc)
	r.add(pc)

	sub.shm = dockerShm(sys, c, spec, hostMem, running)
	if running {
		sub.cgroupMemory = sys.cgroupMemory(c.State.Pid, false, hostMem, sub.shm)
	}
	sub.cpu = dockerCPU(c, info)
	checks, _ := assess(sub, pol)
	r.Checks = append(r.Checks, checks...)
	return r.finish()
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func ipcWord(m string) string {
	if m == "" {
		return "private (default)"
	}
	return m
}

// dockerShm says what a Docker container's /dev/shm is, and reads its size
// and use through /proc/<pid>/root when it runs.
func dockerShm(sys *System, c container.InspectResponse, spec *specs.Spec, hostMem int64, running bool) shmState {
	cls := oci.ClassifyShm(spec, hostMem)
	sh := shmState{kind: cls.Kind, fsType: cls.Type}
	ipc := c.HostConfig.IpcMode
	switch cls.Kind {
	case oci.ShmNone:
		sh.what = "nothing is mounted at /dev/shm (--ipc none)"
		return sh
	case oci.ShmHost:
		sh.what = "the host's /dev/shm (--ipc host)"
	case oci.ShmEngine:
		if ipc.IsContainer() {
			sh.what = fmt.Sprintf("the /dev/shm of container %s (--ipc %s): a host tmpfs Docker made for it, shared with every container that joins it (%s)", ipc.Container(), ipc, cls.Source)
		} else {
			sh.what = fmt.Sprintf("a host tmpfs Docker made for it (--ipc shareable), which containers started with --ipc container:%s share (%s)", strings.TrimPrefix(c.Name, "/"), cls.Source)
		}
	case oci.ShmPrivate:
		sh.what = "a tmpfs of its own (IPC private)"
	default:
		sh.what = fmt.Sprintf("the user's own %s mount at /dev/shm (source %q)", cls.Type, cls.Source)
		if cls.Type == "" {
			sh.what = "the user's own mount at /dev/shm"
		}
	}
	if running {
		sh.fs, sh.err = sys.Statfs(sys.path(fmt.Sprintf("/proc/%d/root/dev/shm", c.State.Pid)))
		sh.known = sh.err == nil
		if sh.known {
			sh.fsType = fsTypeName(sh.fs)
			return sh
		}
	}
	switch {
	case cls.Kind == oci.ShmEngine:
		if n, err := sys.tmpfsSize(cls.Source); err == nil {
			sh.fs, sh.known = FS{Tmpfs: true, Size: n}, true
			sh.what += " (size read on the host; use unknown)"
			return sh
		}
	case cls.Kind == oci.ShmPrivate && c.HostConfig.ShmSize > 0:
		sh.fs, sh.known = FS{Tmpfs: true, Size: c.HostConfig.ShmSize}, true
		sh.what += " (not running: the size it gets at start, from HostConfig.ShmSize)"
		return sh
	}
	if sh.err == nil {
		sh.err = fmt.Errorf("the container is not running")
	}
	return sh
}

func fsTypeName(fs FS) string {
	if fs.Tmpfs {
		return "tmpfs"
	}
	return fmt.Sprintf("filesystem type %#x", fs.Type)
}

func dockerCPU(c container.InspectResponse, info system.Info) string {
	h := c.HostConfig
	var parts []string
	switch {
	case h.NanoCPUs > 0:
		parts = append(parts, fmt.Sprintf("--cpus %g", float64(h.NanoCPUs)/1e9))
	case h.CPUQuota > 0 && h.CPUPeriod > 0:
		parts = append(parts, fmt.Sprintf("CPU quota %g CPUs", float64(h.CPUQuota)/float64(h.CPUPeriod)))
	}
	if h.CpusetCpus != "" {
		parts = append(parts, "cpuset "+h.CpusetCpus)
	}
	if len(parts) == 0 {
		parts = append(parts, "no CPU limit")
	}
	if info.NCPU > 0 {
		parts = append(parts, fmt.Sprintf("the host has %d CPUs", info.NCPU))
	}
	return strings.Join(parts, "; ")
}

// bundleSpec reads the runtime config.json of the container whose init
// process is pid: its parent is the containerd shim, whose working
// directory is the bundle.
func bundleSpec(sys *System, pid int) (*specs.Spec, string, error) {
	status, err := sys.readFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, "", err
	}
	ppid := 0
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			ppid, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if ppid <= 1 {
		return nil, "", fmt.Errorf("pid %d: no parent shim", pid)
	}
	comm, err := sys.readFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "containerd-shim") {
		return nil, "", fmt.Errorf("pid %d: parent %d is not a containerd shim", pid, ppid)
	}
	bundle, err := os.Readlink(sys.path(fmt.Sprintf("/proc/%d/cwd", ppid)))
	if err != nil {
		return nil, "", err
	}
	p := path.Join(bundle, "config.json")
	cfg, err := specfile.Load(sys.path(p))
	if err != nil {
		return nil, "", err
	}
	return cfg.Spec, "runtime config " + p, nil
}

// tmpfsSize returns the size of the tmpfs at a node path.
func (s *System) tmpfsSize(p string) (int64, error) {
	fs, err := s.Statfs(s.path(p))
	if err != nil {
		return 0, err
	}
	if !fs.Tmpfs {
		return 0, fmt.Errorf("%s is not a tmpfs", p)
	}
	return fs.Size, nil
}

// criInfo is the verbose "info" of containerd's CRI ContainerStatus.
type criInfo struct {
	PID         int         `json:"pid"`
	SandboxID   string      `json:"sandboxID"`
	RuntimeSpec *specs.Spec `json:"runtimeSpec"`
}

// CRIContainer checks one CRI container from the node, from containerd's
// verbose ContainerStatus (its pid and OCI spec): its /dev/shm (the pod's
// shared tmpfs, the host's, or a volume), size and use, GPU evidence,
// memory limit, NCCL environment, and what gpurun would do.
func CRIContainer(ctx context.Context, sys *System, cri CRIRuntime, id string, o TargetOptions) *Report {
	r := &Report{Mode: ModeCRI, Target: id}
	pol, pc := loadPolicy(o.Policy)
	resp, err := cri.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		r.add(Check{Name: "container", Status: Error, Detail: fmt.Sprintf("CRI ContainerStatus %s: %v", id, err)})
		r.add(pc)
		return r.finish()
	}
	st := resp.GetStatus()
	var info criInfo
	raw, ok := resp.GetInfo()["info"]
	if !ok || json.Unmarshal([]byte(raw), &info) != nil || info.RuntimeSpec == nil {
		r.add(Check{Name: "container", Status: Error, Detail: fmt.Sprintf("CRI container %s: the runtime's verbose status has no runtime spec (gpurun reads containerd's)", id)})
		r.add(pc)
		return r.finish()
	}
	running := st.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING && info.PID > 0
	state := strings.ToLower(strings.TrimPrefix(st.GetState().String(), "CONTAINER_"))
	if running {
		state += fmt.Sprintf(", pid %d", info.PID)
	}
	r.add(Check{Name: "container", Status: OK,
		Detail: fmt.Sprintf("%s (%s) of pod sandbox %s, image %s, %s", st.GetMetadata().GetName(), shortID(st.GetId()), shortID(info.SandboxID), st.GetImage().GetImage(), state),
		Data:   map[string]any{"id": st.GetId(), "name": st.GetMetadata().GetName(), "sandbox_id": info.SandboxID, "running": running}})
	r.add(pc)

	hostMem, _ := sys.MemTotal()
	spec := info.RuntimeSpec
	sub := subject{fix: fixTarget{mode: ModeCRI, ref: id}, container: oci.FromSpec(spec), hostMemory: hostMem,
		hostTmpfsSize: sys.tmpfsSize, planPrefix: "for its runtime spec, "}
	if l := oci.MemoryLimit(spec); l > 0 {
		sub.memoryLimit, sub.limitSource = l, "the container's resources.limits.memory"
	}
	cls := oci.ClassifyShm(spec, hostMem)
	sh := shmState{kind: cls.Kind, fsType: cls.Type}
	switch cls.Kind {
	case oci.ShmNone:
		sh.what = "nothing is mounted at /dev/shm"
	case oci.ShmHost:
		sh.what = "the host's /dev/shm (hostIPC: true)"
	case oci.ShmEngine:
		sh.what = fmt.Sprintf("the pod's shared tmpfs, mounted by %s on the host at %s: every container of the pod sees it", cls.Engine, cls.Source)
	case oci.ShmPrivate:
		sh.what = "a tmpfs of its own"
	default:
		sh.what = fmt.Sprintf("the user's own %s mount at /dev/shm (source %q; an emptyDir?)", cls.Type, cls.Source)
	}
	if cls.Kind != oci.ShmNone {
		if running {
			sh.fs, sh.err = sys.Statfs(sys.path(fmt.Sprintf("/proc/%d/root/dev/shm", info.PID)))
			sh.known = sh.err == nil
		}
		if !sh.known && cls.Kind == oci.ShmEngine {
			if n, err := sys.tmpfsSize(cls.Source); err == nil {
				sh.fs, sh.known, sh.err = FS{Tmpfs: true, Size: n}, true, nil
			} else if sh.err == nil {
				sh.err = err
			}
		}
		if !sh.known && sh.err == nil {
			sh.err = fmt.Errorf("the container is not running")
		}
	}
	sub.shm = sh
	if running {
		sub.cgroupMemory = sys.cgroupMemory(info.PID, true, hostMem, sh)
	}
	checks, _ := assess(sub, pol)
	r.Checks = append(r.Checks, checks...)
	return r.finish()
}
