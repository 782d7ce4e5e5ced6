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
	gpus := WithGPURequest("--gpus all", 0)
	tests := []struct {
		name     string
		opts     []Opt
		policy   *policy.Policy
		portable bool
		action   Action
		size     int64
		target   int64
		reason   string // a part of the reason
	}{
		{"gpu, engine default", []Opt{gpus, WithPrivateShm(policy.EngineDefaultShm)}, nil, false, ActionSetSize, 32 * policy.GiB, 32 * policy.GiB, "GPU container (--gpus all): 50% of the 64GiB host's memory"},
		{"gpu, memory limit", []Opt{gpus, WithMemoryLimit(16 * policy.GiB), WithPrivateShm(policy.EngineDefaultShm)}, nil, false, ActionSetSize, 8 * policy.GiB, 8 * policy.GiB, "16GiB memory limit"},
		{"explicit 64m is the user's choice", []Opt{gpus, WithPrivateShm(64 * policy.MiB), WithShmChoice("--shm-size 64m")}, nil, false, ActionNone, 64 * policy.MiB, 32 * policy.GiB, "chosen explicitly (--shm-size 64m)"},
		{"explicit 64m under enforce_min", []Opt{gpus, WithPrivateShm(64 * policy.MiB), WithShmChoice("--shm-size 64m")}, pol("enforce_min = true"), false, ActionSetSize, policy.GiB, 32 * policy.GiB, "enforce_min: explicit /dev/shm size 64MiB (--shm-size 64m) raised to min 1GiB"},
		{"explicit 2g", []Opt{gpus, WithPrivateShm(2 * policy.GiB)}, nil, false, ActionNone, 2 * policy.GiB, 32 * policy.GiB, "chosen explicitly"},
		{"portable without a limit: compose default", []Opt{gpus, WithPrivateShm(policy.EngineDefaultShm)}, nil, true, ActionSetSize, 8 * policy.GiB, 8 * policy.GiB, "compose default 8GiB"},
		{"portable with a limit", []Opt{gpus, WithMemoryLimit(4 * policy.GiB), WithPrivateShm(policy.EngineDefaultShm)}, nil, true, ActionSetSize, 2 * policy.GiB, 2 * policy.GiB, "4GiB memory limit"},
		{"shared engine tmpfs", []Opt{gpus, WithSharedShm("/var/lib/docker/containers/0123456789ab/mounts/shm", "")}, nil, false, ActionRemount, 32 * policy.GiB, 32 * policy.GiB, "grow the docker host tmpfs"},
		{"host ipc", []Opt{gpus, WithHostIPC()}, nil, false, ActionNone, 0, 32 * policy.GiB, "host's /dev/shm"},
		{"ipc none", []Opt{gpus, WithNoShm()}, nil, false, ActionNone, 0, 32 * policy.GiB, "mounts nothing at /dev/shm"},
		{"ipc none, mode mount", []Opt{gpus, WithNoShm()}, pol(`mode = "mount"`), false, ActionInject, 32 * policy.GiB, 32 * policy.GiB, "add a tmpfs"},
		{"user mount in the user's words", []Opt{gpus, WithPrivateShm(policy.EngineDefaultShm), WithUserShm("--tmpfs /dev/shm:size=1g", specs.Mount{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=1g"}})}, nil, false, ActionNone, policy.GiB, 32 * policy.GiB, "the user mounts --tmpfs /dev/shm:size=1g at /dev/shm"},
		{"not a GPU container", []Opt{WithPrivateShm(policy.EngineDefaultShm)}, nil, false, ActionNone, 64 * policy.MiB, 32 * policy.GiB, "no GPU evidence"},
		{"privileged on a GPU host", []Opt{WithPrivileged("--privileged"), WithPrivateShm(policy.EngineDefaultShm)}, nil, false, ActionSetSize, 32 * policy.GiB, 32 * policy.GiB, "--privileged (every device of the host, its 2 GPU(s))"},
		{"per_gpu counts the host's GPUs for all", []Opt{gpus, WithPrivateShm(policy.EngineDefaultShm)}, pol(`per_gpu = "4g"`), false, ActionSetSize, 8 * policy.GiB, 8 * policy.GiB, "4GiB per GPU x 2 GPUs"},
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
	c, err := NewContainer(WithPrivateShm(policy.GiB), WithHostIPC(), WithSharedShm("/run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm", "/proc/1/ns/ipc"))
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
	for _, bad := range []Opt{WithDevices("nvidia0"), WithCDIDevices("x", "/dev/nvidia0"), WithSharedShm("relative/shm", ""), WithGPURequest("", 1), WithUserShm("", specs.Mount{})} {
		if _, err := NewContainer(bad); err == nil {
			t.Errorf("a bad option was accepted")
		}
	}
}
