package doctor

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/policy"
)

// What doctor --pod reads, and how much.
const (
	// apiTimeout bounds one request to the API server.
	apiTimeout = 15 * time.Second
	// logTailLines and logLimitBytes bound the log read of each container
	// instance: the end of a log is where a crash is.
	logTailLines  = 300
	logLimitBytes = 512 << 10
	// DefaultGPURunNamespace is where the overlays put gpurun's node
	// agents and webhook (the Helm chart: the release's namespace).
	DefaultGPURunNamespace = "gpurun-system"
	// policyConfigMap is the ConfigMap of the cluster's policy, and its
	// key (deploy/kubernetes/base).
	policyConfigMap = "gpurun-policy"
	policyKey       = "config.toml"
	// agentDaemonSet and nriDaemonSet are the node agent's DaemonSets
	// (the runtime-class and default-runtime modes; the nri mode), whose
	// pods carry their names as app.kubernetes.io/name.
	agentDaemonSet = "gpurun-node"
	nriDaemonSet   = "gpurun-nri"
	// webhookConfig and webhookDeployment are the webhook's objects.
	webhookConfig     = "gpurun"
	webhookDeployment = "gpurun-webhook"
	// setAsDefaultEnv is the node agent's variable for its set-as-default
	// setting (from its ConfigMap).
	setAsDefaultEnv = "GPURUN_SET_AS_DEFAULT"
)

// podFacts is what doctor --pod read about one pod and what serves it;
// each err says why a part could not be read.
type podFacts struct {
	namespace, name string
	pod             *corev1.Pod
	podErr          error
	events          []corev1.Event
	eventsErr       error
	logs            map[string]*containerLogs
	node            *corev1.Node
	nodeErr         error
	ns              *corev1.Namespace
	nsErr           error
	pol             *policy.Policy
	// decision is podspec.DecideWith's for the pod as created (the
	// webhook's change undone), its DRA claims read from the API as the
	// webhook reads them; decisionErr why there is none.
	decision    podspec.Decision
	decisionErr error
	// policyFrom names where pol came from; policyErr why the cluster's
	// could not be used.
	policyFrom string
	policyErr  error
	agent      agentFacts
	webhook    webhookFacts
	// container is --container: the one container to look at ("" all).
	container string
	gpurunNS  string
}

// containerLogs are the ends of a container's current and previous logs.
type containerLogs struct {
	current, previous       []byte
	currentErr, previousErr error
	// wantPrevious says the container ran before (a restart, or it ended).
	wantPrevious bool
}

// agentFacts is gpurun's node side as seen from the API: its DaemonSets,
// its pods on the pod's node, their Events, the agent's mode.
type agentFacts struct {
	sets    map[string]*appsv1.DaemonSet
	setsErr error
	pods    []corev1.Pod
	podsErr error
	// events are the Events of the agent pods on the node.
	events    []corev1.Event
	eventsErr error
	// setAsDefault is the gpurun-node agent's set-as-default setting:
	// "true", "false", "" not known (modeErr says why).
	setAsDefault string
	modeErr      error
}

// webhookFacts is gpurun's webhook as seen from the API.
type webhookFacts struct {
	config    *admissionregistrationv1.MutatingWebhookConfiguration
	configErr error
	deploy    *appsv1.Deployment
	deployErr error
}

// podReader reads what doctor --pod needs through a KubeClient.
type podReader struct {
	k *KubeClient
	// gpurunNS is gpurun's namespace (--gpurun-namespace).
	gpurunNS string
	// local is the policy to decide with when the cluster's cannot be
	// read.
	local PolicySource
}

func core(resource, ns, name string) apiReq {
	return apiReq{version: "v1", resource: resource, namespace: ns, name: name}
}

func apps(resource, ns, name string) apiReq {
	return apiReq{group: "apps", version: "v1", resource: resource, namespace: ns, name: name}
}

func withQuery(r apiReq, kv ...string) apiReq {
	r.query = url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			r.query.Set(kv[i], kv[i+1])
		}
	}
	return r
}

// gather reads one pod and what serves it. A pod that cannot be read
// ends it: nothing else can be judged without it.
func (r podReader) gather(ctx context.Context, ns, name, container string) *podFacts {
	f := &podFacts{namespace: ns, name: name, container: container, gpurunNS: r.gpurunNS}
	var pod corev1.Pod
	if err := r.k.get(ctx, core("pods", ns, name), &pod); err != nil {
		f.podErr = err
		return f
	}
	r.gatherPod(ctx, f, &pod)
	return f
}

// gatherPod reads what serves a pod already read.
func (r podReader) gatherPod(ctx context.Context, f *podFacts, pod *corev1.Pod) {
	f.pod = pod
	f.events, f.eventsErr = r.events(ctx, pod.Namespace, "involvedObject.uid="+string(pod.UID))
	f.logs = r.logs(ctx, pod, f.container)
	if pod.Spec.NodeName != "" {
		var node corev1.Node
		if err := r.k.get(ctx, core("nodes", "", pod.Spec.NodeName), &node); err != nil {
			f.nodeErr = err
		} else {
			f.node = &node
		}
	}
	var nsObj corev1.Namespace
	if err := r.k.get(ctx, core("namespaces", "", pod.Namespace), &nsObj); err != nil {
		f.nsErr = err
	} else {
		f.ns = &nsObj
	}
	f.pol, f.policyFrom, f.policyErr = r.policy(ctx)
	f.decision, f.decisionErr = podspec.DecideWith(asCreated(pod), f.pol, r.claims(ctx, pod))
	f.agent = r.agent(ctx, pod.Spec.NodeName)
	f.webhook = r.webhook(ctx)
}

// claims reads the DRA objects a pod's resource claims name (nil for a
// pod without claims): the webhook counts a claim of a GPU class as a
// GPU, and so does the decision doctor shows. A claim the API does not
// give is judged as the policy's unresolved_claims says, its reason (the
// permission it needs) among the decision's warnings.
func (r podReader) claims(ctx context.Context, pod *corev1.Pod) podspec.Claims {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	return kube.DRA{Kube: &kube.Kube{Base: r.k.base, Client: r.k.hc}, Context: ctx, Timeout: apiTimeout}
}

// events lists the Events of a namespace that a field selector picks.
func (r podReader) events(ctx context.Context, ns, fieldSelector string) ([]corev1.Event, error) {
	var l corev1.EventList
	if err := r.k.get(ctx, withQuery(core("events", ns, ""), "fieldSelector", fieldSelector), &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// logs reads the end of each container's log, and of its previous
// instance's where it ran before: every container, or the one named.
func (r podReader) logs(ctx context.Context, pod *corev1.Pod, only string) map[string]*containerLogs {
	out := map[string]*containerLogs{}
	for _, st := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if only != "" && st.Name != only {
			continue
		}
		init := slices.ContainsFunc(pod.Status.InitContainerStatuses, func(s corev1.ContainerStatus) bool { return s.Name == st.Name })
		if init && st.RestartCount == 0 && (st.State.Terminated == nil || st.State.Terminated.ExitCode == 0) {
			continue // an init container that did its work: nothing to read
		}
		cl := &containerLogs{wantPrevious: st.RestartCount > 0}
		cl.current, cl.currentErr = r.log(ctx, pod, st.Name, false)
		if cl.wantPrevious {
			cl.previous, cl.previousErr = r.log(ctx, pod, st.Name, true)
		}
		out[st.Name] = cl
	}
	return out
}

func (r podReader) log(ctx context.Context, pod *corev1.Pod, container string, previous bool) ([]byte, error) {
	req := core("pods", pod.Namespace, pod.Name)
	req.sub = "log"
	req = withQuery(req, "container", container, "tailLines", strconv.Itoa(logTailLines),
		"limitBytes", strconv.Itoa(logLimitBytes), "previous", strconv.FormatBool(previous))
	return r.k.raw(ctx, req)
}

// policy is the cluster's policy (gpurun's ConfigMap) where it can be
// read, else the local one; from names it, err says why the cluster's
// was not used.
func (r podReader) policy(ctx context.Context) (pol *policy.Policy, from string, err error) {
	var cm corev1.ConfigMap
	name := r.gpurunNS + "/" + policyConfigMap
	err = r.k.get(ctx, core("configmaps", r.gpurunNS, policyConfigMap), &cm)
	if err == nil {
		data, ok := cm.Data[policyKey]
		if !ok {
			err = fmt.Errorf("ConfigMap %s has no key %s", name, policyKey)
		} else if pol, err = policy.Parse("ConfigMap "+name+" "+policyKey, []byte(data)); err == nil {
			return pol, "the cluster's policy (ConfigMap " + name + ")", nil
		}
	}
	local, lerr := policy.Load(r.local.Path, r.local.Explicit)
	if lerr != nil {
		return policy.Default(), "gpurun's built-in defaults", fmt.Errorf("%w; the local policy: %w", err, lerr)
	}
	from = "the local policy " + local.Source
	if local.Source == "" {
		from = "gpurun's built-in defaults"
	}
	return local, from, err
}

// agent reads gpurun's node side: its DaemonSets, its pods on node, their
// Events, the agent's set-as-default setting.
func (r podReader) agent(ctx context.Context, node string) agentFacts {
	a := agentFacts{sets: map[string]*appsv1.DaemonSet{}}
	for _, name := range []string{agentDaemonSet, nriDaemonSet} {
		var ds appsv1.DaemonSet
		switch err := r.k.get(ctx, apps("daemonsets", r.gpurunNS, name), &ds); {
		case err == nil:
			a.sets[name] = &ds
		case !isNotFound(err):
			a.setsErr = err
		}
	}
	if node == "" || len(a.sets) == 0 {
		return a
	}
	var pods corev1.PodList
	req := withQuery(core("pods", r.gpurunNS, ""), "labelSelector", "app.kubernetes.io/name in ("+agentDaemonSet+","+nriDaemonSet+")",
		"fieldSelector", "spec.nodeName="+node)
	if err := r.k.get(ctx, req, &pods); err != nil {
		a.podsErr = err
		return a
	}
	a.pods = pods.Items
	for _, p := range a.pods {
		evs, err := r.events(ctx, r.gpurunNS, "involvedObject.uid="+string(p.UID))
		if err != nil {
			a.eventsErr = err
			break
		}
		a.events = append(a.events, evs...)
		if p.Labels["app.kubernetes.io/name"] == agentDaemonSet && a.setAsDefault == "" {
			a.setAsDefault, a.modeErr = r.setAsDefault(ctx, p)
		}
	}
	return a
}

// setAsDefault reads the node agent's set-as-default setting: its
// variable's value, or the ConfigMap key it comes from.
func (r podReader) setAsDefault(ctx context.Context, p corev1.Pod) (string, error) {
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name != setAsDefaultEnv {
				continue
			}
			if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
				return e.Value, nil
			}
			ref := e.ValueFrom.ConfigMapKeyRef
			var cm corev1.ConfigMap
			if err := r.k.get(ctx, core("configmaps", p.Namespace, ref.Name), &cm); err != nil {
				return "", err
			}
			return cm.Data[ref.Key], nil
		}
	}
	return "false", nil
}

// webhook reads the webhook's configuration and Deployment.
func (r podReader) webhook(ctx context.Context) webhookFacts {
	var w webhookFacts
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	req := apiReq{group: "admissionregistration.k8s.io", version: "v1", resource: "mutatingwebhookconfigurations", name: webhookConfig}
	if err := r.k.get(ctx, req, &cfg); err == nil {
		w.config = &cfg
	} else if !isNotFound(err) {
		w.configErr = err
	}
	var d appsv1.Deployment
	if err := r.k.get(ctx, apps("deployments", r.gpurunNS, webhookDeployment), &d); err == nil {
		w.deploy = &d
	} else if !isNotFound(err) {
		w.deployErr = err
	}
	return w
}
