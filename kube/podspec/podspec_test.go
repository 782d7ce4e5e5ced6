package podspec

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func ctr(name, memory string) corev1.Container {
	c := corev1.Container{Name: name}
	if memory != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memory)}
	}
	return c
}

func TestMemoryLimit(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	sidecar := ctr("sidecar", "1Gi")
	sidecar.RestartPolicy = &always
	tests := []struct {
		name string
		pod  corev1.PodSpec
		want int64
		why  string
	}{
		{"one container", corev1.PodSpec{Containers: []corev1.Container{ctr("a", "8Gi")}}, 8 << 30, "sum"},
		{"two containers", corev1.PodSpec{Containers: []corev1.Container{ctr("a", "8Gi"), ctr("b", "1Gi")}}, 9 << 30, "sum"},
		{"one without a limit", corev1.PodSpec{Containers: []corev1.Container{ctr("a", "8Gi"), ctr("b", "")}}, 0, "container b has no memory limit"},
		{"a larger init container", corev1.PodSpec{InitContainers: []corev1.Container{ctr("init", "16Gi")}, Containers: []corev1.Container{ctr("a", "8Gi")}}, 16 << 30, "sum"},
		{"a sidecar adds", corev1.PodSpec{InitContainers: []corev1.Container{sidecar}, Containers: []corev1.Container{ctr("a", "8Gi")}}, 9 << 30, "sum"},
		{"an init container without a limit", corev1.PodSpec{InitContainers: []corev1.Container{ctr("init", "")}, Containers: []corev1.Container{ctr("a", "8Gi")}}, 0, "init container init"},
		{"pod-level", corev1.PodSpec{Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Gi")}}, Containers: []corev1.Container{ctr("a", "")}}, 32 << 30, "pod-level"},
		{"no containers", corev1.PodSpec{}, 0, "no containers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := MemoryLimit(&corev1.Pod{Spec: tt.pod})
			if got != tt.want || !strings.Contains(why, tt.why) {
				t.Errorf("MemoryLimit = %d (%s), want %d (%s)", got, why, tt.want, tt.why)
			}
		})
	}
}

// TestLoad: workloads give their pod template; bad input is named.
func TestLoad(t *testing.T) {
	tests := []struct {
		name, text, err string
		containers      int
	}{
		{"pod", "apiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: a}]\n", "", 1},
		{"job", "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n      containers: [{name: a}, {name: b}]\n", "", 2},
		{"cronjob", "apiVersion: batch/v1\nkind: CronJob\nspec:\n  schedule: '* * * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers: [{name: a}]\n", "", 1},
		{"statefulset", "apiVersion: apps/v1\nkind: StatefulSet\nspec:\n  template:\n    spec:\n      containers: [{name: a}]\n", "", 1},
		{"unknown field", "apiVersion: v1\nkind: Pod\nspec:\n  containerz: []\n", `unknown field "containerz"`, 0},
		{"a service", "apiVersion: v1\nkind: Service\n", "kind Service: want a Pod", 0},
		{"no kind", "spec: {}\n", "no kind", 0},
		{"empty", "\n", "empty", 0},
		{"bad YAML", "kind: Pod\nspec: [\n", "line", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, err := Load("pod.yaml", []byte(tt.text))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "pod.yaml") {
					t.Errorf("err %v; want one naming pod.yaml and saying %q", err, tt.err)
				}
				return
			}
			if err != nil || len(pod.Spec.Containers) != tt.containers {
				t.Errorf("Load = %+v, %v", pod, err)
			}
		})
	}
}
