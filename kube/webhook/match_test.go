package webhook

import (
	"encoding/json"
	"testing"

	"github.com/google/cel-go/cel"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// evalCondition evaluates a matchConditions expression on a pod the way
// the API server does: the pod as JSON, bound to object.
func evalCondition(t *testing.T, expr string, pod *corev1.Pod) bool {
	t.Helper()
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("compile %s: %v", expr, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	out, _, err := prg.Eval(map[string]any{"object": obj})
	if err != nil {
		t.Fatalf("eval on %s: %v", b, err)
	}
	v, ok := out.Value().(bool)
	if !ok {
		t.Fatalf("%s gives %v, not a bool", expr, out)
	}
	return v
}

// asksForGPU is the Go judgement the condition must agree with: any
// container's or init container's limits name a GPU resource, or the pod
// names resource claims.
func asksForGPU(ev oci.Evidence, pod *corev1.Pod) bool {
	if len(pod.Spec.ResourceClaims) > 0 {
		return true
	}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			for name := range c.Resources.Limits {
				if ev.Resource(string(name)) {
					return true
				}
			}
		}
	}
	return false
}

func TestGPURequestCondition(t *testing.T) {
	limits := func(kv ...string) corev1.ResourceRequirements {
		l := corev1.ResourceList{}
		for i := 0; i+1 < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return corev1.ResourceRequirements{Limits: l}
	}
	ctr := func(name string, r corev1.ResourceRequirements, env ...corev1.EnvVar) corev1.Container {
		return corev1.Container{Name: name, Image: "busybox", Resources: r, Env: env}
	}
	pod := func(init []corev1.Container, cs ...corev1.Container) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{InitContainers: init, Containers: cs}}
	}
	claims := func(p *corev1.Pod, names ...string) *corev1.Pod {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{}
		for _, n := range names {
			tmpl := n + "-template"
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: n, ResourceClaimTemplateName: &tmpl})
		}
		return p
	}
	custom := oci.EvidenceOf(&policy.Policy{GPUResources: []string{"example.com/*", "acme.io/tpu", "nvidia.com/*"}})
	tests := []struct {
		name string
		ev   oci.Evidence
		pod  *corev1.Pod
		want bool
	}{
		{"nvidia.com/gpu", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("nvidia.com/gpu", "1", "memory", "8Gi"))), true},
		{"MIG slice", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("nvidia.com/mig-1g.10gb", "1"))), true},
		{"the GPU in the second container", oci.EvidenceOf(nil), pod(nil, ctr("side", limits("memory", "1Gi")), ctr("a", limits("amd.com/gpu", "2"))), true},
		{"an init container's GPU", oci.EvidenceOf(nil), pod([]corev1.Container{ctr("warm", limits("gpu.intel.com/i915", "1"))}, ctr("a", corev1.ResourceRequirements{})), true},
		{"Gaudi", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("habana.ai/gaudi", "8"))), true},
		{"no resources at all", oci.EvidenceOf(nil), pod(nil, ctr("a", corev1.ResourceRequirements{})), false},
		{"memory and cpu only", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("memory", "64Gi", "cpu", "8"))), false},
		{"GPU evidence only in the environment", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("memory", "1Gi"), corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"})), false},
		{"a domain that only begins like NVIDIA's", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("nvidia.com.example/gpu", "1"))), false},
		{"another vendor's device", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("example.com/fpga", "1"))), false},
		{"a policy's domain", custom, pod(nil, ctr("a", limits("example.com/fpga", "1"))), true},
		{"a policy's exact name", custom, pod(nil, ctr("a", limits("acme.io/tpu", "1"))), true},
		{"not the policy's exact name", custom, pod(nil, ctr("a", limits("acme.io/tpu-v2", "1"))), false},
		{"no domains at all", oci.Evidence{}, pod(nil, ctr("a", limits("nvidia.com/gpu", "1"))), false},
		{"a GPU DeviceClass's resource", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("deviceclass.resource.kubernetes.io/gpu.intel.com", "1"))), true},
		{"another DeviceClass's resource", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("deviceclass.resource.kubernetes.io/dranet", "1"))), false},
		{"Intel's DRA extended resource", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("intel.com/gpu", "1"))), true},
		{"Intel's QAT", oci.EvidenceOf(nil), pod(nil, ctr("a", limits("intel.com/qat", "1"))), false},
		{"a resource claim", oci.EvidenceOf(nil), claims(pod(nil, ctr("a", limits("memory", "1Gi"))), "gpu"), true},
		{"a resource claim, whatever the table", oci.Evidence{}, claims(pod(nil, ctr("a", corev1.ResourceRequirements{})), "nic"), true},
		{"an empty list of claims", oci.EvidenceOf(nil), claims(pod(nil, ctr("a", limits("memory", "1Gi")))), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if go_ := asksForGPU(tt.ev, tt.pod); go_ != tt.want {
				t.Fatalf("the table says %v, the case %v: the case is wrong", go_, tt.want)
			}
			if got := evalCondition(t, GPURequestCondition(tt.ev), tt.pod); got != tt.want {
				t.Errorf("%s: %v, want %v", GPURequestCondition(tt.ev), got, tt.want)
			}
			if got := evalCondition(t, NoGPURequestCondition(tt.ev), tt.pod); got == tt.want {
				t.Errorf("%s: %v, want %v", NoGPURequestCondition(tt.ev), got, !tt.want)
			}
		})
	}
}
