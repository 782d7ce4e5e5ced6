package oci

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/policy"
)

// TestDecideContainers plans containers as the front doors build them,
// with Opts: the user's words reach the reason, an explicit size is left
// alone even at the engines' default, a portable answer (a compose file)
// falls back to compose_default, and Target says what the policy gives
// whatever the action.
func TestDecideContainers(t *testing.T) {
	pol := func(toml string) *policy.Policy {
		p, err := policy.Parse("test.toml", []byte(toml))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const host = 64 * policy.GiB
	gpus := WithDeviceRequest(gpusAll)
	tests := []struct {
		name     string
		opts     []Opt
		policy   *policy.Policy
		portable bool
		action   Action
		size     int64
		target   int64
		reason   string // a part of the reason
		// applies and requested are the plan's Applies and Requested.
		applies, requested bool
	}{
		{name: "gpu, engine default", opts: []Opt{gpus, WithPrivateShm(policy.EngineDefaultShm)}, action: ActionSetSize, size: 32 * policy.GiB, target: 32 * policy.GiB, reason: "GPU container (--gpus all): 50% of the 64GiB host's memory", applies: true},
		{name: "gpu, memory limit", opts: []Opt{gpus, WithMemoryLimit(16 * policy.GiB), WithPrivateShm(policy.EngineDefaultShm)}, action: ActionSetSize, size: 8 * policy.GiB, target: 8 * policy.GiB, reason: "16GiB memory limit", applies: true},
		{name: "explicit 64m is the user's choice", opts: []Opt{gpus, WithPrivateShm(64 * policy.MiB), WithShmChoice("--shm-size 64m")}, action: ActionNone, size: 64 * policy.MiB, target: 32 * policy.GiB, reason: "chosen explicitly (--shm-size 64m)", applies: true},
		{name: "explicit 64m under enforce_min", opts: []Opt{gpus, WithPrivateShm(64 * policy.MiB), WithShmChoice("--shm-size 64m")}, policy: pol("enforce_min = true"), action: ActionSetSize, size: policy.GiB, target: 32 * policy.GiB, reason: "enforce_min: explicit /dev/shm size 64MiB (--shm-size 64m) raised to min 1GiB", applies: true},
		{name: "explicit 2g", opts: []Opt{gpus, WithPrivateShm(2 * policy.GiB)}, action: ActionNone, size: 2 * policy.GiB, target: 32 * policy.GiB, reason: "chosen explicitly", applies: true},
		{name: "portable without a limit: compose default", opts: []Opt{gpus, WithPrivateShm(policy.EngineDefaultShm)}, portable: true, action: ActionSetSize, size: 8 * policy.GiB, target: 8 * policy.GiB, reason: "compose default 8GiB", applies: true},
		{name: "portable with a limit", opts: []Opt{gpus, WithMemoryLimit(4 * policy.GiB), WithPrivateShm(policy.EngineDefaultShm)}, portable: true, action: ActionSetSize, size: 2 * policy.GiB, target: 2 * policy.GiB, reason: "4GiB memory limit", applies: true},
		{name: "shared engine tmpfs", opts: []Opt{gpus, WithSharedShm("/var/lib/docker/containers/0123456789ab/mounts/shm", "")}, action: ActionRemount, size: 32 * policy.GiB, target: 32 * policy.GiB, reason: "grow the docker host tmpfs", applies: true},
		{name: "host ipc", opts: []Opt{gpus, WithHostIPC("")}, action: ActionNone, size: 0, target: 32 * policy.GiB, reason: "host's /dev/shm", applies: true},
		{name: "ipc none", opts: []Opt{gpus, WithNoShm()}, action: ActionNone, size: 0, target: 32 * policy.GiB, reason: "mounts nothing at /dev/shm", applies: true},
		{name: "ipc none, mode mount", opts: []Opt{gpus, WithNoShm()}, policy: pol(`mode = "mount"`), action: ActionInject, size: 32 * policy.GiB, target: 32 * policy.GiB, reason: "add a tmpfs", applies: true},
		{name: "user mount in the user's words", opts: []Opt{gpus, WithPrivateShm(policy.EngineDefaultShm), WithUserShm("--tmpfs /dev/shm:size=1g", specs.Mount{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1g"}})}, action: ActionNone, size: policy.GiB, target: 32 * policy.GiB, reason: "the user mounts --tmpfs /dev/shm:size=1g at /dev/shm", applies: true},
		{name: "not a GPU container", opts: []Opt{WithPrivateShm(policy.EngineDefaultShm)}, action: ActionNone, size: 64 * policy.MiB, target: 32 * policy.GiB, reason: "no GPU evidence", applies: false},
		{name: "privileged on a GPU host", opts: []Opt{WithPrivileged("--privileged"), WithPrivateShm(policy.EngineDefaultShm)}, action: ActionSetSize, size: 32 * policy.GiB, target: 32 * policy.GiB, reason: "--privileged (every device of the host, its 2 GPU(s))", applies: true},
		{name: "per_gpu counts the host's GPUs for all", opts: []Opt{gpus, WithPrivateShm(policy.EngineDefaultShm)}, policy: pol(`per_gpu = "4g"`), action: ActionSetSize, size: 8 * policy.GiB, target: 8 * policy.GiB, reason: "4GiB per GPU x 2 GPUs", applies: true},
		{name: "an allowed annotation asks", opts: []Opt{WithAnnotations(map[string]string{"gpurun.io/shm-size": "4g"}), WithPrivateShm(policy.EngineDefaultShm)}, action: ActionSetSize, size: 4 * policy.GiB, target: 4 * policy.GiB, reason: "annotation gpurun.io/shm-size=4g asks for 4GiB", applies: true, requested: true},
		{name: "match all", opts: []Opt{WithPrivateShm(policy.EngineDefaultShm)}, policy: pol(`match = "all"`), action: ActionSetSize, size: 32 * policy.GiB, target: 32 * policy.GiB, reason: `policy match "all"`, applies: true},
		{name: "joins an IPC namespace whose /dev/shm is not known here", opts: []Opt{gpus, WithJoinedIPC("--ipc container:trainer")}, action: ActionRemount, size: 32 * policy.GiB, target: 32 * policy.GiB, reason: "the shared tmpfs of the IPC namespace it joins (--ipc container:trainer), of a size not known here", applies: true},
		{name: "joins an IPC namespace, mode mount", opts: []Opt{gpus, WithJoinedIPC("--ipc container:trainer")}, policy: pol(`mode = "mount"`), action: ActionNone, target: 32 * policy.GiB, reason: "never remounts on the host", applies: true},
		{name: "joins an IPC namespace, not a GPU container", opts: []Opt{WithJoinedIPC("--ipc container:trainer")}, action: ActionNone, target: 32 * policy.GiB, reason: "no GPU evidence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewContainer(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			pl := Decide(Input{Container: c, Policy: tt.policy, Facts: Facts{HostMemory: host, HostGPUs: 2}, Portable: tt.portable})
			if pl.Action != tt.action || pl.Size != tt.size || pl.Target != tt.target {
				t.Errorf("plan = %s %d (target %d), want %s %d (target %d): %s", pl.Action, pl.Size, pl.Target, tt.action, tt.size, tt.target, pl.Reason)
			}
			if pl.Applies != tt.applies || pl.Requested != tt.requested {
				t.Errorf("applies %v, requested %v; want %v, %v", pl.Applies, pl.Requested, tt.applies, tt.requested)
			}
			if !strings.Contains(pl.Reason, tt.reason) {
				t.Errorf("reason %q lacks %q", pl.Reason, tt.reason)
			}
			if strings.Contains(pl.Reason, "nvidia-container-runtime-hook") {
				t.Errorf("reason names a hook nobody gave: %q", pl.Reason)
			}
		})
	}
}

// TestOptsReplaceShm: the IPC/shm options each describe all of /dev/shm,
// so the last one given wins and no second mount or IPC entry remains.
func TestOptsReplaceShm(t *testing.T) {
	c, err := NewContainer(WithPrivateShm(policy.GiB), WithHostIPC(""), WithSharedShm("/run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm", "/proc/1/ns/ipc"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range c.Spec.Mounts {
		if m.Destination == ShmPath {
			n++
		}
	}
	ipc := 0
	for _, ns := range c.Spec.Linux.Namespaces {
		if ns.Type == "ipc" {
			ipc++
		}
	}
	if n != 1 || ipc != 1 {
		t.Fatalf("mounts at /dev/shm: %d, ipc namespaces: %d; want 1 each: %+v", n, ipc, c.Spec)
	}
	if sh := ClassifyShm(c.Spec, 0); sh.Kind != ShmEngine || sh.OwnerID != "abc" {
		t.Fatalf("ClassifyShm = %+v", sh)
	}
	for _, bad := range []Opt{WithDevices("nvidia0"), WithCDIDevices("x", "/dev/nvidia0"), WithSharedShm("relative/shm", ""), WithDeviceRequest(DeviceRequest{}), WithRuntime("", "nvidia"), WithResource("", "nvidia.com/gpu", 1), WithJoinedIPC(""), WithUserShm("", specs.Mount{})} {
		if _, err := NewContainer(bad); err == nil {
			t.Errorf("a bad option was accepted")
		}
	}
}
