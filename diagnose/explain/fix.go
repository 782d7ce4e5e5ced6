package explain

import (
	"fmt"

	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/policy/remedy"
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

// Step is one way to apply a fix (remedy's: doctor and stats give theirs
// the same way).
type Step = remedy.Step

// ecosystemSteps are the steps of a fix for each ecosystem a log shows
// (Ecosystems): its own way to need less /dev/shm or none, and what that
// costs.
func ecosystemSteps() map[string][]Step {
	return map[string][]Step{
		"pytorch": {{Where: "pytorch", How: "DataLoader(num_workers=0) keeps batches out of /dev/shm, at the cost of loading data in the training process; " +
			"fewer workers or a smaller prefetch_factor lower what /dev/shm must hold"}},
		"nccl": {{Where: "nccl", How: "NCCL_SHM_DISABLE=1 keeps NCCL's segments out of /dev/shm; GPUs of one node then talk over P2P or sockets (slower without P2P)"}},
		"mpi": {{Where: "mpi", How: "Open MPI: --mca btl ^vader (5.x: ^sm) leaves the shared-memory transport out, so ranks of one node talk over the network (slower), " +
			"or --mca btl_vader_backing_directory /tmp (5.x: btl_sm_backing_directory) puts its segments on disk; " +
			"MPICH: MPIR_CVAR_NOLOCAL=1 sends local traffic through the network; Intel MPI: I_MPI_FABRICS=ofi leaves shm out; libfabric: FI_PROVIDER=^shm"}},
		"ucx": {{Where: "ucx", How: "UCX_TLS=^posix leaves UCX's /dev/shm transport out (slower between ranks of one node), " +
			"or UCX_POSIX_DIR=/tmp puts its backing files on disk"}},
		"ray": {{Where: "ray", How: "Ray wants /dev/shm larger than its object store, which defaults to 30% of the memory: --shm-size on docker run " +
			"or in the cluster's run_options; or ray start --object-store-memory below /dev/shm's size " +
			"(RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE=1 lets it use /tmp: every object through the disk)"}},
		"chromium": {{Where: "chromium", How: "--disable-dev-shm-usage (Chrome/Chromium flag; Puppeteer and Playwright launch args, Selenium's ChromeOptions, Electron's app.commandLine) " +
			"makes Chromium put its shared memory in /tmp instead of /dev/shm: no more crashes, at the cost of disk writes for every tile and frame " +
			"(slower pages; /tmp needs the room, ideally a tmpfs); --ipc=host shares the host's /dev/shm instead"}},
		"joblib": {{Where: "joblib", How: "joblib/loky: JOBLIB_TEMP_FOLDER=/tmp memmaps large arrays on disk instead (slower); " +
			"pandarallel: pandarallel.initialize(use_memory_fs=False), or MEMORY_FS_ROOT=/tmp"}},
		"triton": {{Where: "triton", How: "Triton's Python backend: each model instance needs its own region (64 MiB by default); " +
			"--backend-config=python,shm-default-byte-size=<bytes> lowers the first allocation, fewer instances need less"}},
	}
}

// suggest returns the fix for findings: the policy's size for a container
// with memory bytes (0: unknown), at least the largest size a finding
// names, the ways to apply it, and each ecosystem's own step (ecosystems,
// in the order of Ecosystems); the restart sweep for leftovers, the
// memory limit's steps for a kill for memory, the mode for permissions.
// Nil when nothing was found.
func suggest(pol *policy.Policy, memory int64, findings []Finding, ecosystems []string) *Fix {
	kinds := map[Kind]bool{}
	var implied int64
	for _, f := range findings {
		kinds[f.Kind] = true
		if f.Kind == KindSize {
			implied = max(implied, f.ImpliedBytes)
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	fix := &Fix{}
	if kinds[KindSize] {
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
		fix.Steps = append(remedy.For(remedy.Target{}, size), checkStep())
		steps := ecosystemSteps()
		for _, e := range ecosystems {
			fix.Steps = append(fix.Steps, steps[e]...)
		}
	}
	if kinds[KindLeftovers] {
		fix.Steps = append(fix.Steps, leftoverSteps()...)
	}
	if kinds[KindMemory] {
		fix.Steps = append(fix.Steps, memorySteps(pol, memory, kinds[KindSize])...)
	}
	if !kinds[KindSize] && (kinds[KindLeftovers] || kinds[KindMemory]) {
		fix.Steps = append(fix.Steps, checkStep())
	}
	if kinds[KindPermission] {
		fix.Steps = append(fix.Steps, Step{Where: "permissions", How: "chmod 1777 /dev/shm in the container, or fix the mode of what is mounted there"})
	}
	return fix
}

// checkStep is how to look at a container's /dev/shm.
func checkStep() Step {
	return Step{Where: "check", How: "gpurun doctor   (in the container: /dev/shm's size, what fills it, whether it fits)"}
}

// leftoverSteps clear what an earlier instance of a container left in
// its pod's /dev/shm: remedy's steps (a new pod now, gpurun's restart
// sweep from then on) for a pod the log does not name, and why a wrapper
// that deletes segments at the container's start is no fix. Their names
// say "leftovers", apart from the size fix's steps of the same names.
func leftoverSteps() []Step {
	pod := remedy.PodTarget{Namespace: "NAMESPACE", Name: "POD", OwnerKind: "controller"}
	var steps []Step
	for _, s := range remedy.Leftovers(pod) {
		steps = append(steps, Step{Where: "leftovers " + s.Where, How: s.How})
	}
	return append(steps, Step{Where: "leftovers wrapper", How: "not safe in general: a command: wrapper that deletes segments at the container's start " +
		"may delete what the pod's init containers and sidecars, which share its /dev/shm, keep there on purpose"})
}

// memorySteps make the processes and /dev/shm fit in the memory limit:
// a higher limit, or a smaller /dev/shm (the policy's size for a container
// with memory bytes, with its commands unless sized already gave them),
// and fewer segments kept.
func memorySteps(pol *policy.Policy, memory int64, sized bool) []Step {
	steps := []Step{{Where: "memory limit", How: "raise it to hold the processes and what they keep in /dev/shm (tmpfs pages count against it): " +
		"resources.limits.memory in the pod, docker run --memory, compose mem_limit"}}
	if memory <= 0 {
		steps = append(steps, Step{Where: "smaller shm", How: "or give /dev/shm less, so that a job that overfills it gets No space left on device, which names the cause, " +
			"instead of an OOM kill: gpurun's policy (size, max in /etc/gpurun/config.toml; --memory sizes this fix for the container's limit), " +
			"a Memory emptyDir's sizeLimit (without one it may take the whole limit), --shm-size, shm_size"})
	} else {
		size, why := pol.Target(policy.Request{MemoryLimit: memory})
		steps = append(steps, Step{Where: "smaller shm", How: fmt.Sprintf("or give /dev/shm at most %s (%s), so that a job that overfills it gets "+
			"No space left on device, which names the cause, instead of an OOM kill", policy.FormatDocker(size), why)})
		if !sized {
			steps = append(steps, remedy.For(remedy.Target{}, size)...)
		}
	}
	return append(steps, Step{Where: "free", How: "unlink what the job no longer needs in /dev/shm (SharedMemory.unlink(), shared tensors it still holds, " +
		"segments an earlier instance left); ls -la /dev/shm shows what is there"})
}
