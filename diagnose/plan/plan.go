// Package plan is gpurun plan: the decision gpurun makes for a bundle's
// OCI spec (the shared planner, oci.Decide) or for a Kubernetes pod at
// admission (podspec.Decide), printed for people or as JSON, with the
// size a measured peak of /dev/shm use suggests. It changes nothing.
package plan

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// Options are gpurun plan's.
type Options struct {
	// SpecPath is a bundle's config.json; PodPath a file or directory of
	// Pods or workloads (every document of each file), "-" for In.
	// Exactly one is given.
	SpecPath, PodPath string
	// Files are more files or directories (-f), "-" for In: the
	// ResourceClaims, ResourceClaimTemplates and DeviceClasses the pods'
	// claims name (and more pods).
	Files []string
	// FromCluster resolves the claims the files do not from the cluster
	// Kube names (its kubeconfig, context and namespace: the namespace of
	// a pod that names none).
	FromCluster bool
	Kube        kube.KubeconfigOptions
	// Cluster, when set, stands for the cluster in tests.
	Cluster podspec.Claims
	// HostMemory is the host's memory as a size ("64g"); "" means this
	// host's, from Facts.
	HostMemory string
	// HostGPUs, when set, is the host's GPU count.
	HostGPUs *int
	// MeasuredPeak is the job's measured peak /dev/shm use ("1900Mi"), ""
	// for none.
	MeasuredPeak string
	// JSON prints one JSON object.
	JSON bool
	// LoadPolicy loads gpurun's policy.
	LoadPolicy func() (*policy.Policy, error)
	// Facts are this host's memory and GPUs (sysinfo.Facts).
	Facts func() (oci.Facts, error)
	In    io.Reader
	Out   io.Writer
}

// Run is gpurun plan: it prints the plan for o.SpecPath or the decision
// for o.PodPath. Errors for bad input carry exit status 2 (exitcode).
func Run(o Options) error {
	if (o.SpecPath == "") == (o.PodPath == "") {
		return exitcode.New(2, fmt.Errorf("plan: give one of --spec and --pod"))
	}
	pol, err := o.LoadPolicy()
	if err != nil {
		return exitcode.New(2, err)
	}
	var peak int64
	if o.MeasuredPeak != "" {
		if peak, err = policy.ParseAnySize(o.MeasuredPeak); err != nil || peak <= 0 {
			return exitcode.New(2, fmt.Errorf("plan: --measured-peak %q: want a positive size such as 1900Mi or 2g", o.MeasuredPeak))
		}
	}
	if o.PodPath != "" {
		return planPods(o, pol, peak)
	}
	if len(o.Files) > 0 || o.FromCluster {
		return exitcode.New(2, errors.New("plan: -f and --from-cluster resolve a pod's claims: they go with --pod"))
	}
	return spec(o, pol, peak)
}

// spec prints the plan for the bundle's config.json at o.SpecPath.
func spec(o Options, pol *policy.Policy, peak int64) error {
	cfg, err := specfile.Load(o.SpecPath)
	if err != nil {
		return exitcode.New(2, err)
	}
	facts, factsErr := o.Facts()
	if o.HostMemory != "" {
		if facts.HostMemory, err = policy.ParseSize(o.HostMemory); err != nil {
			return exitcode.New(2, fmt.Errorf("--host-memory: %w", err))
		}
	} else if facts.HostMemory == 0 {
		return exitcode.New(2, factsErr)
	}
	if o.HostGPUs != nil {
		facts.HostGPUs = *o.HostGPUs
	}
	pl := oci.Decide(oci.Input{Container: oci.FromSpec(cfg.Spec), Policy: pol, Facts: facts})
	var m *shmstats.Measured
	if peak > 0 {
		m = &shmstats.Measured{Peak: peak, Size: cmp.Or(pl.Size, pl.Current), Pod: pl.Pod.Engine != "" && !pl.Pod.Sandbox,
			Kind: string(pl.Shm.Kind), Sized: pl.Applies, GPUs: pl.GPUs, Target: pl.Target}
		if pl.Shm.Engine == oci.EngineDocker {
			m.Engine = shmstats.EngineDocker
		}
	}
	if o.JSON {
		if m != nil {
			return encode(o.Out, struct {
				oci.Plan
				Suggestion *shmstats.Suggestion `json:"suggestion"`
			}{pl, shmstats.SuggestFor(*m, pol)})
		}
		return encode(o.Out, pl)
	}
	text := FormatPlan(pl)
	if m != nil {
		text += FormatMeasured(*m, pol)
	}
	_, err = fmt.Fprint(o.Out, text)
	return err
}

// planPods prints the webhook's decision for each pod of o.PodPath (and of
// o.Files), their claims resolved from the objects of those files, and
// from the cluster with o.FromCluster.
func planPods(o Options, pol *policy.Policy, peak int64) error {
	set, err := o.load()
	if err != nil {
		return exitcode.New(2, fmt.Errorf("plan: %w", err))
	}
	claims, namespace, err := o.claims(set)
	if err != nil {
		return exitcode.New(2, fmt.Errorf("plan: %w", err))
	}
	for i, src := range set.Pods {
		p := src.Pod
		if p.Namespace == "" && namespace != "" {
			p = p.DeepCopy()
			p.Namespace = namespace
		}
		d, err := podspec.DecideWith(p, pol, claims)
		if err != nil {
			return exitcode.New(2, fmt.Errorf("plan: %s: %w", src.From, err))
		}
		if i > 0 && !o.JSON {
			fmt.Fprintln(o.Out)
		}
		if err := printPod(o, pol, peak, src.From, len(set.Pods) > 1, d); err != nil {
			return err
		}
	}
	return nil
}

// load reads o.PodPath and o.Files; standard input once, for whichever
// names it.
func (o Options) load() (*podspec.Set, error) {
	set := &podspec.Set{Objects: podspec.Objects{Where: "in the files given (-f FILE, or --from-cluster)"}}
	var stdin []byte
	paths := append([]string{o.PodPath}, o.Files...)
	for _, path := range paths {
		if path == "-" && stdin == nil {
			b, err := io.ReadAll(o.In)
			if err != nil {
				return nil, fmt.Errorf("read standard input: %w", err)
			}
			stdin = b
		}
		if err := set.LoadPath(path, stdin); err != nil {
			return nil, err
		}
	}
	return set, set.Check(paths)
}

// claims is what resolves the pods' claims: the objects of the files,
// then with --from-cluster the cluster's; and the namespace of a pod that
// names none (-n, else the context's with --from-cluster).
func (o Options) claims(set *podspec.Set) (podspec.Claims, string, error) {
	if !o.FromCluster {
		return &set.Objects, o.Kube.Namespace, nil
	}
	set.Objects.Where = "in the files given"
	cluster := o.Cluster
	namespace := o.Kube.Namespace
	if cluster == nil {
		k, ns, err := kube.FromKubeconfig(o.Kube)
		if err != nil {
			return nil, "", fmt.Errorf("--from-cluster: %w", err)
		}
		cluster, namespace = kube.DRA{Kube: k}, ns
	}
	return podspec.FirstOf(&set.Objects, cluster), namespace, nil
}

// printPod prints one pod's decision, with the suggestion for a measured
// peak; named says to name the pod (several were read).
func printPod(o Options, pol *policy.Policy, peak int64, from string, named bool, d podspec.Decision) error {
	var m *shmstats.Measured
	if peak > 0 {
		// Without an emptyDir the pod gets its runtime's /dev/shm: 64 MiB
		// from containerd and CRI-O, unless a node front door sizes it.
		m = &shmstats.Measured{Peak: peak, Size: policy.EngineDefaultShm, Pod: true, Sized: d.Applies}
		if d.Action == podspec.ActionEmptyDir {
			m.Size = d.Size
		}
		for _, c := range d.Plans {
			m.GPUs = max(m.GPUs, c.GPUs)
		}
	}
	if o.JSON {
		type podJSON struct {
			Pod string `json:"pod,omitempty"`
			podspec.Decision
		}
		out := podJSON{Decision: d}
		if named {
			out.Pod = from
		}
		if m != nil {
			return encode(o.Out, struct {
				podJSON
				Suggestion *shmstats.Suggestion `json:"suggestion"`
			}{out, shmstats.SuggestFor(*m, pol)})
		}
		return encode(o.Out, out)
	}
	text := FormatDecision(d)
	if named {
		text = "pod:      " + from + "\n" + text
	}
	if m != nil {
		text += FormatMeasured(*m, pol)
	}
	_, err := fmt.Fprint(o.Out, text)
	return err
}

// encode writes v as one JSON object.
func encode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// FormatPlan renders a container's plan for people.
func FormatPlan(pl oci.Plan) string {
	var b strings.Builder
	size := func(n int64) string {
		if n == 0 {
			return "unknown"
		}
		return policy.FormatSize(n)
	}
	fmt.Fprintf(&b, "action:   %s\n", pl.Action)
	fmt.Fprintf(&b, "/dev/shm: %s -> %s\n", size(pl.Current), size(pl.Size))
	shm := string(pl.Shm.Kind)
	if pl.Shm.Source != "" {
		shm += fmt.Sprintf(" (%s %s)", pl.Shm.Type, pl.Shm.Source)
	}
	fmt.Fprintf(&b, "mount:    %s\n", shm)
	if pl.GPU {
		n := "count unknown"
		if pl.GPUs > 0 {
			n = fmt.Sprintf("%d", pl.GPUs)
		}
		fmt.Fprintf(&b, "gpu:      yes, %s (%s)\n", n, strings.Join(pl.Evidence, ", "))
	} else {
		fmt.Fprintf(&b, "gpu:      no\n")
	}
	if pl.Pod.Engine != "" {
		role := "container"
		if pl.Pod.Sandbox {
			role = "sandbox"
		}
		fmt.Fprintf(&b, "pod:      %s %s of sandbox %s\n", pl.Pod.Engine, role, pl.Pod.SandboxID)
	}
	fmt.Fprintf(&b, "reason:   %s\n", pl.Reason)
	for _, w := range pl.Warnings {
		fmt.Fprintf(&b, "warning:  %s\n", w.Message)
	}
	return b.String()
}

// FormatDecision renders a pod's admission decision for people.
func FormatDecision(d podspec.Decision) string {
	var b strings.Builder
	head := string(d.Action)
	if d.Action == podspec.ActionEmptyDir {
		head += fmt.Sprintf(" (medium Memory, sizeLimit %s, at /dev/shm in every container)", policy.FormatQuantity(d.Size))
	}
	fmt.Fprintf(&b, "action:   %s\n", head)
	fmt.Fprintf(&b, "gpu:      %v\n", map[bool]string{true: "yes", false: "no"}[d.GPU])
	fmt.Fprintf(&b, "reason:   %s\n", d.Reason)
	for _, c := range d.Plans {
		kind := "container"
		if c.Init {
			kind = "init container"
		}
		gpu := "no GPU"
		if c.GPU {
			gpu = "GPU (" + strings.Join(c.Evidence, ", ") + ")"
		}
		fmt.Fprintf(&b, "  %s %s: %s, %s: %s\n", kind, c.Name, c.Action, gpu, c.Reason)
	}
	for _, w := range d.Warnings {
		fmt.Fprintf(&b, "warning:  %s\n", w)
	}
	return b.String()
}

// FormatMeasured renders the suggestion for a measured peak.
func FormatMeasured(m shmstats.Measured, pol *policy.Policy) string {
	s := shmstats.SuggestFor(m, pol)
	if s == nil {
		return fmt.Sprintf("measured: peak %s fits the %s /dev/shm (neither within %d%% of it nor far below it): no change\n",
			policy.FormatSize(m.Peak), policy.FormatSize(m.Size), shmstats.NearCeilingPercent)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "measured: suggest %s: %s\n", policy.FormatSize(s.Size), s.Why)
	for _, set := range s.Settings {
		fmt.Fprintf(&b, "  - %s\n", set)
	}
	return b.String()
}
