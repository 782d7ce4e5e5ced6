package plan

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/policy"
)

var updateDRA = flag.Bool("update-dra", false, "rewrite diagnose/plan/testdata/dra/*.golden")

// draManifests are the real DRA manifests of kube/podspec/testdata/dra
// (its SOURCES names their repositories, paths and commits).
var draManifests = filepath.Join("..", "..", "kube", "podspec", "testdata", "dra")

// fakeCluster is an API server's resource.k8s.io/v1 with the objects
// given (by path), that forbids reading DeviceClasses.
func fakeCluster(t *testing.T, objects map[string]any) *kube.Kube {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/deviceclasses/") {
			http.Error(w, `{"kind":"Status","code":403,"message":"forbidden"}`, http.StatusForbidden)
			return
		}
		o, ok := objects[r.URL.Path]
		if !ok {
			http.Error(w, fmt.Sprintf(`{"kind":"Status","code":404,"message":"%s.resource.k8s.io \"%s\" not found"}`, filepath.Base(filepath.Dir(r.URL.Path)), filepath.Base(r.URL.Path)), http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(o)
	}))
	t.Cleanup(srv.Close)
	return &kube.Kube{Base: srv.URL, Client: srv.Client()}
}

// TestPlanDRAGolden: gpurun plan --pod on the DRA examples of NVIDIA's,
// AMD's and Intel's drivers and of the Kubernetes documentation: which
// claim made each pod a GPU pod, as testdata/dra/NAME.golden records it
// (go test -update-dra writes them anew).
func TestPlanDRAGolden(t *testing.T) {
	m := func(f string) string { return filepath.Join(draManifests, f) }
	fourGPUs := resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "fm-partition-2gpu"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "vfio.gpu.nvidia.com", Count: 4}}}}}}}
	tests := []struct {
		name    string
		pod     string
		files   []string
		policy  string
		cluster map[string]any // with --from-cluster, -n ml
		json    bool
	}{
		{name: "nvidia-gpu-test1", pod: m("nvidia-gpu-test1.yaml")},
		{name: "nvidia-gpu-test2", pod: m("nvidia-gpu-test2.yaml")},
		{name: "nvidia-gpu-test3", pod: m("nvidia-gpu-test3.yaml")},
		{name: "nvidia-gpu-test4", pod: m("nvidia-gpu-test4.yaml")},
		{name: "nvidia-gpu-test5", pod: m("nvidia-gpu-test5.yaml")},
		{name: "nvidia-fm-partition-dir", pod: m("nvidia-fm-partition")},
		{name: "nvidia-fm-partition-f", pod: m("nvidia-fm-partition/pod.yaml"), files: []string{m("nvidia-fm-partition/resourceClaimTemplates.yaml")}},
		{name: "nvidia-fm-partition-alone", pod: m("nvidia-fm-partition/pod.yaml")},
		{name: "nvidia-fm-partition-from-cluster", pod: m("nvidia-fm-partition/pod.yaml"),
			cluster: map[string]any{"/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates/fm-partition-2gpu": fourGPUs}},
		{name: "nvidia-fm-partition-not-in-cluster", pod: m("nvidia-fm-partition/pod.yaml"), cluster: map[string]any{}},
		{name: "nvidia-imex-channel-injection", pod: m("nvidia-imex-channel-injection.yaml")},
		{name: "nvidia-imex-channel-injection-ignored", pod: m("nvidia-imex-channel-injection.yaml"), policy: `unresolved_claims = "ignore"`},
		{name: "amd-example", pod: m("amd-example.yaml"), files: []string{m("amd-deviceclass.yaml")}},
		{name: "amd-partitions-same-parent", pod: m("amd-partitions-same-parent.yaml")},
		{name: "intel-pod-inline-first-available", pod: m("intel-pod-inline-first-available.yaml")},
		{name: "intel-deployment-extended-resources-implicit", pod: m("intel-deployment-extended-resources-implicit.yaml")},
		{name: "k8s-docs", pod: m("k8s-docs")},
		{name: "k8s-docs-driver-in-policy", pod: m("k8s-docs"), policy: "gpu_dra_drivers = [\"driver.example.com\"]\nper_gpu = \"2g\""},
		{name: "nvidia-gpu-test1-json", pod: m("nvidia-gpu-test1.yaml"), json: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			o := options(&out)
			o.PodPath, o.Files, o.JSON = tt.pod, tt.files, tt.json
			if tt.policy != "" {
				pol, err := policy.Parse("policy.toml", []byte(tt.policy))
				if err != nil {
					t.Fatal(err)
				}
				o.LoadPolicy = func() (*policy.Policy, error) { return pol, nil }
			}
			if tt.cluster != nil {
				o.FromCluster, o.Kube.Namespace = true, "ml"
				o.Cluster = kube.DRA{Kube: fakeCluster(t, tt.cluster)}
			}
			if err := Run(o); err != nil {
				t.Fatal(err)
			}
			got := strings.ReplaceAll(out.String(), filepath.ToSlash(draManifests)+"/", "")
			golden := filepath.Join("testdata", "dra", tt.name+".golden")
			if *updateDRA {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./diagnose/plan -update-dra writes it)", err)
			}
			if got != string(want) {
				t.Errorf("plan --pod %s differs from %s:\n%s", tt.pod, golden, got)
			}
		})
	}
}

// TestPlanDRAInput: what -f and --from-cluster need, and bad input named
// by file and document (exit 2).
func TestPlanDRAInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ns := write("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\n")
	typo := write("typo.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c}]}\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec: {spec: {devices: {requests: [{name: g, exactly: {deviceClasName: x}}]}}}\n")
	for _, tc := range []struct {
		name string
		set  func(*Options)
		want string
	}{
		{"-f without --pod", func(o *Options) { o.SpecPath, o.Files = "config.json", []string{ns} }, "-f and --from-cluster resolve a pod's claims: they go with --pod"},
		{"--from-cluster without --pod", func(o *Options) { o.SpecPath, o.FromCluster = "config.json", true }, "they go with --pod"},
		{"no pod in the files", func(o *Options) { o.PodPath = ns }, "no pod: want a Pod, or a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob (found Namespace)"},
		{"a typo in a template", func(o *Options) { o.PodPath = typo }, `typo.yaml: document 2: ResourceClaimTemplate: error unmarshaling JSON: while decoding JSON: json: unknown field "deviceClasName"`},
		{"a file not there", func(o *Options) { o.PodPath, o.Files = ns, []string{filepath.Join(dir, "none.yaml")} }, "none.yaml: no such file"},
		{"no kubeconfig", func(o *Options) {
			o.PodPath, o.FromCluster, o.Kube.Kubeconfig = filepath.Join(draManifests, "nvidia-gpu-test1.yaml"), true, filepath.Join(dir, "no-config")
		}, "--from-cluster: kubeconfig:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			o := options(&out)
			tc.set(&o)
			err := Run(o)
			if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v (exit %d), want exit 2 with %q", err, exitcode.Of(err), tc.want)
			}
		})
	}
}

// TestPlanDRAStdin: a pod on standard input, its template in a file.
func TestPlanDRAStdin(t *testing.T) {
	pod := `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: gpu-test1}
spec:
  resourceClaims: [{name: gpu, resourceClaimTemplateName: single-gpu}]
  containers: [{name: c, image: x, resources: {claims: [{name: gpu}], limits: {memory: 16Gi}}}]
`
	var out bytes.Buffer
	o := options(&out)
	o.PodPath, o.In, o.Files = "-", strings.NewReader(pod), []string{filepath.Join(draManifests, "nvidia-gpu-test1.yaml")}
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pod:      (stdin): Pod gpu-test1/p\naction:   emptydir (medium Memory, sizeLimit 8Gi",
		"container c: set-size, GPU (resources.claims gpu (resourceClaimTemplateName: single-gpu): request gpu: 1 of device class gpu.nvidia.com)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "pod:      "+filepath.Join(draManifests, "nvidia-gpu-test1.yaml")+": Pod gpu-test1/pod1") {
		t.Errorf("the pods of -f files are planned too:\n%s", out.String())
	}
}
