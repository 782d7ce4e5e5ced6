package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criTimeout bounds one CRI call.
const criTimeout = 2 * time.Minute

// PodOptions describes a pod sandbox for [Containerd.RunPod]. Pods always
// use the host network (namespace_options.network = NODE, no hostname, no
// CNI) and get the Containerd's CgroupParent.
type PodOptions struct {
	// Name is the pod's metadata name ("pod" if empty); the uid is random.
	Name string
	// Namespace is the pod's Kubernetes namespace ("default" if empty).
	Namespace string
	// HostIPC shares the host's IPC namespace and /dev/shm (hostIPC: true).
	HostIPC bool
	// Annotations are the pod's annotations.
	Annotations map[string]string
	// Labels are the pod's labels.
	Labels map[string]string
	// RuntimeHandler selects a runtime registered in ContainerdOptions.Runtimes
	// (a RuntimeClass's handler); empty means the default runtime.
	RuntimeHandler string
}

// Device is a host device made available in a container.
type Device struct {
	// Host is the device node's path on the host (see MknodGPU).
	Host string
	// Container is its path in the container (Host if empty).
	Container string
	// Perms is the cgroup permission string ("rwm" if empty).
	Perms string
}

// Mount is a bind mount of a host path into a container.
type Mount struct {
	Host      string
	Container string
	ReadOnly  bool
}

// ContainerOptions describes a container for [Containerd.CreateContainer].
type ContainerOptions struct {
	// Name is the container's metadata name ("app" if empty).
	Name string
	// Image is an imported image reference (PauseRef if empty).
	Image string
	// Command replaces the image's entrypoint, Args its command. When both
	// are empty the container runs `/bin/sleep 2147483647`, so that Exec
	// can be used on it.
	Command []string
	Args    []string
	// Env holds "KEY=VALUE" entries, in order.
	Env []string
	// Devices and Mounts are added to the container.
	Devices []Device
	Mounts  []Mount
	// CDIDevices are CDI device names (vendor/class=name) the container
	// asks for, as the kubelet passes a device plugin's or a DRA claim's:
	// containerd 2.x injects them from its CDI specs.
	CDIDevices []string
	// MemoryLimit is linux.resources.memory_limit_in_bytes (0: none).
	MemoryLimit int64
	// Privileged runs the container privileged.
	Privileged bool
	// Annotations and Labels are the container's.
	Annotations map[string]string
	Labels      map[string]string
}

// Runtime returns the raw CRI runtime client, for calls the harness does
// not wrap.
func (c *Containerd) Runtime() runtimeapi.RuntimeServiceClient { return c.rt }

// Images returns the raw CRI image client.
func (c *Containerd) Images() runtimeapi.ImageServiceClient { return c.img }

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

// namespaceOptions returns the namespace options of a harness pod.
func namespaceOptions(hostIPC bool) *runtimeapi.NamespaceOption {
	ipc := runtimeapi.NamespaceMode_POD
	if hostIPC {
		ipc = runtimeapi.NamespaceMode_NODE
	}
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     ipc,
	}
}

// RunPod runs a pod sandbox and returns its id; it fails the test on error.
func (c *Containerd) RunPod(opts PodOptions) string {
	c.t.Helper()
	id, err := c.TryRunPod(opts)
	if err != nil {
		c.t.Fatalf("harness: %v\n--- containerd log tail ---\n%s", err, c.LogTail(30))
	}
	return id
}

// TryRunPod is RunPod returning the error (for example a runtime shim's
// refusal) instead of failing the test.
func (c *Containerd) TryRunPod(opts PodOptions) (string, error) {
	name := opts.Name
	if name == "" {
		name = "pod"
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "default"
	}
	uid := randomHex(16)
	logDir := filepath.Join(c.Dir, "logs", name+"-"+uid[:8])
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return "", fmt.Errorf("pod %s: %w", name, err)
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: ns},
		LogDirectory: logDir,
		Labels:       opts.Labels,
		Annotations:  opts.Annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: c.CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: namespaceOptions(opts.HostIPC),
			},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	resp, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: opts.RuntimeHandler})
	if err != nil {
		return "", fmt.Errorf("run pod %s (handler %q): %w", name, opts.RuntimeHandler, err)
	}
	c.shared.mu.Lock()
	c.shared.pods[resp.GetPodSandboxId()] = cfg
	c.shared.mu.Unlock()
	return resp.GetPodSandboxId(), nil
}

// CreateContainer creates (does not start) a container in pod podID and
// returns its id; it fails the test on error.
func (c *Containerd) CreateContainer(podID string, opts ContainerOptions) string {
	c.t.Helper()
	id, err := c.TryCreateContainer(podID, opts)
	if err != nil {
		c.t.Fatalf("harness: %v\n--- containerd log tail ---\n%s", err, c.LogTail(30))
	}
	return id
}

// TryCreateContainer is CreateContainer returning the error instead of
// failing the test.
func (c *Containerd) TryCreateContainer(podID string, opts ContainerOptions) (string, error) {
	c.shared.mu.Lock()
	podCfg := c.shared.pods[podID]
	c.shared.mu.Unlock()
	if podCfg == nil {
		return "", fmt.Errorf("create container: pod %s was not created by this harness", podID)
	}
	name := opts.Name
	if name == "" {
		name = "app"
	}
	image := opts.Image
	if image == "" {
		image = PauseRef
	}
	command, args := opts.Command, opts.Args
	if len(command) == 0 && len(args) == 0 {
		command = []string{"/bin/sleep", "2147483647"}
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: name},
		Image:       &runtimeapi.ImageSpec{Image: image},
		Command:     command,
		Args:        args,
		Labels:      opts.Labels,
		Annotations: opts.Annotations,
		LogPath:     name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: opts.MemoryLimit},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Privileged:       opts.Privileged,
				NamespaceOptions: podCfg.GetLinux().GetSecurityContext().GetNamespaceOptions(),
			},
		},
	}
	for _, kv := range opts.Env {
		k, v, _ := strings.Cut(kv, "=")
		cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	for _, d := range opts.Devices {
		ctrPath, perms := d.Container, d.Perms
		if ctrPath == "" {
			ctrPath = d.Host
		}
		if perms == "" {
			perms = "rwm"
		}
		cfg.Devices = append(cfg.Devices, &runtimeapi.Device{HostPath: d.Host, ContainerPath: ctrPath, Permissions: perms})
	}
	for _, name := range opts.CDIDevices {
		cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: name})
	}
	for _, m := range opts.Mounts {
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{HostPath: m.Host, ContainerPath: m.Container, Readonly: m.ReadOnly})
	}
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	resp, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		return "", fmt.Errorf("create container %s in pod %s: %w", name, podID, err)
	}
	return resp.GetContainerId(), nil
}

// StartContainer starts a created container; it fails the test on error.
func (c *Containerd) StartContainer(id string) {
	c.t.Helper()
	if err := c.TryStartContainer(id); err != nil {
		c.t.Fatalf("harness: %v\n--- containerd log tail ---\n%s", err, c.LogTail(30))
	}
}

// TryStartContainer is StartContainer returning the error (for example a
// runtime shim's refusal) instead of failing the test.
func (c *Containerd) TryStartContainer(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	if _, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	return nil
}

// Exec runs cmd in a running container (ExecSync, 60 s timeout) and returns
// its stdout. A non-zero exit status is an error that carries stderr.
func (c *Containerd) Exec(id string, cmd ...string) (stdout string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	resp, err := c.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 60})
	if err != nil {
		return "", fmt.Errorf("exec %q in %s: %w", cmd, id, err)
	}
	if resp.GetExitCode() != 0 {
		return string(resp.GetStdout()), fmt.Errorf("exec %q in %s: exit status %d: %s", cmd, id, resp.GetExitCode(), strings.TrimSpace(string(resp.GetStderr())))
	}
	return string(resp.GetStdout()), nil
}

// StopContainer stops a container, giving it timeout to exit after its stop
// signal; it fails the test on error.
func (c *Containerd) StopContainer(id string, timeout time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout+timeout)
	defer cancel()
	if _, err := c.rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: int64(timeout / time.Second)}); err != nil {
		c.t.Fatalf("harness: stop container %s: %v", id, err)
	}
}

// RemoveContainer removes a container (stopping it first if needed); it
// fails the test on error.
func (c *Containerd) RemoveContainer(id string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	if _, err := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		c.t.Fatalf("harness: remove container %s: %v", id, err)
	}
}

// ContainerStatus returns the verbose status of a container; its Info["info"]
// is containerd's JSON, which includes the OCI runtimeSpec.
func (c *Containerd) ContainerStatus(id string) *runtimeapi.ContainerStatusResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	resp, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		c.t.Fatalf("harness: container status %s: %v", id, err)
	}
	return resp
}

// PodStatus returns the verbose status of a pod sandbox; its Info["info"] is
// containerd's JSON, which includes the sandbox's OCI runtimeSpec.
func (c *Containerd) PodStatus(id string) *runtimeapi.PodSandboxStatusResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	resp, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		c.t.Fatalf("harness: pod status %s: %v", id, err)
	}
	return resp
}

// SandboxShm returns the host path of a pod's /dev/shm tmpfs,
// State/sandboxes/<id>/shm (absent for hostIPC pods).
func (c *Containerd) SandboxShm(podID string) string {
	return filepath.Join(c.State, "sandboxes", podID, "shm")
}

// StopPod stops a pod sandbox and all its containers; it fails the test on
// error.
func (c *Containerd) StopPod(id string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		c.t.Fatalf("harness: stop pod %s: %v", id, err)
	}
}

// RemovePod removes a pod sandbox (stopping it first if needed) and its
// containers; it fails the test on error.
func (c *Containerd) RemovePod(id string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), criTimeout)
	defer cancel()
	if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		c.t.Fatalf("harness: stop pod %s before removing it: %v", id, err)
	}
	if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		c.t.Fatalf("harness: remove pod %s: %v", id, err)
	}
	c.shared.mu.Lock()
	delete(c.shared.pods, id)
	c.shared.mu.Unlock()
}
