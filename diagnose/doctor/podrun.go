package doctor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

// The modes of doctor's reports on Kubernetes objects read through the
// API server.
const (
	// ModePod: one pod.
	ModePod Mode = "kubernetes-pod"
	// ModeOwner: the pods a controller (a Job, a Deployment, …) owns.
	ModeOwner Mode = "kubernetes-owner"
)

// kube says a report is on Kubernetes objects.
func (m Mode) kube() bool { return m == ModePod || m == ModeOwner }

// How many of an owner's pods doctor reads, and shows in full.
const (
	maxOwnerPods = 20
	maxDetailed  = 3
)

// PodOptions name what doctor --pod looks at.
type PodOptions struct {
	// Kind is "pod" or an owner's kind (see ParseObject); Namespace and
	// Name name it.
	Kind, Namespace, Name string
	// Container is the one container to look at ("" every one).
	Container string
	// GPURunNamespace is where gpurun's node agents and webhook run.
	GPURunNamespace string
	// Policy is the local policy, for when the cluster's cannot be read.
	Policy PolicySource
}

// PodReport diagnoses a pod, or the pods an owner has (the worst first),
// from what the API server shows: the pod's spec and status, its Events
// and logs, its node, gpurun's node agent there and gpurun's webhook. A
// part that cannot be read (no permission, a log gone) is an error check
// that says which permission it needs; the rest still runs.
func PodReport(ctx context.Context, k *KubeClient, o PodOptions) *Report {
	if o.GPURunNamespace == "" {
		o.GPURunNamespace = DefaultGPURunNamespace
	}
	r := podReader{k: k, gpurunNS: o.GPURunNamespace, local: o.Policy}
	if o.Kind == "pod" {
		f := r.gather(ctx, o.Namespace, o.Name, o.Container)
		rep := &Report{Mode: ModePod, Target: o.Namespace + "/" + o.Name, Checks: podChecks(f)}
		return rep.finish()
	}
	return r.ownerReport(ctx, o)
}

// ownerReport is the report on an owner's pods: the owner check listing
// them worst first, then the worst pods' checks in full (each marked with
// its pod), and the other pods' checks that are not ok.
func (r podReader) ownerReport(ctx context.Context, o PodOptions) *Report {
	rep := &Report{Mode: ModeOwner, Target: o.Kind + " " + o.Namespace + "/" + o.Name}
	of := r.owner(ctx, o.Kind, o.Namespace, o.Name)
	pods := of.pods
	if len(pods) > maxOwnerPods {
		pods = pods[:maxOwnerPods]
	}
	var rs []podReport
	for i := range pods {
		f := &podFacts{namespace: o.Namespace, name: pods[i].Name, container: o.Container, gpurunNS: r.gpurunNS}
		r.gatherPod(ctx, f, &pods[i])
		cs := podChecks(f)
		rs = append(rs, podReport{pod: &pods[i], checks: cs, status: worstOf(cs)})
	}
	rankPods(rs)
	oc := ownerCheck(of, rs)
	if len(of.pods) > maxOwnerPods {
		oc.Detail += fmt.Sprintf("; the first %d of %d pods were read", maxOwnerPods, len(of.pods))
	}
	rep.add(oc)
	for i, pr := range rs {
		for _, c := range pr.checks {
			if i < maxDetailed || c.Status != OK {
				c.Subject = "pod " + pr.pod.Name
				rep.add(c)
			}
		}
	}
	return rep.finish()
}

// kubeObject is what a command line asks doctor to look at in a cluster:
// --pod, --job, --deployment, or kubectl's TYPE/NAME as CONTAINER; ok is
// false when it names none.
func (o RunOptions) kubeObject() (kind, name string, ok bool, err error) {
	type named struct{ flag, kind, name string }
	var asked []named
	for _, n := range []named{{"--pod", "pod", o.Pod}, {"--job", "job", o.Job}, {"--deployment", "deployment", o.Deployment}} {
		if n.name != "" {
			asked = append(asked, n)
		}
	}
	if k, n, isObj := ParseObject(o.Container); isObj {
		asked = append(asked, named{o.Container, k, n})
	}
	switch len(asked) {
	case 0:
		if o.kubeFlags() {
			return "", "", false, errors.New("doctor: -n, --context, --kubeconfig, --gpurun-namespace and --container NAME go with --pod, --job, --deployment or TYPE/NAME (pod/NAME, job/NAME, …)")
		}
		return "", "", false, nil
	case 1:
	default:
		return "", "", false, fmt.Errorf("doctor: %s and %s: name one pod or owner", asked[0].flag, asked[1].flag)
	}
	if o.Host || o.InContainer || o.CRI || o.hostFlags() || o.Probe != "" || o.Endpoint != "" || (o.Container != "" && asked[0].flag != o.Container) {
		return "", "", false, fmt.Errorf("doctor: %s looks at the cluster through its API; it does not go with CONTAINER, --cri, --host, --container (without a name), --host-root, --docker-config, --containerd-config, --runtime-endpoint or --probe", asked[0].flag)
	}
	return asked[0].kind, asked[0].name, true, nil
}

// kubeFlags says a flag of doctor --pod was given.
func (o RunOptions) kubeFlags() bool {
	k := o.Kube
	return k.Kubeconfig != "" || k.Context != "" || k.Namespace != "" || o.PodContainer != "" || o.GPURunNamespace != ""
}

// runPod is gpurun doctor --pod (or --job, --deployment, TYPE/NAME).
func (o RunOptions) runPod(ctx context.Context, kind, name string) error {
	k, ns, err := NewKubeClient(o.Kube)
	if err != nil {
		return exitcode.New(2, fmt.Errorf("doctor: %w", err))
	}
	if before, after, found := strings.Cut(name, "/"); found && kind == "pod" {
		if o.Kube.Namespace != "" && o.Kube.Namespace != before {
			return exitcode.New(2, fmt.Errorf("doctor: --pod %s names namespace %s, -n %s another", name, before, o.Kube.Namespace))
		}
		ns, name = before, after
	}
	if name == "" || ns == "" {
		return exitcode.New(2, fmt.Errorf("doctor: --pod %q: want NAME or NAMESPACE/NAME", name))
	}
	path, explicit := policy.ResolvePath(o.ConfigPath, o.Getenv)
	rep := PodReport(ctx, k, PodOptions{Kind: kind, Namespace: ns, Name: name, Container: o.PodContainer,
		GPURunNamespace: o.GPURunNamespace, Policy: PolicySource{Path: path, Explicit: explicit}})
	return WriteReport(o.Out, rep, o.JSON)
}
