package webhook

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestReviewWarnings: the decision's warnings reach the AdmissionResponse
// (kubectl prints them as "Warning: …"), once each, naming the containers
// they concern; a pod the policy does not apply to gets none.
func TestReviewWarnings(t *testing.T) {
	gpu := func(name string, env ...corev1.EnvVar) corev1.Container {
		return corev1.Container{Name: name, Image: "x", Env: env, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			"nvidia.com/gpu":      resource.MustParse("1"),
			corev1.ResourceMemory: resource.MustParse("16Gi"),
		}}}
	}
	dshm := func(size string) corev1.Volume {
		q := resource.MustParse(size)
		return corev1.Volume{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &q}}}
	}
	mountShm := func(c corev1.Container) corev1.Container {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "dshm", MountPath: "/dev/shm"})
		return c
	}
	ncclOff := corev1.EnvVar{Name: "NCCL_SHM_DISABLE", Value: "1"}
	tests := []struct {
		name string
		spec corev1.PodSpec
		want []string // each a part of one warning, in order
	}{
		{name: "a sized GPU pod", spec: corev1.PodSpec{Containers: []corev1.Container{gpu("trainer")}}},
		{name: "a sizeLimit above the memory limit", spec: corev1.PodSpec{Containers: []corev1.Container{mountShm(gpu("trainer"))}, Volumes: []corev1.Volume{dshm("32Gi")}},
			want: []string{"gpurun: container trainer: volume dshm (emptyDir, medium Memory, sizeLimit 32Gi) is not below the 16GiB memory limit"}},
		{name: "a /dev/shm of the user's own that is too small", spec: corev1.PodSpec{Containers: []corev1.Container{mountShm(gpu("trainer"))}, Volumes: []corev1.Volume{dshm("256Mi")}},
			want: []string{"gpurun: container trainer: volume dshm (emptyDir, medium Memory, sizeLimit 256Mi) is below the policy minimum 1GiB"}},
		{name: "NCCL's transport turned off for nothing, in two containers", spec: corev1.PodSpec{Containers: []corev1.Container{gpu("a", ncclOff), gpu("b", ncclOff)}},
			want: []string{"gpurun: containers a, b: NCCL_SHM_DISABLE=1 is set, but /dev/shm will be 16GiB"}}, // half of the pod's 32GiB
		{name: "not a GPU pod", spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "x", Env: []corev1.EnvVar{ncclOff}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml"}, Spec: tt.spec}
			out, _ := Review(review(t, pod, admissionv1.Create), mustPolicy(t, ""))
			got := out.Response.Warnings
			if len(got) != len(tt.want) {
				t.Fatalf("warnings %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d = %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}
