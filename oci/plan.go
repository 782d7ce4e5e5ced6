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
	Current int64 `json:"current_bytes"`
	GPU     bool  `json:"gpu"`
	GPUs    int   `json:"gpus"`
	// Applies says the policy applies to the container: an allowed
	// annotation asks for a size, it has GPU evidence, or the policy
	// matches every container. Only such a container is ever sized; the
	// front doors read this, never derive it.
	Applies bool `json:"applies"`
	// Requested says the target is the user's own request (an allowed
	// annotation), capped by the policy, rather than the policy's size.
	Requested bool   `json:"requested"`
	Reason    string `json:"reason"`

	// Target is the size the policy gives this container, whatever the
	// action (a user's own choice may leave it smaller; a container the
	// policy does not match gets it only if it matched), and Why how it
	// was reached.
	Target int64  `json:"-"`
	Why    string `json:"-"`
	// Shm is the classification the plan rests on; a remount acts on
	// Shm.Source, a set-size on the mount at Shm.Index.
	Shm Shm `json:"-"`
	// Evidence lists the GPU signals found.
	Evidence []string `json:"-"`
	// Pod says where the container sits in a pod.
	Pod Pod `json:"-"`
	// Warnings are the notices of choices in the container that defeat
	// its /dev/shm, for every front door to pass on (see Warning).
	Warnings []Warning `json:"warnings,omitempty"`
}

// Facts are what the host says, as far as a front door can learn it. One
// provider (engine/sysinfo.Facts) fills them for the host gpurun runs on.
type Facts struct {
	// HostMemory is the host's total memory in bytes, 0 when unknown.
	HostMemory int64
	// HostGPUs is the host's GPU count, used when a container asks for
	// "all" (and for --privileged); 0 when unknown.
	HostGPUs int
	// TmpfsSize, when set, returns the current size of a host tmpfs the
	// container binds (an engine's sandbox or shareable shm). The planner
	// stays pure when it is nil: the size is then unknown.
	TmpfsSize func(path string) (int64, error)
}

// Input is everything the planner looks at.
type Input struct {
	Container *Container
	Policy    *policy.Policy
	Facts     Facts
	// Portable says the answer is written into a file that runs on hosts
	// not known now (a compose file): without a memory limit, the policy's
	// compose_default is the target.
	Portable bool
	// EnforceMinWords names how this front door's user turns enforce_min
	// on ("--enforce-min"), for a warning of a size below the minimum; ""
	// names the policy's key.
	EnforceMinWords string
}

// Decide plans a container's /dev/shm. It never shrinks, never touches the
// host's own /dev/shm, never overrides a user's explicit mount or size unless
// the policy's enforce_min says so, and keeps an acting plan's size within
// the policy's [min, max]. It is the only place gpurun decides: every front
// door translates its input into a Container and asks it. The plan's
// Warnings say what in the container defeats its /dev/shm.
func Decide(in Input) Plan {
	if in.Container == nil {
		in.Container = FromSpec(nil)
	}
	if in.Container.Spec == nil {
		c := *in.Container
		c.Spec = &specs.Spec{}
		in.Container = &c
	}
	if in.Policy == nil {
		in.Policy = policy.Default()
	}
	pl := decide(in)
	pl.Warnings = warnings(in.Container, in.Policy, pl, in.EnforceMinWords)
	return pl
}

// decide is Decide's plan, without the warnings: what the container is
// (start), then what its /dev/shm calls for, by kind.
func decide(in Input) Plan {
	p, c := in.Policy, in.Container
	d := start(in)
	pl := d.pl
	if pl.Pod.Sandbox {
		return d.leave("pod sandbox: the pod's /dev/shm is grown when a GPU container of the pod is created")
	}
	if v := c.Spec.Annotations[policy.OptOutAnnotation]; strings.EqualFold(strings.TrimSpace(v), "true") {
		return d.leave("annotation %s=%s: left alone", policy.OptOutAnnotation, v)
	}
	if pl.Shm.Kind == ShmHost {
		d.pl.Current = 0
		return d.leave("shares the host's /dev/shm (host IPC); the host's /dev/shm is never resized")
	}
	if !pl.Applies {
		return d.leave("no GPU evidence (requests, env, devices, CDI, hooks, DRA claims); policy match is %q", p.Match)
	}
	switch pl.Shm.Kind {
	case ShmUser:
		return d.userMount(c, p)
	case ShmPrivate:
		return d.private(c, p)
	case ShmEngine:
		return d.engineTmpfs(c, p)
	}
	// ShmNone: Docker's --ipc none leaves /dev/shm out on purpose; only
	// mode "mount", which is about giving containers their own mounts,
	// adds one.
	if p.Mode != policy.ModeMount {
		return d.leave("%s; but the spec mounts nothing at /dev/shm (docker --ipc none does so on purpose); mode \"mount\" would add a tmpfs", pl.Why)
	}
	return act(pl, ActionInject, pl.Target, pl.Why+"; the spec mounts nothing at /dev/shm: add a tmpfs (mode \"mount\")")
}

// deciding is a plan being made: what the container is, and the target.
type deciding struct {
	pl Plan
}

// leave is a plan that leaves /dev/shm as it is, for the reason given.
func (d *deciding) leave(format string, a ...any) Plan {
	pl := d.pl
	pl.Action, pl.Size = ActionNone, pl.Current
	pl.Reason = fmt.Sprintf(format, a...)
	return pl
}

// start classifies the container's /dev/shm, judges its GPU evidence and
// works out the target: the size an allowed annotation asks for, else the
// policy's.
func start(in Input) *deciding {
	p, c, facts := in.Policy, in.Container, in.Facts
	s := c.Spec
	sh := ClassifyShm(s, facts.HostMemory)
	if c.JoinedIPC != "" {
		// Another container's shared tmpfs, somewhere the front door
		// cannot tell: of a size not known here.
		sh = Shm{Kind: ShmEngine, Index: -1}
	}
	gpu := EvidenceOf(p).DetectGPU(c, facts.HostGPUs)
	pl := Plan{Action: ActionNone, GPU: gpu.GPU, GPUs: gpu.Count, Shm: sh, Evidence: gpu.Evidence, Pod: CRIPod(s), Current: sh.Size}
	if gpu.GPU && gpu.Count == 0 && facts.HostGPUs > 0 {
		pl.GPUs = facts.HostGPUs
	}
	if sh.Kind == ShmEngine && facts.TmpfsSize != nil {
		if n, err := facts.TmpfsSize(sh.Source); err == nil {
			pl.Current = n
		}
	}
	// A size asked for by an allowed annotation is the user's own choice.
	target, why, requested := requestedSize(s, p)
	pl.Requested = requested
	pl.Applies = requested || gpu.GPU || p.Match == policy.MatchAll
	if !requested {
		req := policy.Request{MemoryLimit: MemoryLimit(s), HostMemory: facts.HostMemory, GPUs: pl.GPUs, Portable: in.Portable}
		if in.Portable {
			req.HostMemory = 0 // the host that will run it is not this one
		}
		target, why = p.Target(req)
		switch {
		case gpu.GPU:
			why = "GPU container (" + strings.Join(gpu.Evidence, ", ") + "): " + why
		case pl.Applies:
			why = "policy match \"all\": " + why
		}
	}
	pl.Target, pl.Why = target, why
	return &deciding{pl: pl}
}

// userMount decides for the user's own mount at /dev/shm: left alone,
// unless enforce_min raises a tmpfs of the spec's that is too small.
func (d *deciding) userMount(c *Container, p *policy.Policy) Plan {
	sh := d.pl.Shm
	if !p.EnforceMin || d.pl.Requested {
		return d.leave("the user mounts %s at /dev/shm; left alone", userMountWords(c, sh))
	}
	if sh.Type != "tmpfs" || IsBind(c.Spec.Mounts[sh.Index]) {
		return d.leave("the user mounts %s at /dev/shm; enforce_min cannot resize it from the spec", userMountWords(c, sh))
	}
	if sh.Size >= p.Min {
		return d.leave("the user's own tmpfs at /dev/shm is %s, at least the minimum %s", policy.FormatSize(sh.Size), policy.FormatSize(p.Min))
	}
	return act(d.pl, ActionSetSize, p.Min, fmt.Sprintf("enforce_min: the user's tmpfs at /dev/shm is %s, raised to min %s", policy.FormatSize(sh.Size), policy.FormatSize(p.Min)))
}

// private decides for the engine's own tmpfs of the container: sized to
// the target, unless someone chose its size.
func (d *deciding) private(c *Container, p *policy.Policy) Plan {
	pl, sh := d.pl, d.pl.Shm
	if chosen := c.ShmChoice != "" || !policy.IsEngineDefaultShm(sh.Size) && sh.Size != 0; chosen && !pl.Requested {
		// The user's words say so, or the size is not the engines' 64 MiB:
		// someone chose it (--shm-size, default-shm-size, containers.conf).
		by := "--shm-size or the engine's default-shm-size"
		if c.ShmChoice != "" {
			by = c.ShmChoice
		}
		if p.EnforceMin && sh.Size < p.Min {
			return act(pl, ActionSetSize, p.Min, fmt.Sprintf("enforce_min: explicit /dev/shm size %s (%s) raised to min %s", policy.FormatSize(sh.Size), by, policy.FormatSize(p.Min)))
		}
		return d.leave("/dev/shm size %s was chosen explicitly (%s); left alone", policy.FormatSize(sh.Size), by)
	}
	if pl.Target <= pl.Current {
		return d.leave("%s; /dev/shm is already %s", pl.Why, policy.FormatSize(pl.Current))
	}
	if p.Mode == policy.ModeIPCHost && HasPrivateIPC(c.Spec) && !pl.Requested {
		pl.Action, pl.Size, pl.Reason = ActionIPCHost, 0, pl.Why+"; mode ipc-host: share the host's IPC namespace and /dev/shm"
		return pl
	}
	return act(pl, ActionSetSize, pl.Target, pl.Why)
}

// engineTmpfs decides for a tmpfs the engine mounted on the host and the
// container binds (a pod's, an IPC group's): grown in place, for all who
// share it, unless it is another's or was chosen.
func (d *deciding) engineTmpfs(c *Container, p *policy.Policy) Plan {
	pl, sh := d.pl, d.pl.Shm
	target, why := pl.Target, pl.Why
	if c.JoinedIPC != "" {
		if p.Mode == policy.ModeMount {
			return d.leave("%s; but /dev/shm is the shared tmpfs of the IPC namespace it joins (%s) and mode \"mount\" never remounts on the host", why, c.JoinedIPC)
		}
		return act(pl, ActionRemount, target, why+fmt.Sprintf("; /dev/shm is the shared tmpfs of the IPC namespace it joins (%s), of a size not known here: grow that one", c.JoinedIPC))
	}
	if pod := pl.Pod; pod.SandboxID != "" && pod.Engine == sh.Engine && sh.OwnerID != pod.SandboxID {
		return d.leave("/dev/shm binds %s, which belongs to sandbox %s, not this pod's %s; left alone", sh.Source, sh.OwnerID, pod.SandboxID)
	}
	if p.Mode == policy.ModeMount {
		return d.leave("%s; but /dev/shm is the %s host tmpfs %q and mode \"mount\" never remounts on the host", why, sh.Engine, sh.Source)
	}
	if pl.Current != 0 && !policy.IsEngineDefaultShm(pl.Current) && !pl.Requested {
		if !p.EnforceMin || pl.Current >= p.Min {
			return d.leave("the shared /dev/shm is already %s (chosen explicitly); left alone", policy.FormatSize(pl.Current))
		}
		target, why = p.Min, fmt.Sprintf("enforce_min: shared /dev/shm %s raised to min %s", policy.FormatSize(pl.Current), policy.FormatSize(p.Min))
	}
	if pl.Current != 0 && target <= pl.Current {
		return d.leave("%s; the shared /dev/shm is already %s", why, policy.FormatSize(pl.Current))
	}
	return act(pl, ActionRemount, target, why+fmt.Sprintf("; grow the %s host tmpfs %s (shared, so every container of the pod or IPC group sees it)", sh.Engine, sh.Source))
}

func act(pl Plan, a Action, size int64, reason string) Plan {
	pl.Action, pl.Size, pl.Reason = a, size, reason
	return pl
}

// userMountWords names a user's /dev/shm mount: in the user's own words
// where a front door described it (WithUserShm), else by the spec's type
// and source.
func userMountWords(c *Container, sh Shm) string {
	if c.UserShm != "" {
		return c.UserShm
	}
	return fmt.Sprintf("their own %s (source %q)", mountWord(sh), sh.Source)
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
	key, v, n, ok := annotationRequest(s, p)
	if !ok {
		return 0, "", false
	}
	capped, note := p.CapRequest(n)
	return capped, fmt.Sprintf("annotation %s=%s asks for %s%s", key, v, policy.FormatSize(n), note), true
}

// annotationRequest returns the first allowed annotation that asks for a
// size, its value and the size it asks for, before the policy caps it.
func annotationRequest(s *specs.Spec, p *policy.Policy) (key, value string, n int64, ok bool) {
	for _, key := range p.AllowedAnnotations {
		v, ok := s.Annotations[key]
		if !ok {
			continue
		}
		n, err := policy.ParseAnySize(v)
		if err != nil || n == 0 {
			continue
		}
		return key, v, n, true
	}
	return "", "", 0, false
}
