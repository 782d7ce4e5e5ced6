package oci

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/policy"
)

// TestWarnings: the decision's warnings, in the words each front door
// handed over, for the containers they concern and no other.
func TestWarnings(t *testing.T) {
	pol := func(toml string) *policy.Policy {
		p, err := policy.Parse("test.toml", []byte(toml))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	gpus := WithDeviceRequest(gpusAll)
	tmpfs := func(words, size string) Opt {
		return WithUserShm(words, specs.Mount{Type: "tmpfs", Source: "tmpfs", Options: []string{"size=" + size}})
	}
	type want struct {
		kind WarningKind
		text string // a part of the message
	}
	tests := []struct {
		name   string
		opts   []Opt
		policy *policy.Policy
		enf    string // Input.EnforceMinWords
		want   []want
	}{
		{name: "nothing to say", opts: []Opt{gpus, WithPrivateShm(policy.EngineDefaultShm)}},
		{name: "a size with the host's IPC, in docker's words", opts: []Opt{gpus, WithHostIPC("--ipc=host"), WithShmChoice("--shm-size 1g")},
			want: []want{{WarnSizeIgnored, "--shm-size 1g has no effect with --ipc=host: the container uses the host's /dev/shm"}}},
		{name: "a size with the host's IPC, not a GPU container: an engine fact all the same", opts: []Opt{WithHostIPC("ipc: host"), WithShmChoice("shm_size: 1g")},
			want: []want{{WarnSizeIgnored, "shm_size: 1g has no effect with ipc: host"}}},
		{name: "below min", opts: []Opt{gpus, WithPrivateShm(256 * policy.MiB), WithShmChoice("--shm-size 256m")},
			want: []want{{WarnBelowMin, "--shm-size 256m is below the policy minimum 1GiB; DataLoader workers and NCCL may fail (Bus error, posix_fallocate failed); enforce_min = true in gpurun's policy raises it"}}},
		{name: "below min, the door's own enforce_min", opts: []Opt{gpus, WithPrivateShm(256 * policy.MiB), WithShmChoice("shm_size: 256m")}, enf: "--enforce-min",
			want: []want{{WarnBelowMin, "; --enforce-min raises it"}}},
		{name: "below min, raised", opts: []Opt{gpus, WithPrivateShm(256 * policy.MiB), WithShmChoice("--shm-size 256m")}, policy: pol("enforce_min = true"),
			want: []want{{WarnBelowMin, "is below the policy minimum 1GiB; enforce_min raises it to 1GiB"}}},
		{name: "below min, not a GPU container: the policy's minimum is not its", opts: []Opt{WithPrivateShm(256 * policy.MiB), WithShmChoice("--shm-size 256m")}},
		{name: "the user's own small tmpfs", opts: []Opt{gpus, tmpfs("--tmpfs /dev/shm:size=256m", "256m")},
			want: []want{{WarnBelowMin, "--tmpfs /dev/shm:size=256m is below the policy minimum 1GiB; raise it to at least 1GiB by hand"}}},
		{name: "an annotation below min", opts: []Opt{WithAnnotations(map[string]string{"gpurun.io/shm-size": "256Mi"}), WithPrivateShm(policy.EngineDefaultShm)},
			want: []want{{WarnBelowMin, "annotation gpurun.io/shm-size=256Mi is below the policy minimum"}}},
		{name: "above the memory limit", opts: []Opt{gpus, WithMemoryLimit(16 * policy.GiB), WithPrivateShm(32 * policy.GiB), WithShmChoice("--shm-size 32g")},
			want: []want{{WarnAboveMemory, "--shm-size 32g is not below the 16GiB memory limit, which /dev/shm counts against: filling it gets the container OOM-killed; at most 12GiB leaves the processes 25%"}}},
		{name: "leaves too little of the memory limit", opts: []Opt{gpus, WithMemoryLimit(16 * policy.GiB), WithPrivateShm(14 * policy.GiB), WithShmChoice("--shm-size 14g")},
			want: []want{{WarnAboveMemory, "--shm-size 14g leaves the processes less than 25% of the 16GiB memory limit"}}},
		{name: "within the reserve", opts: []Opt{gpus, WithMemoryLimit(16 * policy.GiB), WithPrivateShm(12 * policy.GiB), WithShmChoice("--shm-size 12g")}},
		{name: "a pod's emptyDir above the limit", opts: []Opt{gpus, WithMemoryLimit(8 * policy.GiB), tmpfs("volume dshm (emptyDir, medium Memory, sizeLimit 32Gi)", "34359738368")},
			want: []want{{WarnAboveMemory, "volume dshm (emptyDir, medium Memory, sizeLimit 32Gi) is not below the 8GiB memory limit"}}},
		{name: "an annotation above the limit, before the policy caps it", opts: []Opt{WithAnnotations(map[string]string{"gpurun.io/shm-size": "64Gi"}), WithMemoryLimit(16 * policy.GiB), WithPrivateShm(policy.EngineDefaultShm)}, policy: pol(`max = "32g"`),
			want: []want{{WarnAboveMemory, "annotation gpurun.io/shm-size=64Gi is not below the 16GiB memory limit"}}},
		{name: "no limit: the host's memory is not a limit", opts: []Opt{gpus, WithPrivateShm(128 * policy.GiB), WithShmChoice("--shm-size 128g")}},
		{name: "the policy's own size never warns", opts: []Opt{gpus, WithMemoryLimit(policy.GiB), WithPrivateShm(policy.EngineDefaultShm)}},
		{name: "NCCL_SHM_DISABLE=1 with a big /dev/shm", opts: []Opt{gpus, WithEnv("NCCL_SHM_DISABLE=1"), WithPrivateShm(policy.EngineDefaultShm)},
			want: []want{{WarnNCCLShmDisabled, "NCCL_SHM_DISABLE=1 is set, but /dev/shm will be 32GiB"}}},
		{name: "NCCL_SHM_DISABLE read as NCCL reads it", opts: []Opt{gpus, WithEnv("NCCL_SHM_DISABLE= 1 "), WithPrivateShm(policy.EngineDefaultShm)},
			want: []want{{WarnNCCLShmDisabled, "NCCL_SHM_DISABLE=1 is set"}}},
		{name: "NCCL_SHM_DISABLE: the last entry wins", opts: []Opt{gpus, WithEnv("NCCL_SHM_DISABLE=1", "NCCL_SHM_DISABLE=0"), WithPrivateShm(policy.EngineDefaultShm)}},
		{name: "NCCL_SHM_DISABLE with the host's /dev/shm", opts: []Opt{gpus, WithEnv("NCCL_SHM_DISABLE=1"), WithHostIPC("hostIPC: true")},
			want: []want{{WarnNCCLShmDisabled, "/dev/shm will be the host's /dev/shm"}}},
		{name: "NCCL_SHM_DISABLE with a small /dev/shm: the workaround", opts: []Opt{gpus, WithEnv("NCCL_SHM_DISABLE=1"), WithPrivateShm(256 * policy.MiB), WithShmChoice("--shm-size 256m")},
			want: []want{{WarnBelowMin, "below the policy minimum"}}},
		{name: "NCCL_SHM_DISABLE, not a GPU container", opts: []Opt{WithEnv("NCCL_SHM_DISABLE=1"), WithPrivateShm(policy.EngineDefaultShm)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewContainer(tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			pl := Decide(Input{Container: c, Policy: tt.policy, Facts: Facts{HostMemory: 64 * policy.GiB, HostGPUs: 2}, EnforceMinWords: tt.enf})
			if len(pl.Warnings) != len(tt.want) {
				t.Fatalf("warnings %+v, want %d: %+v", pl.Warnings, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				got := pl.Warnings[i]
				if got.Kind != w.kind || !strings.Contains(got.Message, w.text) {
					t.Errorf("warning %d = %s %q, want %s containing %q", i, got.Kind, got.Message, w.kind, w.text)
				}
				if len(got.Message) > 256 {
					t.Errorf("warning %d is %d characters: the API server truncates admission warnings over 256", i, len(got.Message))
				}
			}
		})
	}
}

// TestWarningsOfTheSandbox: a pod's sandbox gets none, whatever its env.
func TestWarningsOfTheSandbox(t *testing.T) {
	s := &specs.Spec{
		Process:     &specs.Process{Env: []string{"NCCL_SHM_DISABLE=1", "NVIDIA_VISIBLE_DEVICES=all"}},
		Annotations: map[string]string{AnnotationCRIContainerType: "sandbox", AnnotationCRISandboxID: "abc"},
	}
	pl := Decide(Input{Container: FromSpec(s), Facts: Facts{HostMemory: 64 * policy.GiB}})
	if len(pl.Warnings) != 0 {
		t.Errorf("sandbox warnings: %+v", pl.Warnings)
	}
}

func TestNCCLShmDisabled(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{"NCCL_SHM_DISABLE=1"}, true},
		{[]string{"NCCL_SHM_DISABLE=01"}, true},
		{[]string{"NCCL_SHM_DISABLE=  1"}, true},
		{[]string{"NCCL_SHM_DISABLE=0"}, false},
		{[]string{"NCCL_SHM_DISABLE=yes"}, false},
		{[]string{"NCCL_SHM_DISABLE"}, false},
		{[]string{"NCCL_SHM_DISABLE=0", "NCCL_SHM_DISABLE=1"}, true},
	} {
		if got := NCCLShmDisabled(tt.env); got != tt.want {
			t.Errorf("NCCLShmDisabled(%q) = %v, want %v", tt.env, got, tt.want)
		}
	}
}
