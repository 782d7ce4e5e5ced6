package doctor

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kindNames are the names kubectl takes for a kind (TYPE in TYPE/NAME),
// by the kind doctor looks at: a pod, or a controller whose pods it looks
// at.
func kindNames() map[string][]string {
	return map[string][]string{
		"pod":         {"pod", "pods", "po"},
		"job":         {"job", "jobs"},
		"cronjob":     {"cronjob", "cronjobs", "cj"},
		"deployment":  {"deployment", "deployments", "deploy"},
		"statefulset": {"statefulset", "statefulsets", "sts"},
		"daemonset":   {"daemonset", "daemonsets", "ds"},
		"replicaset":  {"replicaset", "replicasets", "rs"},
	}
}

// ParseObject reads kubectl's TYPE/NAME ("pod/train-0", "job/train",
// "deploy/web"): the kind doctor looks at and the name; ok is false for
// anything else (a Docker container's name has no "/").
func ParseObject(arg string) (kind, name string, ok bool) {
	typ, name, found := strings.Cut(arg, "/")
	if !found || name == "" || strings.Contains(name, "/") {
		return "", "", false
	}
	typ = strings.ToLower(typ)
	if i := strings.IndexByte(typ, '.'); i > 0 {
		typ = typ[:i] // job.batch, deployment.apps
	}
	for k, names := range kindNames() {
		if slices.Contains(names, typ) {
			return k, name, true
		}
	}
	return "", "", false
}

// ownerReq is the API request for an owner kind's object ("" name: the
// list).
func ownerReq(kind, ns, name string) apiReq {
	switch kind {
	case "job", "cronjob":
		return apiReq{group: "batch", version: "v1", resource: kind + "s", namespace: ns, name: name}
	}
	return apps(kind+"s", ns, name)
}

// ownerObject is what doctor reads of a controller: its identity and the
// selector of its pods.
type ownerObject struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Selector *metav1.LabelSelector `json:"selector"`
	} `json:"spec"`
}

// ownerFacts is an owner and its pods.
type ownerFacts struct {
	kind, namespace, name string
	obj                   *ownerObject
	err                   error
	pods                  []corev1.Pod
	podsErr               error
	// warnings are the owner's Warning Events (a FailedCreate says why
	// it has no pods).
	warnings []corev1.Event
}

// owner reads an owner and the pods it owns.
func (r podReader) owner(ctx context.Context, kind, ns, name string) ownerFacts {
	o := ownerFacts{kind: kind, namespace: ns, name: name}
	var obj ownerObject
	if o.err = r.k.get(ctx, ownerReq(kind, ns, name), &obj); o.err != nil {
		return o
	}
	o.obj = &obj
	if evs, err := r.events(ctx, ns, "involvedObject.uid="+string(obj.Metadata.UID)); err == nil {
		for _, e := range evs {
			if e.Type == corev1.EventTypeWarning {
				o.warnings = append(o.warnings, e)
			}
		}
	}
	selectors, err := r.ownerSelectors(ctx, kind, &obj)
	if err != nil {
		o.podsErr = err
		return o
	}
	for _, sel := range selectors {
		var l corev1.PodList
		if err := r.k.get(ctx, withQuery(core("pods", ns, ""), "labelSelector", sel), &l); err != nil {
			o.podsErr = err
			return o
		}
		o.pods = append(o.pods, l.Items...)
	}
	return o
}

// ownerSelectors are the label selectors of an owner's pods: its own, or
// for a CronJob those of the Jobs it made.
func (r podReader) ownerSelectors(ctx context.Context, kind string, obj *ownerObject) ([]string, error) {
	objs := []ownerObject{*obj}
	if kind == "cronjob" {
		var jobs struct {
			Items []ownerObject `json:"items"`
		}
		if err := r.k.get(ctx, ownerReq("job", obj.Metadata.Namespace, ""), &jobs); err != nil {
			return nil, err
		}
		objs = slices.DeleteFunc(jobs.Items, func(j ownerObject) bool {
			return !slices.ContainsFunc(j.Metadata.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == obj.Metadata.UID })
		})
	}
	var out []string
	for _, o := range objs {
		sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
		if err != nil || o.Spec.Selector == nil {
			return nil, fmt.Errorf("%s %s has no pod selector", kind, o.Metadata.Name)
		}
		out = append(out, sel.String())
	}
	return out, nil
}

// podReport is one pod's checks and how bad they are.
type podReport struct {
	pod    *corev1.Pod
	checks []Check
	status Status
}

// rankPods orders pod reports worst first: by status, then restarts, then
// name.
func rankPods(rs []podReport) {
	rank := map[Status]int{Problem: 0, Error: 1, Warn: 2, OK: 3}
	restarts := func(p *corev1.Pod) int32 {
		var n int32
		for _, st := range p.Status.ContainerStatuses {
			n += st.RestartCount
		}
		return n
	}
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if rank[a.status] != rank[b.status] {
			return rank[a.status] < rank[b.status]
		}
		if ra, rb := restarts(a.pod), restarts(b.pod); ra != rb {
			return ra > rb
		}
		return a.pod.Name < b.pod.Name
	})
}

// worstOf is the worst status of checks.
func worstOf(cs []Check) Status {
	s := OK
	for _, c := range cs {
		s = worse(s, c.Status)
	}
	return s
}

// notOK names the checks that are not ok.
func notOK(cs []Check) []string {
	var out []string
	for _, c := range cs {
		if c.Status != OK {
			out = append(out, c.Name)
		}
	}
	return out
}

// ownerCheck says what an owner is and lists its pods, worst first.
func ownerCheck(o ownerFacts, rs []podReport) Check {
	c := Check{Name: "owner", Status: OK, Data: map[string]any{"kind": o.kind, "namespace": o.namespace, "name": o.name}}
	what := fmt.Sprintf("%s %s/%s", o.kind, o.namespace, o.name)
	switch {
	case isNotFound(o.err):
		c.Status, c.Detail = Error, what+" does not exist (not found)"
		c.Fix = fmt.Sprintf("kubectl -n %s get %ss", o.namespace, o.kind)
		return c
	case o.err != nil:
		c.Status, c.Detail = Error, fmt.Sprintf("%s cannot be read: %v", what, o.err)
		return c
	case o.podsErr != nil:
		c.Status, c.Detail = Error, fmt.Sprintf("the pods of %s cannot be read: %v", what, o.podsErr)
		return c
	}
	var names []string
	var rows []map[string]any
	for _, r := range rs {
		names = append(names, fmt.Sprintf("%s %s", r.pod.Name, r.status))
		rows = append(rows, map[string]any{"name": r.pod.Name, "status": string(r.status), "checks": notOK(r.checks)})
	}
	c.Data["pods"] = rows
	c.Detail = fmt.Sprintf("%s has %d pod(s), the worst first: %s", what, len(rs), strings.Join(names, ", "))
	if len(rs) == 0 {
		c.Status = Warn
		c.Detail = what + " has no pods"
	}
	for _, e := range o.warnings {
		c.Detail += fmt.Sprintf("; %s %s: %s", e.Type, e.Reason, e.Message)
	}
	return c
}

// Names lists the names of a kind's objects ("pod", "job", "deployment",
// …, "namespace") in the namespace of o (-n, else the kubeconfig's), for
// shell completion.
func Names(ctx context.Context, o KubeOptions, kind string) ([]string, error) {
	k, ns, err := NewKubeClient(o)
	if err != nil {
		return nil, err
	}
	var req apiReq
	switch kind {
	case "namespace":
		req = core("namespaces", "", "")
	case "pod":
		req = core("pods", ns, "")
	default:
		req = ownerReq(kind, ns, "")
	}
	var l struct {
		Items []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := k.get(ctx, req, &l); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(l.Items))
	for _, it := range l.Items {
		names = append(names, it.Metadata.Name)
	}
	return names, nil
}
