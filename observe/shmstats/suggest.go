package shmstats

import (
	"fmt"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/policy/remedy"
)

// The suggestion rule. A /dev/shm is near its ceiling when its measured
// peak is at least NearCeilingPercent of its size, and far below it when
// the size that fits the peak is at most a quarter of the size and at
// least FarBelowSlack smaller. The size that fits a peak (Fit) is the peak
// plus half of it, at least 64 MiB more, rounded up to a whole 64 MiB.
const (
	NearCeilingPercent = 90
	FarBelowSlack      = policy.GiB
	fitStep            = 64 * policy.MiB
)

// Fit returns the /dev/shm size that holds a measured peak with headroom:
// peak + max(peak/2, 64 MiB), rounded up to a multiple of 64 MiB.
func Fit(peak int64) int64 {
	n := peak + max(peak/2, fitStep)
	return (n + fitStep - 1) / fitStep * fitStep
}

// Measured is what Suggest needs to know about a container's /dev/shm.
type Measured struct {
	// Peak is the highest use measured, Size the size it has, in bytes.
	Peak, Size int64
	// Engine is the container's engine (EngineDocker, …, "" unknown).
	Engine string
	// Pod says it is a Kubernetes pod's container.
	Pod bool
	// Kind is oci.ShmKind's value (or KindHost).
	Kind string
	// Sized says the policy sizes this container (GPU, or match "all"),
	// GPUs is the GPU count the plan went by.
	Sized bool
	GPUs  int
	// Ref names the container for gpurun resize (its id), "" unknown;
	// Owner is the id of the container whose shared tmpfs it binds (a
	// Docker --ipc shareable group's), "" for none.
	Ref, Owner string
	// Target is the size the policy gives the container (oci.Plan.Target),
	// 0 unknown; Pending says gpurun's plan for it acts but was not carried
	// out (no gpurun front door started it).
	Target  int64
	Pending bool
}

// Measure returns what Suggest needs from a collected container.
func (c *Container) Measure() Measured {
	var owner string
	if _, id, ok := oci.EngineHostShm(c.Shm.Source); ok {
		owner = ShortID(id)
	}
	return Measured{Peak: max(c.Shm.Peak, c.Shm.Used), Size: c.Shm.Size, Engine: c.Engine, Pod: c.Pod != nil, Ref: ShortID(c.ID), Owner: owner,
		Kind: c.Shm.Kind, Sized: c.Decision.Applies, GPUs: c.Decision.GPUs,
		Target: c.Decision.Target, Pending: c.Decision.Action != "" && c.Decision.Action != string(oci.ActionNone) && !c.Decision.InEffect}
}

// Suggest returns the size a container's measured peak calls for and how
// to get it, or nil when the size fits the peak (neither near the ceiling
// nor far below it), nothing was measured, or the /dev/shm is the host's.
func Suggest(c *Container, pol *policy.Policy) *Suggestion {
	if !c.Shm.Tmpfs || c.Shm.HostIPC {
		return nil
	}
	return SuggestFor(c.Measure(), pol)
}

// SuggestFor is Suggest over a measurement (`gpurun plan --measured-peak`
// makes one from a plan).
func SuggestFor(m Measured, pol *policy.Policy) *Suggestion {
	if pol == nil {
		pol = policy.Default()
	}
	if m.Peak <= 0 || m.Size <= 0 || m.Kind == KindHost || m.Kind == string(oci.ShmHost) {
		return nil
	}
	fit := Fit(m.Peak)
	pct := float64(m.Peak) * 100 / float64(m.Size)
	var s Suggestion
	near := m.Peak*100 >= NearCeilingPercent*m.Size
	switch {
	case near:
		s.Why = fmt.Sprintf("near the ceiling: the peak %s is %.0f%% of the %s /dev/shm; %s holds it with headroom",
			policy.FormatSize(m.Peak), pct, policy.FormatSize(m.Size), policy.FormatSize(fit))
	case fit*4 <= m.Size && m.Size-fit >= FarBelowSlack:
		s.Why = fmt.Sprintf("far below the ceiling: the peak %s is %.1f%% of the %s /dev/shm; %s holds it with headroom (a tmpfs costs memory only for what is written, so a smaller size only bounds a runaway writer)",
			policy.FormatSize(m.Peak), pct, policy.FormatSize(m.Size), policy.FormatSize(fit))
	default:
		return nil
	}
	s.Size = fit
	s.Settings = settings(m, fit, pol, near)
	return &s
}

// settings lists the ways to give a container size bytes of /dev/shm: its
// front door's (remedy.For, from what stats knows of it), then a policy
// setting, only to grow (near), since the policy sizes every container it
// matches.
func settings(m Measured, size int64, pol *policy.Policy, near bool) []string {
	t := remedy.Target{Where: remedy.WhereFor(m.Engine, m.Pod), Ref: m.Ref}
	switch t.Where {
	case remedy.Pod:
		if len(pol.AllowedAnnotations) > 0 {
			t.Annotation = pol.AllowedAnnotations[0]
		}
	case remedy.Docker:
		if m.Kind == string(oci.ShmEngine) {
			t.Donor = m.Owner
		}
	}
	steps := remedy.For(t, size)
	switch {
	case !m.Sized || !near:
		// The policy does not size it, or sizes every container: no
		// policy setting to shrink one.
	case m.Pending && m.Target >= size:
		steps = append(steps, remedy.Step{Where: "gpurun", How: fmt.Sprintf("start it through a gpurun front door (gpurun run, gpurun-runtime, the hook, the NRI plugin): the policy already gives it %s", policy.FormatSize(m.Target))})
	case m.Target >= size:
		// The policy's size would do, but gpurun left this one alone (a
		// user's own choice): the settings above are the way.
	default:
		if pol.PerGPU > 0 && m.GPUs > 0 {
			per := (size + int64(m.GPUs) - 1) / int64(m.GPUs)
			per = (per + policy.MiB - 1) / policy.MiB * policy.MiB
			steps = append(steps, remedy.Step{Where: "policy", How: fmt.Sprintf("per_gpu = %q (x %d GPUs; sizes every GPU container the policy sizes)", policy.FormatSize(per), m.GPUs)})
		} else {
			steps = append(steps, remedy.Step{Where: "policy", How: fmt.Sprintf("min = %q (sizes every container the policy sizes at least this)", policy.FormatSize(size))})
		}
	}
	out := make([]string, 0, len(steps))
	for _, s := range steps {
		out = append(out, s.String())
	}
	return out
}
