package remedy

import (
	"strings"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

// TestKubernetesSteps: each Kubernetes fix names what to write or run for
// the pod as its controller makes it: a patch of the template where it
// may change, a recreate where it may not (a Job, a pod of its own).
func TestKubernetesSteps(t *testing.T) {
	dep := PodTarget{Namespace: "ml", Name: "web-5d9c-x2", Containers: []string{"init", "app"}, OwnerKind: "Deployment", OwnerName: "web", GPURunNamespace: "gpurun-system"}
	job := PodTarget{Namespace: "ml", Name: "train-abcde", Containers: []string{"trainer"}, OwnerKind: "Job", OwnerName: "train", GPURunNamespace: "gpurun-system"}
	bare := PodTarget{Namespace: "ml", Name: "solo", Containers: []string{"trainer"}, Volume: "shm", GPURunNamespace: "gpurun-system"}
	cron := PodTarget{Namespace: "ml", Name: "nightly-1-x", Containers: []string{"trainer"}, OwnerKind: "CronJob", OwnerName: "nightly", GPURunNamespace: "gpurun-system"}
	for _, tc := range []struct {
		name   string
		steps  []Step
		want   []string
		absent []string
	}{
		{"emptyDir, a Deployment's", PodShm(dep, 8*policy.GiB), []string{
			"volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}], and in every container (init, app) volumeMounts: [{name: dshm, mountPath: /dev/shm}]",
			`kubectl -n ml patch deployment web -p '{"spec":{"template":{"spec":{"containers":[{"name":"init","volumeMounts":[{"mountPath":"/dev/shm","name":"dshm"}]},{"name":"app","volumeMounts":[{"mountPath":"/dev/shm","name":"dshm"}]}],"volumes":[{"emptyDir":{"medium":"Memory","sizeLimit":"8Gi"},"name":"dshm"}]}}}}'`,
		}, []string{"delete"}},
		{"emptyDir, a Job's: recreated", PodShm(job, 2*policy.GiB), []string{"sizeLimit: 2Gi", "kubectl -n ml delete job train, then create it again"}, []string{"patch"}},
		{"the pod's own volume, a bare pod", PodShm(bare, 1536*policy.MiB), []string{"the volume shm mounted at /dev/shm: emptyDir: {medium: Memory, sizeLimit: 1536Mi}", "kubectl -n ml delete pod solo, then create it again"}, []string{"dshm"}},
		{"a CronJob's template", PodShm(cron, policy.GiB), []string{`patch cronjob nightly -p '{"spec":{"jobTemplate":{"spec":{"template":{"spec":`}, nil},
		{"the RuntimeClass", RuntimeClass(dep), []string{"runtimeClassName: gpurun", `patch deployment web -p '{"spec":{"template":{"spec":{"runtimeClassName":"gpurun"}}}}'`,
			"helm upgrade gpurun deploy/helm/gpurun -n gpurun-system --reuse-values --set mode=default-runtime", "kubectl apply -k deploy/kubernetes/overlays/default-runtime"}, nil},
		{"the namespace's label", []Step{WebhookNamespace("batch")}, []string{"kubectl label namespace batch gpurun.io/webhook-"}, nil},
		{"containerd's restart", RestartContainerd("gpu-7", "gpurun-system"), []string{"restart containerd on node gpu-7", "--set nodeAgent.restart=systemd", "restart=systemd in the gpurun-node ConfigMap"}, nil},
		{"leftovers", Leftovers(job), []string{"kubectl -n ml delete pod train-abcde  (a new pod gets an empty /dev/shm; its Job makes it)", `sweep = "restart"`}, nil},
		{"leftovers of a bare pod", Leftovers(bare), []string{"kubectl -n ml delete pod solo, then create it again"}, nil},
		{"memory", MemoryLimit(dep, "app", 24*policy.GiB), []string{"resources.limits.memory: 24Gi in container app",
			`patch deployment web -p '{"spec":{"template":{"spec":{"containers":[{"name":"app","resources":{"limits":{"memory":"24Gi"}}}]}}}}'`}, nil},
		{"recreate a Deployment's pod", []Step{Recreate(dep)}, []string{"kubectl -n ml delete pod web-5d9c-x2  (its Deployment makes a new one)"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := Text(tc.steps)
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("steps lack %q:\n%s", w, all)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(all, a) {
					t.Errorf("steps have %q:\n%s", a, all)
				}
			}
		})
	}
}
