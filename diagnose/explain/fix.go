package explain

import (
	"fmt"

	"github.com/gpurun/gpurun/policy"
)

// Fix is what to change, with the size gpurun's policy gives.
type Fix struct {
	// SizeBytes is the /dev/shm size to give; Size says it in Docker's
	// units ("1g"); Why says how the policy reached it. All three are
	// empty when no finding is about the size.
	SizeBytes int64  `json:"size_bytes,omitempty"`
	Size      string `json:"size,omitempty"`
	Why       string `json:"why,omitempty"`
	// Steps say how, for each way a container starts.
	Steps []Step `json:"steps"`
}

// Step is one way to apply a fix.
type Step struct {
	// Where is the front door: "gpurun", "docker run", "compose", ...
	Where string `json:"where"`
	How   string `json:"how"`
}

// suggest returns the fix for findings: the policy's size for a container
// with memory bytes (0: unknown), at least the largest size a finding
// names, and the ways to apply it. Nil when nothing was found.
func suggest(pol *policy.Policy, memory int64, findings []Finding) *Fix {
	var sized, perm bool
	var implied int64
	for _, f := range findings {
		switch f.Kind {
		case KindSize:
			sized = true
			implied = max(implied, f.ImpliedBytes)
		case KindPermission:
			perm = true
		}
	}
	if !sized && !perm {
		return nil
	}
	fix := &Fix{}
	if sized {
		size, why := pol.Target(policy.Request{MemoryLimit: memory})
		if memory <= 0 && pol.Absolute == 0 {
			why += "; gpurun run gives each GPU container a size from the memory it may use"
		}
		if implied > size {
			size = (implied + policy.MiB - 1) / policy.MiB * policy.MiB
			why += fmt.Sprintf(", raised to hold the %s the log names", policy.FormatSize(implied))
		}
		docker := policy.FormatDocker(size)
		fix.SizeBytes, fix.Size, fix.Why = size, docker, why
		fix.Steps = append(fix.Steps,
			Step{"gpurun", "gpurun run <your docker run arguments>   (gives every GPU container the policy's /dev/shm)"},
			Step{"docker run", "docker run --shm-size=" + docker + " ..."},
			Step{"compose", fmt.Sprintf("gpurun compose migrate --write   (adds shm_size to the GPU services), or shm_size: %q in the service", docker)},
			Step{"docker host", "sudo gpurun install docker --set-as-default --reload   (every GPU container the daemon starts)"},
			Step{"kubernetes", "kubectl apply -k deploy/kubernetes/overlays/runtime-class (or default-runtime, or nri) to size each GPU pod's /dev/shm on the nodes, " +
				"or mount an emptyDir {medium: Memory, sizeLimit: " + policy.FormatQuantity(size) + "} at /dev/shm"},
			Step{"podman/cri-o", "sudo gpurun install podman   (or crio: the hook sizes GPU containers)"},
			Step{"check", "gpurun doctor   (in the container: /dev/shm's size, what fills it, whether it fits)"},
			Step{"running container", "sudo gpurun resize CONTAINER " + docker + "   (now, without a restart)"},
		)
	}
	if perm {
		fix.Steps = append(fix.Steps, Step{"permissions", "chmod 1777 /dev/shm in the container, or fix the mode of what is mounted there"})
	}
	return fix
}
