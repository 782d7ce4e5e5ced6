package oci

import (
	"fmt"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/policy"
)

// Action is what a plan does to a container's /dev/shm.
type Action string

// The values of Action.
const (
	// ActionNone leaves /dev/shm as it is.
	ActionNone Action = "none"
	// ActionSetSize rewrites the size option of the container's own tmpfs.
	ActionSetSize Action = "set-size"
	// ActionRemount grows the engine-made host tmpfs the container binds.
	ActionRemount Action = "remount"
	// ActionInject adds a tmpfs at /dev/shm where the spec has none.
	ActionInject Action = "inject"
	// ActionIPCHost gives the container the host's IPC namespace and /dev/shm.
	ActionIPCHost Action = "ipc-host"
)

// Plan is the answer to "what /dev/shm should this container get, and why".
type Plan struct {
	Action Action `json:"action"`
	// Size is the /dev/shm size the container has after the plan: equal to
	// Current when the action is none; 0 where unknown (the host's /dev/shm).
	Size int64 `json:"size_bytes"`
	// Current is the size before the plan, 0 where unknown.
	Current int64  `json:"current_bytes"`
	GPU     bool   `json:"gpu"`
	GPUs    int    `json:"gpus"`
	Reason  string `json:"reason"`

	// Shm is the classification the plan rests on.
	Shm Shm `json:"-"`
	// Evidence lists the GPU signals found.
	Evidence []string `json:"-"`
	// Container says where the spec sits in a pod.
	Container Container `json:"-"`
}

// Input is everything the planner looks at.
type Input struct {
	Spec   *specs.Spec
	Policy *policy.Policy
	// HostMemory is the host's total memory in bytes, 0 when unknown.
	HostMemory int64
	// HostGPUs is the host's GPU count, used when a container asks for
	// "all"; 0 when unknown.
	HostGPUs int
	// HostTmpfsSize, when set, returns the current size of a host tmpfs the
	// container binds (an engine's sandbox or shareable shm). The planner
	// stays pure when it is nil: the size is then unknown.
	HostTmpfsSize func(path string) (int64, error)
}

// Decide plans a container's /dev/shm. It never shrinks, never touches the
// host's own /dev/shm, never overrides a user's explicit mount or size unless
// the policy's enforce_min says so, and keeps an acting plan's size within
// the policy's [min, max].
func Decide(in Input) Plan {
	p := in.Policy
	if p == nil {
		p = policy.Default()
	}
	s := in.Spec
	if s == nil {
		s = &specs.Spec{}
	}
	sh := ClassifyShm(s, in.HostMemory)
	gpu := DetectGPU(s)
	pl := Plan{
		Action:    ActionNone,
		GPU:       gpu.GPU,
		GPUs:      gpu.Count,
		Shm:       sh,
		Evidence:  gpu.Evidence,
		Container: CRIContainer(s),
	}
	if gpu.GPU && gpu.Count == 0 && in.HostGPUs > 0 {
		pl.GPUs = in.HostGPUs
	}
	pl.Current = sh.Size
	if sh.Kind == ShmEngine && in.HostTmpfsSize != nil {
		if n, err := in.HostTmpfsSize(sh.Source); err == nil {
			pl.Current = n
		}
	}
	leave := func(format string, a ...any) Plan {
		pl.Action, pl.Size = ActionNone, pl.Current
		pl.Reason = fmt.Sprintf(format, a...)
		return pl
	}

	if pl.Container.Sandbox {
		return leave("pod sandbox: the pod's /dev/shm is grown when a GPU container of the pod is created")
	}
	if sh.Kind == ShmHost {
		pl.Current, pl.Size = 0, 0
		return leave("shares the host's /dev/shm (host IPC); the host's /dev/shm is never resized")
	}

	// A size asked for by an allowed annotation is the user's own choice.
	target, why, requested := requestedSize(s, p)
	if !requested {
		if !gpu.GPU && p.Match != policy.MatchAll {
			return leave("no GPU evidence (env, devices, CDI annotations, hooks); policy match is %q", p.Match)
		}
		target, why = p.Target(policy.Request{MemoryLimit: MemoryLimit(s), HostMemory: in.HostMemory, GPUs: pl.GPUs})
		if gpu.GPU {
			why = "GPU container (" + strings.Join(gpu.Evidence, ", ") + "): " + why
		} else {
			why = "policy match \"all\": " + why
		}
	}

	switch sh.Kind {
	case ShmUser:
		if !p.EnforceMin || requested {
			return leave("the user mounts their own %s at /dev/shm (source %q); left alone", mountWord(sh), sh.Source)
		}
		if sh.Type != "tmpfs" || IsBind(s.Mounts[sh.Index]) {
			return leave("the user mounts their own %s at /dev/shm; enforce_min cannot resize it from the spec", mountWord(sh))
		}
		if sh.Size >= p.Min {
			return leave("the user's own tmpfs at /dev/shm is %s, at least the minimum %s", policy.FormatSize(sh.Size), policy.FormatSize(p.Min))
		}
		return act(pl, ActionSetSize, p.Min, fmt.Sprintf("enforce_min: the user's tmpfs at /dev/shm is %s, raised to min %s", policy.FormatSize(sh.Size), policy.FormatSize(p.Min)))

	case ShmPrivate:
		if !requested && !policy.IsEngineDefaultShm(sh.Size) && sh.Size != 0 {
			// Not the engines' 64 MiB: someone chose it (--shm-size,
			// default-shm-size, containers.conf).
			if p.EnforceMin && sh.Size < p.Min {
				return act(pl, ActionSetSize, p.Min, fmt.Sprintf("enforce_min: explicit /dev/shm size %s raised to min %s", policy.FormatSize(sh.Size), policy.FormatSize(p.Min)))
			}
			return leave("/dev/shm size %s was chosen explicitly (--shm-size or the engine's default-shm-size); left alone", policy.FormatSize(sh.Size))
		}
		if target <= pl.Current {
			return leave("%s; /dev/shm is already %s", why, policy.FormatSize(pl.Current))
		}
		if p.Mode == policy.ModeIPCHost && HasPrivateIPC(s) && !requested {
			pl.Action, pl.Size, pl.Reason = ActionIPCHost, 0, why+"; mode ipc-host: share the host's IPC namespace and /dev/shm"
			return pl
		}
		return act(pl, ActionSetSize, target, why)

	case ShmEngine:
		if c := pl.Container; c.SandboxID != "" && c.Engine == sh.Engine && sh.OwnerID != c.SandboxID {
			return leave("/dev/shm binds %s, which belongs to sandbox %s, not this pod's %s; left alone", sh.Source, sh.OwnerID, c.SandboxID)
		}
		if p.Mode == policy.ModeMount {
			return leave("%s; but /dev/shm is the %s host tmpfs %q and mode \"mount\" never remounts on the host", why, sh.Engine, sh.Source)
		}
		if pl.Current != 0 && !policy.IsEngineDefaultShm(pl.Current) && !requested {
			if !p.EnforceMin || pl.Current >= p.Min {
				return leave("the shared /dev/shm is already %s (chosen explicitly); left alone", policy.FormatSize(pl.Current))
			}
			target, why = p.Min, fmt.Sprintf("enforce_min: shared /dev/shm %s raised to min %s", policy.FormatSize(pl.Current), policy.FormatSize(p.Min))
		}
		if pl.Current != 0 && target <= pl.Current {
			return leave("%s; the shared /dev/shm is already %s", why, policy.FormatSize(pl.Current))
		}
		return act(pl, ActionRemount, target, why+fmt.Sprintf("; grow the %s host tmpfs %s (shared, so every container of the pod or IPC group sees it)", sh.Engine, sh.Source))

	default: // ShmNone
		// Docker's --ipc none leaves /dev/shm out on purpose; only mode
		// "mount", which is about giving containers their own mounts, adds one.
		if p.Mode != policy.ModeMount {
			return leave("%s; but the spec mounts nothing at /dev/shm (docker --ipc none does so on purpose); mode \"mount\" would add a tmpfs", why)
		}
		return act(pl, ActionInject, target, why+"; the spec mounts nothing at /dev/shm: add a tmpfs (mode \"mount\")")
	}
}

func act(pl Plan, a Action, size int64, reason string) Plan {
	pl.Action, pl.Size, pl.Reason = a, size, reason
	return pl
}

func mountWord(sh Shm) string {
	if sh.Type == "tmpfs" {
		return "tmpfs"
	}
	if sh.Type != "" {
		return sh.Type + " mount"
	}
	return "mount"
}

// requestedSize returns the size an allowed annotation asks for, capped by
// the policy.
func requestedSize(s *specs.Spec, p *policy.Policy) (int64, string, bool) {
	for _, key := range p.AllowedAnnotations {
		v, ok := s.Annotations[key]
		if !ok {
			continue
		}
		n, err := policy.ParseAnySize(v)
		if err != nil || n == 0 {
			continue
		}
		capped, note := p.CapRequest(n)
		return capped, fmt.Sprintf("annotation %s=%s asks for %s%s", key, v, policy.FormatSize(n), note), true
	}
	return 0, "", false
}
