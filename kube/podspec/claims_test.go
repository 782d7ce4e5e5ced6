package podspec

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// loadSet reads testdata/dra's files (relative names) into a set.
func loadSet(t *testing.T, files ...string) *Set {
	t.Helper()
	s := &Set{}
	for _, f := range files {
		if err := s.LoadPath(filepath.Join("testdata", "dra", f), nil); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func mustPolicy(t *testing.T, text string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDecideClaimsRealManifests: the DRA examples of NVIDIA's, AMD's and
// Intel's drivers and of the Kubernetes documentation, each pod decided
// with the claim objects of its files: which containers are GPU
// containers, by which claim, and how many GPUs.
func TestDecideClaimsRealManifests(t *testing.T) {
	type ctr struct {
		name     string
		gpus     int    // -1: not a GPU container
		evidence string // a part of its evidence
	}
	tests := []struct {
		name   string
		files  []string
		policy string
		pod    string // the pod's From ends so
		action PodAction
		ctrs   []ctr
		warn   string // a part of a warning
	}{
		{name: "NVIDIA: a template for one GPU", files: []string{"nvidia-gpu-test1.yaml"}, pod: "Pod gpu-test1/pod1", action: ActionEmptyDir,
			ctrs: []ctr{{"ctr", 1, "resources.claims gpu (resourceClaimTemplateName: single-gpu): request gpu: 1 of device class gpu.nvidia.com"}}},
		{name: "NVIDIA: one GPU shared by two containers", files: []string{"nvidia-gpu-test2.yaml"}, pod: "Pod gpu-test2/pod", action: ActionEmptyDir,
			ctrs: []ctr{{"ctr0", 1, "resources.claims shared-gpu"}, {"ctr1", 1, "resources.claims shared-gpu"}}},
		{name: "NVIDIA: a ResourceClaim shared by two pods", files: []string{"nvidia-gpu-test3.yaml"}, pod: "Pod gpu-test3/pod2", action: ActionEmptyDir,
			ctrs: []ctr{{"ctr", 1, "resources.claims shared-gpu (resourceClaimName: single-gpu): request gpu: 1 of device class gpu.nvidia.com"}}},
		{name: "NVIDIA: four MIG devices, one request each", files: []string{"nvidia-gpu-test4.yaml"}, pod: "Deployment gpu-test4/pod (its pod template)", action: ActionEmptyDir,
			ctrs: []ctr{{"ctr0", 1, "request mig-1g-5gb-0: 1 of device class mig.nvidia.com"}, {"ctr3", 1, "resources.claims mig-devices, request mig-3g-20gb"}}},
		{name: "NVIDIA: time-slicing and MPS requests", files: []string{"nvidia-gpu-test5.yaml"}, pod: "Pod gpu-test5/pod0", action: ActionEmptyDir,
			ctrs: []ctr{{"ts-ctr0", 1, "request ts-gpu"}, {"mps-ctr0", 1, "request mps-gpu"}}},
		{name: "NVIDIA: two VFIO GPUs, the template in another file", files: []string{"nvidia-fm-partition"}, pod: "Pod fm-partition-pod", action: ActionEmptyDir,
			ctrs: []ctr{{"ctr", 2, "2 of device class vfio.gpu.nvidia.com"}}},
		{name: "NVIDIA: an IMEX channel whose template its controller makes", files: []string{"nvidia-imex-channel-injection.yaml"}, pod: "Pod imex-channel-injection", action: ActionEmptyDir,
			ctrs: []ctr{{"ctr", 0, "resources.claims imex-channel-0 (resourceClaimTemplateName: imex-channel-0), not resolved"}}, warn: "could not be read (ResourceClaimTemplate imex-channel-0 not found among the objects given)"},
		{name: "NVIDIA: the IMEX channel left out", files: []string{"nvidia-imex-channel-injection.yaml"}, policy: `unresolved_claims = "ignore"`, pod: "Pod imex-channel-injection", action: ActionNone,
			ctrs: []ctr{{"ctr", -1, ""}}, warn: `not counted as a GPU (policy unresolved_claims = "ignore")`},
		{name: "AMD: a template for one GPU", files: []string{"amd-example.yaml", "amd-deviceclass.yaml"}, pod: "Pod gpu-test/pod1", action: ActionEmptyDir,
			ctrs: []ctr{{"ctr0", 1, "1 of device class gpu.amd.com"}}},
		{name: "AMD: two partitions of one GPU", files: []string{"amd-partitions-same-parent.yaml"}, pod: "Pod gpu-test/pod-two-partitions-same-parent", action: ActionEmptyDir,
			ctrs: []ctr{{"ctr0", 2, "request p0: 1 of device class gpu.amd.com; request p1: 1 of device class gpu.amd.com"}}},
		{name: "Intel: a GPU or a Gaudi, the first available", files: []string{"intel-pod-inline-first-available.yaml"}, pod: "Pod test-inline-first-available", action: ActionEmptyDir,
			ctrs: []ctr{{"with-resource", 1, "request ai-accelerator: the first available of gpu.intel.com, gaudi.intel.com"}, {"without-resource", -1, ""}}},
		{name: "Intel: the DeviceClass's extended resource", files: []string{"intel-deployment-extended-resources-implicit.yaml"}, pod: "Deployment dra-implicit-extended-resource-example (its pod template)", action: ActionEmptyDir,
			ctrs: []ctr{{"workload", 1, "resources.limits deviceclass.resource.kubernetes.io/gpu.intel.com: 1"}}},
		{name: "Kubernetes docs: a class of an example driver; the shared claim not given", files: []string{"k8s-docs"}, pod: "Job example-dra-job (its pod template)", action: ActionEmptyDir,
			ctrs: []ctr{{"container0", -1, ""}, {"container1", 0, "resources.claims shared-gpu-claim (resourceClaimName: example-resource-claim), not resolved: counted as a GPU"}}, warn: "containers container1, container2: resources.claims shared-gpu-claim"},
		{name: "Kubernetes docs: the example driver is a GPU's in the policy", files: []string{"k8s-docs"}, policy: "gpu_dra_drivers = [\"driver.example.com\"]\nunresolved_claims = \"ignore\"", pod: "Job example-dra-job (its pod template)", action: ActionEmptyDir,
			ctrs: []ctr{{"container0", 1, "request gpu-claim: 1 of device class example-device-class (driver driver.example.com)"}, {"container1", -1, ""}},
			warn: "containers container1, container2: resources.claims shared-gpu-claim (resourceClaimName: example-resource-claim) could not be read (ResourceClaim example-resource-claim not found among the objects given): not counted as a GPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := loadSet(t, tt.files...)
			var pod *corev1.Pod
			for _, src := range s.Pods {
				if strings.HasSuffix(src.From, tt.pod) {
					pod = src.Pod
				}
			}
			if pod == nil {
				t.Fatalf("no pod %q among %+v", tt.pod, s.Pods)
			}
			d, err := DecideWith(pod, mustPolicy(t, tt.policy), &s.Objects)
			if err != nil {
				t.Fatal(err)
			}
			if d.Action != tt.action {
				t.Errorf("action %s (%s), want %s", d.Action, d.Reason, tt.action)
			}
			for _, c := range tt.ctrs {
				var got *ContainerPlan
				for i := range d.Plans {
					if d.Plans[i].Name == c.name {
						got = &d.Plans[i]
					}
				}
				switch {
				case got == nil:
					t.Errorf("no container %s", c.name)
				case c.gpus < 0 && got.GPU:
					t.Errorf("container %s: a GPU container (%s), want none", c.name, got.Evidence)
				case c.gpus >= 0 && (!got.GPU || got.GPUs != c.gpus || !strings.Contains(strings.Join(got.Evidence, "; "), c.evidence)):
					t.Errorf("container %s: GPU %v, %d, %q; want %d with %q", c.name, got.GPU, got.GPUs, got.Evidence, c.gpus, c.evidence)
				}
			}
			warnings := strings.Join(d.Warnings, "\n")
			if tt.warn == "" && warnings != "" || !strings.Contains(warnings, tt.warn) {
				t.Errorf("warnings %q, want %q", d.Warnings, tt.warn)
			}
		})
	}
}

// fakeClaims answers from maps, and says "forbidden" for anything else.
type fakeClaims struct {
	claims    map[string]*resourcev1.ResourceClaim
	templates map[string]*resourcev1.ResourceClaimTemplate
	classes   map[string]*resourcev1.DeviceClass
}

var errForbidden = errors.New("forbidden")

func (f fakeClaims) ResourceClaim(ns, name string) (*resourcev1.ResourceClaim, error) {
	if c, ok := f.claims[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, errForbidden
}

func (f fakeClaims) ResourceClaimTemplate(ns, name string) (*resourcev1.ResourceClaimTemplate, error) {
	if c, ok := f.templates[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, errForbidden
}

func (f fakeClaims) DeviceClass(name string) (*resourcev1.DeviceClass, error) {
	if c, ok := f.classes[name]; ok {
		return c, nil
	}
	return nil, errForbidden
}

// TestClaimTranslation: what the translator hands over for each shape of
// claim, before any judgement: its words, the requests a container gets
// (all, or the one it names), counts and modes as written, subrequests,
// the drivers a DeviceClass selects, a running pod's own claim with its
// allocation, and why a claim could not be read.
func TestClaimTranslation(t *testing.T) {
	str := func(s string) *string { return &s }
	exactly := func(name, class string, mode resourcev1.DeviceAllocationMode, n int64) resourcev1.DeviceRequest {
		return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: n}}
	}
	devices := resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
		exactly("all", "a100", resourcev1.DeviceAllocationModeAll, 0),
		exactly("two", "gpu.nvidia.com", resourcev1.DeviceAllocationModeExactCount, 2),
		{Name: "any", FirstAvailable: []resourcev1.DeviceSubRequest{{Name: "big", DeviceClassName: "gpu.nvidia.com", Count: 1}, {Name: "mig", DeviceClassName: "mig.nvidia.com"}}},
	}}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: "ml", Name: name} }
	claims := fakeClaims{
		templates: map[string]*resourcev1.ResourceClaimTemplate{"ml/t": {ObjectMeta: meta("t"), Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: devices}}}},
		claims: map[string]*resourcev1.ResourceClaim{
			"ml/shared": {ObjectMeta: meta("shared"), Spec: resourcev1.ResourceClaimSpec{Devices: devices}},
			"ml/pod-gpu-x7k2p": {ObjectMeta: meta("pod-gpu-x7k2p"), Spec: resourcev1.ResourceClaimSpec{Devices: devices},
				Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
					{Request: "two", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0"}, {Request: "any/mig", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "mig-1"}}}}}},
		},
		classes: map[string]*resourcev1.DeviceClass{"a100": {ObjectMeta: metav1.ObjectMeta{Name: "a100"}, Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{
			{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].productName == "A100"`}}}}}},
	}
	pod := func(rc corev1.PodResourceClaim, ref corev1.ResourceClaim, status ...corev1.PodResourceClaimStatus) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: meta("p"), Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{rc},
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{ref}}}}}}
		p.Status.ResourceClaimStatuses = status
		return p
	}
	tmpl := corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: str("t")}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		claims Claims
		want   oci.Claim
	}{
		{"every request of a template", pod(tmpl, corev1.ResourceClaim{Name: "gpu"}), claims, oci.Claim{Words: "resources.claims gpu (resourceClaimTemplateName: t)", Name: "gpu", Requests: []oci.ClaimRequest{
			{Name: "all", DeviceClass: "a100", AllocationMode: "All", ClassDrivers: []string{"gpu.nvidia.com"}},
			{Name: "two", DeviceClass: "gpu.nvidia.com", AllocationMode: "ExactCount", Count: 2},
			{Name: "any", FirstAvailable: []oci.ClaimRequest{{Name: "any/big", DeviceClass: "gpu.nvidia.com", Count: 1}, {Name: "any/mig", DeviceClass: "mig.nvidia.com"}}},
		}}},
		{"the request a container names", pod(tmpl, corev1.ResourceClaim{Name: "gpu", Request: "two"}), claims, oci.Claim{Words: "resources.claims gpu, request two (resourceClaimTemplateName: t)", Name: "gpu", Requests: []oci.ClaimRequest{
			{Name: "two", DeviceClass: "gpu.nvidia.com", AllocationMode: "ExactCount", Count: 2}}}},
		{"a subrequest a container names", pod(tmpl, corev1.ResourceClaim{Name: "gpu", Request: "any/mig"}), claims, oci.Claim{Words: "resources.claims gpu, request any/mig (resourceClaimTemplateName: t)", Name: "gpu", Requests: []oci.ClaimRequest{
			{Name: "any", FirstAvailable: []oci.ClaimRequest{{Name: "any/mig", DeviceClass: "mig.nvidia.com"}}}}}},
		{"a request the claim lacks", pod(tmpl, corev1.ResourceClaim{Name: "gpu", Request: "three"}), claims, oci.Claim{Words: "resources.claims gpu, request three (resourceClaimTemplateName: t)", Name: "gpu", Unresolved: "the claim has no request three"}},
		{"a ResourceClaim by name", pod(corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: str("shared")}, corev1.ResourceClaim{Name: "gpu", Request: "two"}), claims, oci.Claim{Words: "resources.claims gpu, request two (resourceClaimName: shared)", Name: "gpu", Requests: []oci.ClaimRequest{
			{Name: "two", DeviceClass: "gpu.nvidia.com", AllocationMode: "ExactCount", Count: 2}}}},
		{"a running pod's own claim, with what was allocated", pod(tmpl, corev1.ResourceClaim{Name: "gpu", Request: "any"}, corev1.PodResourceClaimStatus{Name: "gpu", ResourceClaimName: str("pod-gpu-x7k2p")}), claims,
			oci.Claim{Words: "resources.claims gpu, request any (resourceClaimTemplateName: t)", Name: "gpu", Drivers: []string{"gpu.nvidia.com"}, Requests: []oci.ClaimRequest{
				{Name: "any", FirstAvailable: []oci.ClaimRequest{{Name: "any/big", DeviceClass: "gpu.nvidia.com", Count: 1}, {Name: "any/mig", DeviceClass: "mig.nvidia.com"}}}}}},
		{"a template not readable", pod(corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: str("secret")}, corev1.ResourceClaim{Name: "gpu"}), claims, oci.Claim{Words: "resources.claims gpu (resourceClaimTemplateName: secret)", Name: "gpu", Unresolved: "forbidden"}},
		{"nothing resolves", pod(tmpl, corev1.ResourceClaim{Name: "gpu"}), nil, oci.Claim{Words: "resources.claims gpu (resourceClaimTemplateName: t)", Name: "gpu", Unresolved: "no claim objects given"}},
		{"a claim the pod does not define", pod(tmpl, corev1.ResourceClaim{Name: "other"}), claims, oci.Claim{Words: "resources.claims other", Name: "other", Unresolved: "the pod's spec.resourceClaims has no claim other"}},
		{"a claim that names nothing", pod(corev1.PodResourceClaim{Name: "gpu"}, corev1.ResourceClaim{Name: "gpu"}), claims, oci.Claim{Words: "resources.claims gpu", Name: "gpu", Unresolved: "it names neither resourceClaimName nor resourceClaimTemplateName"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			members, err := TranslateWith(tt.pod, tt.claims)
			if err != nil {
				t.Fatal(err)
			}
			got := members[0].Container.Claims
			if len(got) != 1 || !equalClaim(got[0], tt.want) {
				t.Errorf("claims\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func equalClaim(a, b oci.Claim) bool {
	if a.Words != b.Words || a.Name != b.Name || a.Unresolved != b.Unresolved || strings.Join(a.Drivers, ",") != strings.Join(b.Drivers, ",") || len(a.Requests) != len(b.Requests) {
		return false
	}
	for i := range a.Requests {
		if !equalRequest(a.Requests[i], b.Requests[i]) {
			return false
		}
	}
	return true
}

func equalRequest(a, b oci.ClaimRequest) bool {
	if a.Name != b.Name || a.DeviceClass != b.DeviceClass || a.AllocationMode != b.AllocationMode || a.Count != b.Count ||
		strings.Join(a.ClassDrivers, ",") != strings.Join(b.ClassDrivers, ",") || len(a.FirstAvailable) != len(b.FirstAvailable) {
		return false
	}
	for i := range a.FirstAvailable {
		if !equalRequest(a.FirstAvailable[i], b.FirstAvailable[i]) {
			return false
		}
	}
	return true
}

// TestLoadDocuments: every document of a file, a directory and a List;
// the DRA kinds of each version; other kinds skipped; bad input named by
// file and document.
func TestLoadDocuments(t *testing.T) {
	s := loadSet(t, "nvidia-gpu-test1.yaml", "amd-deviceclass.yaml", "k8s-docs")
	if len(s.Pods) != 3 || s.Pods[0].From != "testdata/dra/nvidia-gpu-test1.yaml: Pod gpu-test1/pod1" || s.Pods[2].Pod.Name != "" ||
		s.Pods[2].From != "testdata/dra/k8s-docs/dra-example-job.yaml: Job example-dra-job (its pod template)" {
		t.Errorf("pods %+v", s.Pods)
	}
	if _, err := s.Objects.ResourceClaimTemplate("gpu-test1", "single-gpu"); err != nil {
		t.Error(err)
	}
	if _, err := s.Objects.ResourceClaimTemplate("gpu-test2", "single-gpu"); err == nil || err.Error() != "ResourceClaimTemplate gpu-test2/single-gpu not found among the objects given" {
		t.Errorf("another namespace's template: %v", err)
	}
	if _, err := s.Objects.ResourceClaimTemplate("anywhere", "example-resource-claim-template"); err != nil {
		t.Errorf("a template without a namespace: %v", err)
	}
	for _, class := range []string{"gpu.amd.com", "example-device-class"} { // v1beta1, v1beta2
		if dc, err := s.Objects.DeviceClass(class); err != nil || len(dc.Spec.Selectors) != 1 {
			t.Errorf("DeviceClass %s: %+v, %v", class, dc, err)
		}
	}
	if strings.Join(s.Skipped, ",") != "Namespace" {
		t.Errorf("skipped %q", s.Skipped)
	}
	list := `apiVersion: v1
kind: List
items:
- apiVersion: resource.k8s.io/v1beta1
  kind: ResourceClaimTemplate
  metadata: {name: old, namespace: ml}
  spec:
    spec:
      devices:
        requests:
        - {name: gpus, deviceClassName: gpu.nvidia.com, allocationMode: ExactCount, count: 4}
- apiVersion: v1
  kind: Pod
  metadata: {name: p, namespace: ml}
  spec: {containers: [{name: c}]}
`
	var l Set
	if err := l.LoadDocuments("list.yaml", []byte(list)); err != nil {
		t.Fatal(err)
	}
	if tmpl, err := l.Objects.ResourceClaimTemplate("ml", "old"); err != nil || len(l.Pods) != 1 ||
		tmpl.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName != "gpu.nvidia.com" || tmpl.Spec.Spec.Devices.Requests[0].Exactly.Count != 4 {
		t.Errorf("a List with a v1beta1 template: %+v, %v, %d pods", tmpl, err, len(l.Pods))
	}
	for _, tc := range []struct{ name, text, err string }{
		{"a typo in a template", "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec: {spec: {devices: {requests: [{name: g, exactly: {deviceClass: gpu.nvidia.com}}]}}}\n",
			`bad.yaml: document 2: ResourceClaimTemplate: error unmarshaling JSON: while decoding JSON: json: unknown field "deviceClass"`},
		{"an old version", "apiVersion: resource.k8s.io/v1alpha3\nkind: DeviceClass\nmetadata: {name: c}\n", "bad.yaml: document 1: DeviceClass c: apiVersion resource.k8s.io/v1alpha3: want resource.k8s.io/v1, v1beta2 or v1beta1"},
		{"a pod's typo", "apiVersion: v1\nkind: Pod\nspec: {containerz: []}\n", `bad.yaml: document 1: Pod: error unmarshaling JSON`},
		{"no kind", "apiVersion: v1\nmetadata: {name: x}\n", "bad.yaml: document 1: no kind"},
	} {
		var b Set
		if err := b.LoadDocuments("bad.yaml", []byte(tc.text)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	var none Set
	if err := none.LoadDocuments("ns.yaml", []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")); err != nil {
		t.Fatal(err)
	}
	if err := none.Check([]string{"ns.yaml"}); err == nil || err.Error() != "ns.yaml: no pod: want a Pod, or a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob (found Namespace)" {
		t.Errorf("Check: %v", err)
	}
}

// TestFirstOf: the first source that has an object gives it; else the
// last one's reason.
func TestFirstOf(t *testing.T) {
	files := &Objects{Where: "in the files given"}
	files.AddClass(&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "a100"}})
	cluster := fakeClaims{classes: map[string]*resourcev1.DeviceClass{"h100": {ObjectMeta: metav1.ObjectMeta{Name: "h100"}}}}
	c := FirstOf(files, cluster)
	if dc, err := c.DeviceClass("a100"); err != nil || dc.Name != "a100" {
		t.Errorf("from the files: %v, %v", dc, err)
	}
	if dc, err := c.DeviceClass("h100"); err != nil || dc.Name != "h100" {
		t.Errorf("from the cluster: %v, %v", dc, err)
	}
	if _, err := c.ResourceClaim("ml", "x"); !errors.Is(err, errForbidden) {
		t.Errorf("from neither: %v", err)
	}
	if _, err := FirstOf().DeviceClass("x"); !errors.Is(err, ErrNoClaimObjects) {
		t.Errorf("from nothing: %v", err)
	}
}
