package doctor

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/gpurun/gpurun/internal/cfgtree"
)

var sprintf = fmt.Sprintf

// The recordings' objects that the variants change.
const (
	agentPodName = "gpurun-node-6hdmz"
	agentConfig  = "gpurun-node-79tm6c4c9d"
	// earlyStart is when pod early (agent-not-ready) started.
	earlyStart = "2026-12-06T12:51:32Z"
)

// agentReady makes the recorded agent pod ready since a time.
func agentReady(since string) func(t *testing.T, f *fakeAPI) {
	return func(t *testing.T, f *fakeAPI) {
		f.edit(t, "Pod", named(agentPodName), func(m map[string]any) {
			cfgtree.Set(m, []string{"status", "conditions"}, []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": since}})
		})
	}
}

// setAsDefault sets the recorded agent's set-as-default setting.
func setAsDefault(v string) func(t *testing.T, f *fakeAPI) {
	return func(t *testing.T, f *fakeAPI) {
		f.edit(t, "ConfigMap", named(agentConfig), func(m map[string]any) { cfgtree.Set(m, []string{"data", "set-as-default"}, v) })
	}
}

// optIn takes the recorded namespace's gpurun.io/webhook=disabled off.
func optIn(t *testing.T, f *fakeAPI) {
	f.edit(t, "Namespace", nil, func(m map[string]any) {
		delete(m["metadata"].(map[string]any)["labels"].(map[string]any), "gpurun.io/webhook")
	})
}

// both runs edits in order.
func both(edits ...func(t *testing.T, f *fakeAPI)) func(t *testing.T, f *fakeAPI) {
	return func(t *testing.T, f *fakeAPI) {
		for _, e := range edits {
			e(t, f)
		}
	}
}

// podCases are the recorded cases of the cluster test and variants of
// them: every verdict doctor --pod gives.
func podCases() []podCase {
	return append(recordedCases(), variantCases()...)
}

// recordedCases are the cluster test's cases as it recorded them.
func recordedCases() []podCase {
	return []podCase{
		{name: "a sized GPU pod", dir: "webhook-sized", golden: true, exit: 0,
			checks: map[string]Status{"pod": OK, "policy": OK, "decision": OK, "shm.door": OK, "restarts": OK, "log": OK, "events": OK, "node": OK, "node.agent": OK, "webhook": OK},
			detail: map[string]string{"shm.door": "volume gpurun-shm (emptyDir, medium Memory, sizeLimit 1Gi): a tmpfs of 1GiB", "policy": "the cluster's policy (ConfigMap gpurun-system/gpurun-policy)"}},
		{name: "a GPU pod in a namespace the webhook leaves out", dir: "webhook-left-out", golden: true, exit: 1,
			checks: map[string]Status{"shm.door": Problem, "webhook": Warn, "node.agent": OK},
			detail: map[string]string{"shm.door": "the runtime's 64MiB", "webhook": "this GPU pod's namespace is left out of gpurun's webhook"},
			fix:    map[string]string{"shm.door": "kubectl label namespace doctor-batch gpurun.io/webhook-", "webhook": "kubectl -n doctor-batch delete pod unsized"}},
		{name: "SIGBUS", dir: "sigbus", golden: true, exit: 1,
			checks: map[string]Status{"shm.door": Problem, "restarts": Problem, "log": Problem},
			detail: map[string]string{"restarts": "exit code 135 (Error): 128+7, SIGBUS", "log": "torch-dataloader-bus-error, certain"},
			fix:    map[string]string{"restarts": "sizeLimit: 1Gi", "log": "kubectl label namespace doctor-batch gpurun.io/webhook-"}},
		{name: "restarts on leftovers", dir: "leftovers", golden: true, exit: 1,
			checks: map[string]Status{"decision": Warn, "shm.door": Problem, "restarts": Problem, "log": Problem},
			detail: map[string]string{"restarts": "what its earlier instances left in the pod's /dev/shm", "log": "shm-restart-leftovers", "shm.door": "below the policy minimum 1GiB"},
			fix:    map[string]string{"restarts": "kubectl -n doctor-ml delete pod leftovers", "log": `sweep = "restart"`, "shm.door": "the volume dshm mounted at /dev/shm: emptyDir: {medium: Memory, sizeLimit: 1Gi}"}},
		{name: "a reader without node access", dir: "reader", golden: true, exit: 2,
			allow:  []string{"get pods doctor-ml", "list pods doctor-ml", "get pods/log doctor-ml", "list events doctor-ml"},
			checks: map[string]Status{"pod": OK, "shm.door": OK, "log": OK, "events": OK, "node": Error, "node.agent": Error, "webhook": Error},
			detail: map[string]string{"node": `forbidden for "system:serviceaccount:doctor-ml:reader": needs get on nodes (cluster-scoped: a ClusterRole) (kubectl auth can-i get nodes)`,
				"node.agent": "needs get on daemonsets.apps in namespace gpurun-system",
				"webhook":    "needs get on mutatingwebhookconfigurations.admissionregistration.k8s.io",
				"policy":     "gpurun's built-in defaults", "decision": "gpurun gives this pod a /dev/shm of 1GiB"}},
		{name: "the node agent not ready", dir: "agent-not-ready", golden: true, exit: 1,
			checks: map[string]Status{"shm.door": Problem, "node.agent": Warn, "webhook": OK},
			detail: map[string]string{"shm.door": "the gpurun-node pod gpurun-node-6hdmz on node gpurun-node is not ready: Readiness probe failed: not ready: containerd"},
			fix:    map[string]string{"shm.door": "restart containerd on node gpurun-node", "node.agent": "--set nodeAgent.restart=systemd"}},
		{name: "OOM-killed with /dev/shm full", dir: "oom", golden: true, exit: 1,
			checks: map[string]Status{"shm.door": OK, "restarts": Problem, "events": Warn, "node.agent": OK},
			detail: map[string]string{"restarts": "the node reported: container trainer was OOM-killed with 300MiB of its 512MiB memory limit in /dev/shm", "shm.door": "ShmSized: sized /dev/shm to 384MiB"},
			fix:    map[string]string{"restarts": "resources.limits.memory: 1Gi in container trainer"}},
		{name: "a Job's pods", dir: "job", kind: "job", target: "train", golden: true, exit: 1,
			checks: map[string]Status{"owner": OK, "restarts": Problem, "log": Problem},
			detail: map[string]string{"owner": "job doctor-batch/train has 1 pod(s), the worst first: train-s92hl problem"},
			fix:    map[string]string{"restarts": "kubectl -n doctor-batch delete job train, then create it again"}},
		{name: "a pod that does not exist", dir: "webhook-sized", target: "no-such-pod", kind: "pod", exit: 2,
			checks: map[string]Status{"pod": Error},
			detail: map[string]string{"pod": "pod doctor-ml/no-such-pod does not exist"},
			fix:    map[string]string{"pod": "kubectl -n doctor-ml get pods"}},
	}
}

// notSizedEvent is a ShmNotSized Event on pod early, as gpurun's node
// agent posts one (observe/events).
// claimTemplate is a ResourceClaimTemplate of one device of a class
// (%s).
const claimTemplate = `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
  "metadata": {"name": "one-gpu", "namespace": "doctor-batch"},
  "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": %q, "allocationMode": "ExactCount", "count": 1}}]}}}}`

const notSizedEvent = `{"apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "ShmNotSized", "count": 1,
  "metadata": {"name": "early.shmnotsized", "namespace": "doctor-train"},
  "involvedObject": {"kind": "Pod", "namespace": "doctor-train", "name": "early", "uid": "%s"},
  "source": {"component": "gpurun", "host": "gpurun-node"}, "lastTimestamp": "2026-12-06T12:51:33Z",
  "message": "could not size /dev/shm (container trainer): grow /run/containerd/io.containerd.grpc.v1.cri/sandboxes/0a1b/shm: refused: not proven to be the pod's tmpfs; fix: add \"/run/containerd\" to engine_roots in /etc/gpurun/config.toml, or run gpurun in the host's PID namespace (a DaemonSet needs hostPID: true)"}`

// failedCreate is the Job controller's Warning when the API server
// refuses its pod.
const failedCreate = `{"apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "FailedCreate", "count": 3,
  "metadata": {"name": "train.failedcreate", "namespace": "doctor-batch"},
  "involvedObject": {"kind": "Job", "namespace": "doctor-batch", "name": "train", "uid": "%s"},
  "source": {"component": "job-controller"}, "lastTimestamp": "2026-12-06T12:50:40Z",
  "message": "Error creating: Internal error occurred: failed calling webhook \"gpu-pods.gpurun.io\": failed to call webhook: Post \"https://gpurun-webhook.gpurun-system.svc:443/mutate-pods\": no endpoints available for service \"gpurun-webhook\""}`

// uidOf reads the uid of the first recorded object of a kind and name.
func uidOf(t *testing.T, f *fakeAPI, kind, name string) string {
	t.Helper()
	var uid string
	f.edit(t, kind, named(name), func(m map[string]any) { uid, _ = field(m, "metadata", "uid").(string) })
	return uid
}

// variantCases change a recording into the cases the cluster test does
// not make: each of the node side's and the webhook's other answers, and
// what cannot be read.
func variantCases() []podCase {
	return slices.Concat(nodeVariants(), webhookVariants(), claimVariants())
}

// claimVariants are pods whose GPU is a DRA claim, from webhook-left-out:
// the decision reads the claim's template as the webhook does.
func claimVariants() []podCase {
	return []podCase{
		{name: "a GPU from a DRA claim", dir: "webhook-left-out", exit: 1, edit: claimedGPU("gpu.nvidia.com"),
			checks: map[string]Status{"decision": OK, "shm.door": Problem},
			detail: map[string]string{"decision": "gpurun gives this pod a /dev/shm of 1GiB: container trainer: GPU container (resources.claims gpu (resourceClaimTemplateName: one-gpu): request gpu: 1 of device class gpu.nvidia.com)",
				"shm.door": "the policy gives this GPU pod 1GiB"}},
		{name: "a DRA claim of another device", dir: "webhook-left-out", exit: 0, edit: claimedGPU("nic.example.com"),
			checks: map[string]Status{"decision": OK, "shm.door": OK},
			detail: map[string]string{"decision": "not a GPU pod"}},
		{name: "a DRA claim the doctor may not read", dir: "webhook-left-out", exit: 1, edit: claimedGPU("gpu.nvidia.com"),
			forbid: []string{"get resourceclaimtemplates.resource.k8s.io doctor-batch"},
			checks: map[string]Status{"decision": Warn, "shm.door": Problem},
			detail: map[string]string{"decision": "needs get on resourceclaimtemplates.resource.k8s.io (kubectl auth can-i get resourceclaimtemplates.resource.k8s.io -n doctor-batch)"}},
	}
}

// claimedGPU takes the recorded pod's GPU variable away and gives it a
// claim of a ResourceClaimTemplate one-gpu of the class instead.
func claimedGPU(class string) func(t *testing.T, f *fakeAPI) {
	return func(t *testing.T, f *fakeAPI) {
		f.edit(t, "Pod", named("unsized"), func(m map[string]any) {
			c := field(m, "spec", "containers").([]any)[0].(map[string]any)
			delete(c, "env")
			cfgtree.Set(c, []string{"resources", "claims"}, []any{map[string]any{"name": "gpu"}})
			cfgtree.Set(m, []string{"spec", "resourceClaims"}, []any{map[string]any{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}})
		})
		f.add(t, sprintf(claimTemplate, class))
	}
}

// nodeVariants are the node side's answers, from agent-not-ready.
func nodeVariants() []podCase {
	return []podCase{
		{name: "runtime-class mode, the pod without the class", dir: "agent-not-ready", edit: both(agentReady("2026-12-06T12:50:00Z"), setAsDefault("false")), exit: 1,
			checks: map[string]Status{"shm.door": Problem, "node.agent": OK},
			detail: map[string]string{"shm.door": "node gpurun-node runs gpurun in runtime-class mode: pods opt in with runtimeClassName: gpurun, and this pod has none",
				"node.agent": "mode runtime-class, which does not size this pod"},
			fix: map[string]string{"shm.door": "runtimeClassName: gpurun"}},
		{name: "default-runtime mode, no ShmSized Event", dir: "agent-not-ready", edit: agentReady("2026-12-06T12:50:00Z"), exit: 0,
			checks: map[string]Status{"shm.door": Warn, "node.agent": OK},
			detail: map[string]string{"shm.door": "no ShmSized Event says so"},
			fix:    map[string]string{"shm.door": "kubectl -n doctor-train exec early -- df -h /dev/shm"}},
		{name: "started before the agent was ready", dir: "agent-not-ready", edit: agentReady("2026-12-06T12:51:37Z"), exit: 1,
			checks: map[string]Status{"shm.door": Problem},
			detail: map[string]string{"shm.door": "the pod started (" + earlyStart + ") before the gpurun-node pod gpurun-node-6hdmz on node gpurun-node was ready (2026-12-06T12:51:37Z)"},
			fix:    map[string]string{"shm.door": "kubectl -n doctor-train delete pod early, then create it again"}},
		{name: "the node agent could not size it", dir: "agent-not-ready", exit: 1,
			edit: func(t *testing.T, f *fakeAPI) {
				f.add(t, sprintf(notSizedEvent, uidOf(t, f, "Pod", "early")))
			},
			checks: map[string]Status{"shm.door": Problem, "events": Warn},
			detail: map[string]string{"shm.door": "gpurun on the node did not size it (ShmNotSized: could not size /dev/shm"},
			fix:    map[string]string{"shm.door": `node:     add "/run/containerd" to engine_roots`}},
		{name: "the NRI plugin not ready", dir: "agent-not-ready", exit: 1,
			edit: func(t *testing.T, f *fakeAPI) {
				relabel := func(m map[string]any) {
					cfgtree.Set(m, []string{"metadata", "labels", "app.kubernetes.io/name"}, nriDaemonSet)
					cfgtree.Set(m, []string{"metadata", "name"}, nriDaemonSet)
				}
				f.edit(t, "DaemonSet", nil, relabel)
				f.edit(t, "Pod", named(agentPodName), func(m map[string]any) {
					cfgtree.Set(m, []string{"metadata", "labels", "app.kubernetes.io/name"}, nriDaemonSet)
				})
			},
			checks: map[string]Status{"shm.door": Problem, "node.agent": Warn},
			detail: map[string]string{"shm.door": "the gpurun-nri pod gpurun-node-6hdmz on node gpurun-node is not ready"}},
		{name: "the agent runs no pod on the node", dir: "agent-not-ready", exit: 1,
			edit:   func(t *testing.T, f *fakeAPI) { f.drop(t, "Pod", labelled("app.kubernetes.io/name", agentDaemonSet)) },
			checks: map[string]Status{"shm.door": Problem, "node.agent": Warn},
			detail: map[string]string{"shm.door": "gpurun's DaemonSet runs no pod on node gpurun-node"},
			fix:    map[string]string{"shm.door": "patch its nodeSelector or tolerations to take node gpurun-node in"}},
		{name: "no gpurun at all", dir: "agent-not-ready", exit: 1,
			edit: func(t *testing.T, f *fakeAPI) {
				f.drop(t, "DaemonSet", nil)
				f.drop(t, "ConfigMap", named(policyConfigMap))
			},
			checks: map[string]Status{"shm.door": Problem, "node.agent": OK, "webhook": OK, "policy": OK},
			detail: map[string]string{"policy": "no ConfigMap gpurun-system/gpurun-policy"},
			fix:    map[string]string{"shm.door": "kubectl apply -k deploy/kubernetes/overlays/webhook"}},
		{name: "a pod not started yet", dir: "agent-not-ready", exit: 1,
			edit: func(t *testing.T, f *fakeAPI) {
				f.edit(t, "Pod", named("early"), func(m map[string]any) {
					cfgtree.Set(m, []string{"spec", "nodeName"}, "")
					cfgtree.Set(m, []string{"status"}, map[string]any{"phase": "Pending"})
				})
			},
			checks: map[string]Status{"shm.door": Problem, "node": OK, "node.agent": OK, "restarts": OK, "log": OK},
			detail: map[string]string{"shm.door": "the pod has not started; its /dev/shm will be the runtime's 64MiB", "node": "not scheduled on a node yet"},
			fix:    map[string]string{"shm.door": "sizeLimit: 1Gi"}},
		{name: "a container not in the pod", dir: "agent-not-ready", kind: "pod", target: "early", container: "other", exit: 1,
			checks: map[string]Status{"pod": Error},
			detail: map[string]string{"pod": "it has no container other (--container)"}},
	}
}

// webhookVariants are the webhook's answers and what cannot be read,
// from webhook-left-out, sigbus and job.
func webhookVariants() []podCase {
	return []podCase{
		{name: "the webhook was down", dir: "webhook-left-out", exit: 1,
			edit: both(optIn, func(t *testing.T, f *fakeAPI) {
				f.edit(t, "Deployment", nil, func(m map[string]any) { cfgtree.Set(m, []string{"status", "readyReplicas"}, 0) })
			}),
			checks: map[string]Status{"shm.door": Problem, "webhook": Warn},
			detail: map[string]string{"shm.door": "the webhook was down or too slow when the pod was created, and pods.gpurun.io admits pods unchanged then (failurePolicy Ignore); 0 of 2 replicas ready now",
				"webhook": "0 of 2 replicas ready (none: pods with a GPU resource are refused, others admitted unchanged)"},
			fix: map[string]string{"shm.door": "sizeLimit: 1Gi"}},
		{name: "created before the webhook", dir: "webhook-left-out", exit: 1,
			edit: both(optIn, func(t *testing.T, f *fakeAPI) {
				f.edit(t, "MutatingWebhookConfiguration", nil, func(m map[string]any) {
					cfgtree.Set(m, []string{"metadata", "creationTimestamp"}, "2026-12-06T13:00:00Z")
				})
			}),
			checks: map[string]Status{"shm.door": Problem, "webhook": OK},
			detail: map[string]string{"shm.door": "the pod was created (2026-12-06T12:50:30Z) before the webhook's configuration (2026-12-06T13:00:00Z)"}},
		{name: "a hostIPC GPU pod", dir: "webhook-left-out", exit: 0,
			edit: func(t *testing.T, f *fakeAPI) {
				f.edit(t, "Pod", named("unsized"), func(m map[string]any) { cfgtree.Set(m, []string{"spec", "hostIPC"}, true) })
			},
			checks: map[string]Status{"shm.door": Warn},
			detail: map[string]string{"shm.door": "the host's /dev/shm (hostIPC: true)"}},
		{name: "the logs forbidden", dir: "sigbus", forbid: []string{"get pods/log doctor-batch"}, exit: 1,
			checks: map[string]Status{"restarts": Problem, "log": Error},
			detail: map[string]string{"log": "needs get on pods/log in namespace doctor-batch (kubectl auth can-i get pods/log -n doctor-batch)"}},
		{name: "the previous log gone", dir: "sigbus", exit: 1,
			edit:   func(t *testing.T, f *fakeAPI) { delete(f.logs, "doctor-batch/sigbus/trainer/previous") },
			checks: map[string]Status{"restarts": Problem, "log": Problem},
			detail: map[string]string{"log": "container trainer's previous log is gone"}},
		{name: "a Job without pods", dir: "job", kind: "job", target: "train", exit: 0,
			edit: func(t *testing.T, f *fakeAPI) {
				f.drop(t, "Pod", labelled("job-name", "train"))
				f.add(t, sprintf(failedCreate, uidOf(t, f, "Job", "train")))
			},
			checks: map[string]Status{"owner": Warn},
			detail: map[string]string{"owner": `job doctor-batch/train has no pods; Warning FailedCreate: Error creating: Internal error occurred: failed calling webhook "gpu-pods.gpurun.io"`}},
		{name: "a Job's two pods, the worst first", dir: "job", kind: "job", target: "train", exit: 1, edit: secondPod,
			checks: map[string]Status{"owner": OK},
			detail: map[string]string{"owner": "job doctor-batch/train has 2 pod(s), the worst first: train-s92hl problem, train-xm2pq problem"}},
		{name: "a Job that does not exist", dir: "job", kind: "job", target: "nope", exit: 2,
			checks: map[string]Status{"owner": Error},
			detail: map[string]string{"owner": "job doctor-batch/nope does not exist"},
			fix:    map[string]string{"owner": "kubectl -n doctor-batch get jobs"}},
	}
}

// secondPod adds a second pod to the recorded Job's: a copy of its pod,
// running without restarts.
func secondPod(t *testing.T, f *fakeAPI) {
	t.Helper()
	var copied map[string]any
	f.edit(t, "Pod", named("train-s92hl"), func(m map[string]any) {
		b, _ := json.Marshal(m)
		if err := json.Unmarshal(b, &copied); err != nil {
			t.Fatal(err)
		}
	})
	cfgtree.Set(copied, []string{"metadata", "name"}, "train-xm2pq")
	cfgtree.Set(copied, []string{"metadata", "uid"}, "0b5c0b1e-0000-4000-8000-000000000002")
	st := field(copied, "status", "containerStatuses").([]any)[0].(map[string]any)
	st["restartCount"] = 0
	delete(st, "lastState")
	b, err := json.Marshal(copied)
	if err != nil {
		t.Fatal(err)
	}
	f.add(t, string(b))
}
