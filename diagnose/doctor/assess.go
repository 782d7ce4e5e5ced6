package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// subject is one container as doctor sees it, whichever way it looked:
// from inside, through the Docker API, or through the CRI API.
type subject struct {
	fix fixTarget
	// container is what oci.Decide plans over: the container's runtime
	// spec, or the one form built from what doctor could see.
	container *oci.Container
	// planPrefix introduces the plan for people.
	planPrefix string
	shm        shmState
	// memoryLimit is the container's memory limit in bytes (0: none), and
	// limitSource where it was read.
	memoryLimit int64
	limitSource string
	hostMemory  int64
	// hostGPUs is the GPU count seen outside the spec (nvidia-smi), 0
	// when unknown.
	hostGPUs int
	// gpuNotes are GPU facts beyond the spec's evidence.
	gpuNotes []string
	// cpu describes the CPUs, "" when not known.
	cpu string
	// hostTmpfsSize reads the size of an engine-made host tmpfs.
	hostTmpfsSize func(string) (int64, error)
	// recordedShm is Docker's HostConfig.ShmSize (0: not Docker), and
	// viaGPUrun whether a restart goes through gpurun-runtime again.
	recordedShm int64
	viaGPUrun   bool
	// cgroupMemory is the container's memory cgroup read from the host
	// (docker and CRI containers that run), nil otherwise.
	cgroupMemory *shmstats.Memory
}

// shmState is what /dev/shm is and holds.
type shmState struct {
	kind oci.ShmKind
	// what describes it for people.
	what string
	// fsType of the mount ("" when none or unknown).
	fsType string
	// fs is statfs's answer when known.
	fs    FS
	known bool
	// err says why fs is not known.
	err error
}

// The share of /dev/shm in use from which doctor warns, and from which it
// calls it a problem.
const (
	usageWarnPercent    = 75
	usageProblemPercent = 90
)

// assess turns a subject into the checks common to every way of looking at
// a container: the /dev/shm mount, its size against the policy, its use,
// GPUs, memory, NCCL's environment and gpurun's plan, which it returns too.
func assess(sub subject, pol *policy.Policy) ([]Check, oci.Plan) {
	sub.fix.userMount = sub.shm.kind == oci.ShmUser
	pl := oci.Decide(oci.Input{Container: sub.container, Policy: pol, Facts: oci.Facts{HostMemory: sub.hostMemory, HostGPUs: sub.hostGPUs, TmpfsSize: sub.hostTmpfsSize}})
	acting := pl.Action != oci.ActionNone
	applies := pl.Applies
	target, why := pl.Target, pl.Why
	if acting && pl.Size > 0 && pl.Size != target {
		// An annotation asked for another size, or enforce_min raised one.
		target, why = pl.Size, pl.Reason
	}
	var checks []Check
	checks = append(checks, mountCheck(sub, applies, target))
	if c, ok := sizeCheck(sub, pol, applies, target, why); ok {
		checks = append(checks, c)
	}
	if c, ok := usageCheck(sub, target); ok {
		checks = append(checks, c)
	}
	checks = append(checks, gpuCheck(sub, pl))
	checks = append(checks, memoryCheck(sub))
	if c, ok := shmMemoryCheck(sub); ok {
		checks = append(checks, c)
	}
	if sub.cpu != "" {
		checks = append(checks, Check{Name: "cpu", Status: OK, Detail: sub.cpu})
	}
	checks = append(checks, ncclCheck(sub, pol))
	checks = append(checks, planCheck(sub, pl))
	return checks, pl
}

func mountCheck(sub subject, applies bool, target int64) Check {
	c := Check{Name: "shm.mount", Status: OK, Detail: sub.shm.what, Data: map[string]any{"kind": string(sub.shm.kind)}}
	switch sub.shm.kind {
	case oci.ShmNone:
		c.Detail = "nothing is mounted at /dev/shm (docker --ipc none does that): shm_open fails, so DataLoader workers and NCCL cannot share memory"
		c.Status = Warn
		if applies {
			c.Status = Problem
			c.Fix = noShmFix(sub.fix, target)
		}
	case oci.ShmHost:
		if applies {
			c.Status = Warn
			c.Detail += "; it is big, but the container shares the host's shared memory and IPC objects (no isolation)"
			c.Fix = fmt.Sprintf("for isolation: drop --ipc host (hostIPC in a pod) and give the container its own /dev/shm of %s:\n%s", policy.FormatSize(target), startFix(sub.fix, target))
		}
	case oci.ShmUser:
		if sub.shm.fsType != "" && sub.shm.fsType != "tmpfs" && applies {
			c.Status = Warn
			c.Detail += fmt.Sprintf("; it is a %s, not a tmpfs: shared memory is written to it like files", sub.shm.fsType)
		}
	}
	return c
}

func sizeCheck(sub subject, pol *policy.Policy, applies bool, target int64, why string) (Check, bool) {
	sh := sub.shm
	if sh.kind == oci.ShmNone {
		return Check{}, false
	}
	c := Check{Name: "shm.size", Status: OK}
	if !sh.known {
		c.Status = Error
		c.Detail = fmt.Sprintf("cannot tell the size of /dev/shm: %v", sh.err)
		return c, true
	}
	size, used := sh.fs.Size, sh.fs.Used
	c.Data = map[string]any{"size_bytes": size, "used_bytes": used, "target_bytes": target, "min_bytes": pol.Min}
	have := fmt.Sprintf("/dev/shm is %s (%s used)", policy.FormatSize(size), policy.FormatSize(used))
	switch {
	case !applies:
		c.Detail = fmt.Sprintf("%s; no GPU evidence and policy match %q: the policy leaves it as it is", have, pol.Match)
	case sh.kind == oci.ShmHost:
		c.Detail = have + ", the host's"
	case size < pol.Min:
		c.Status = Problem
		c.Detail = fmt.Sprintf("%s, below the minimum %s: DataLoader workers die with \"Bus error\", NCCL with \"posix_fallocate failed\"; the policy gives this container %s (%s)",
			have, policy.FormatSize(pol.Min), policy.FormatSize(target), why)
		c.Fix = sizeFix(sub.fix, target)
	case size < target:
		c.Status = Warn
		c.Detail = fmt.Sprintf("%s, less than the %s the policy gives this container (%s)", have, policy.FormatSize(target), why)
		c.Fix = sizeFix(sub.fix, target)
	default:
		c.Detail = fmt.Sprintf("%s; the policy gives this container %s", have, policy.FormatSize(target))
	}
	if sub.recordedShm > 0 && sh.kind != oci.ShmHost && sub.recordedShm != size {
		c.Data["recorded_bytes"] = sub.recordedShm
		c.Detail += fmt.Sprintf("; Docker's record (HostConfig.ShmSize) says %s: it was resized after the start", policy.FormatSize(sub.recordedShm))
		if !sub.viaGPUrun && size > sub.recordedShm {
			c.Detail += ", and a restart returns it to that"
			if c.Status == OK {
				c.Status = Warn
				c.Fix = recreateFix(sub.fix, size)
			}
		}
	}
	return c, true
}

func usageCheck(sub subject, target int64) (Check, bool) {
	sh := sub.shm
	if !sh.known || sh.fs.Size <= 0 {
		return Check{}, false
	}
	pct := sh.fs.Used * 100 / sh.fs.Size
	c := Check{Name: "shm.usage", Status: OK, Data: map[string]any{"used_bytes": sh.fs.Used, "size_bytes": sh.fs.Size, "used_percent": pct}}
	c.Detail = fmt.Sprintf("%d%% of /dev/shm in use (%s of %s)", pct, policy.FormatSize(sh.fs.Used), policy.FormatSize(sh.fs.Size))
	if pct < usageWarnPercent {
		return c, true
	}
	c.Status = Warn
	if pct >= usageProblemPercent {
		c.Status = Problem
		c.Detail += ": the next large allocation fails"
	}
	c.Fix = "remove what a crashed job left (ls -la /dev/shm: torch_*, nccl-shm-*, psm_*)"
	grow := target
	if pct >= shmstats.NearCeilingPercent {
		// Near the ceiling: the size that holds what it uses now with
		// gpurun stats' headroom, when the policy's size would not.
		if fit := shmstats.Fit(sh.fs.Used); fit > grow {
			grow = fit
			c.Data["suggested_bytes"] = fit
			c.Detail += fmt.Sprintf("; %s holds that with headroom (on the host, gpurun stats shows its peak)", policy.FormatSize(fit))
		}
	}
	if sh.fs.Size < grow {
		c.Fix += ", or grow it:\n" + sizeFix(sub.fix, grow)
	}
	if sh.kind == oci.ShmHost {
		c.Fix = "remove what crashed jobs left in the host's /dev/shm (ls -la /dev/shm: torch_*, nccl-shm-*, psm_*)"
	}
	return c, true
}

func gpuCheck(sub subject, pl oci.Plan) Check {
	c := Check{Name: "gpu", Status: OK, Data: map[string]any{"gpu": pl.GPU, "gpus": pl.GPUs}}
	var parts []string
	if pl.GPU {
		n := "count unknown"
		if pl.GPUs > 0 {
			n = fmt.Sprintf("%d GPU(s)", pl.GPUs)
		}
		parts = append(parts, fmt.Sprintf("GPU container (%s), %s", strings.Join(pl.Evidence, ", "), n))
	} else {
		parts = append(parts, "no GPU evidence (NVIDIA_VISIBLE_DEVICES, GPU device nodes, CDI, NVIDIA hook)")
	}
	parts = append(parts, sub.gpuNotes...)
	c.Detail = strings.Join(parts, "; ")
	return c
}

func memoryCheck(sub subject) Check {
	c := memoryLimitCheck(sub)
	if m := sub.cgroupMemory; m != nil && m.Err != "" {
		// Said here: shm.memory, which would say the rest, is left out.
		c.Detail += "; its memory cgroup could not be read: " + m.Err
	}
	return c
}

func memoryLimitCheck(sub subject) Check {
	c := Check{Name: "memory", Status: OK, Data: map[string]any{"limit_bytes": sub.memoryLimit, "host_memory_bytes": sub.hostMemory}}
	host := "unknown"
	if sub.hostMemory > 0 {
		host = policy.FormatSize(sub.hostMemory)
	}
	if sub.memoryLimit <= 0 {
		c.Detail = fmt.Sprintf("no memory limit; the host has %s", host)
		return c
	}
	c.Detail = fmt.Sprintf("memory limit %s (%s); the host has %s", policy.FormatSize(sub.memoryLimit), sub.limitSource, host)
	if sub.shm.known && sub.shm.kind != oci.ShmHost && sub.shm.fs.Size > sub.memoryLimit {
		c.Status = Warn
		c.Detail += fmt.Sprintf("; /dev/shm (%s) is larger: tmpfs pages count against the limit, so filling it OOM-kills the container before it runs out of space", policy.FormatSize(sub.shm.fs.Size))
	}
	return c
}

func ncclCheck(sub subject, pol *policy.Policy) Check {
	c := Check{Name: "nccl", Status: OK}
	var env []string
	vars := map[string]any{}
	if s := sub.container.Spec; s != nil && s.Process != nil {
		for _, kv := range s.Process.Env {
			k, v, _ := strings.Cut(kv, "=")
			if strings.HasPrefix(k, "NCCL_") {
				if _, seen := vars[k]; !seen {
					env = append(env, k)
				}
				vars[k] = v
			}
		}
	}
	slices.Sort(env)
	var disabled bool
	if s := sub.container.Spec; s != nil && s.Process != nil {
		disabled = oci.NCCLShmDisabled(s.Process.Env)
	}
	if len(vars) > 0 {
		c.Data = map[string]any{"env": vars}
	}
	switch {
	case len(env) == 0:
		c.Detail = "no NCCL_* variables set"
	default:
		var kv []string
		for _, k := range env {
			kv = append(kv, fmt.Sprintf("%s=%v", k, vars[k]))
		}
		c.Detail = strings.Join(kv, " ")
	}
	if disabled {
		c.Status = Warn
		big := sub.shm.kind == oci.ShmHost || sub.shm.known && sub.shm.fs.Size >= pol.Min
		if big {
			c.Detail += fmt.Sprintf(": NCCL's shared-memory transport is off and intra-node traffic goes over sockets (slower), though /dev/shm (%s) is big enough for it", shmSizeWord(sub.shm))
		} else {
			c.Detail += ": the usual workaround for a small /dev/shm; NCCL's traffic between GPUs of this node goes over sockets (slower)"
		}
		c.Fix = "once /dev/shm is big enough, unset NCCL_SHM_DISABLE (drop -e NCCL_SHM_DISABLE=1, or the env entry)"
	}
	return c
}

func shmSizeWord(sh shmState) string {
	if sh.kind == oci.ShmHost {
		return "the host's"
	}
	return policy.FormatSize(sh.fs.Size)
}

func planCheck(sub subject, pl oci.Plan) Check {
	c := Check{Name: "plan", Status: OK, Data: map[string]any{"action": string(pl.Action), "size_bytes": pl.Size, "current_bytes": pl.Current, "reason": pl.Reason}}
	what := "leave /dev/shm as it is"
	switch pl.Action {
	case oci.ActionSetSize:
		what = "size /dev/shm to " + policy.FormatSize(pl.Size)
	case oci.ActionRemount:
		what = "grow the shared host tmpfs to " + policy.FormatSize(pl.Size)
	case oci.ActionInject:
		what = "mount a " + policy.FormatSize(pl.Size) + " tmpfs at /dev/shm"
	case oci.ActionIPCHost:
		what = "give it the host's IPC namespace and /dev/shm"
	}
	c.Detail = fmt.Sprintf("%sgpurun would %s (%s)", sub.planPrefix, what, pl.Action)
	if pl.Action == oci.ActionNone {
		c.Detail += ": " + pl.Reason
	}
	return c
}
