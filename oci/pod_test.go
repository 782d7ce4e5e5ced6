package oci_test

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpurun/gpurun/oci"
)

func TestCRIPodNames(t *testing.T) {
	tests := []struct {
		name string
		ann  map[string]string
		want oci.Pod
	}{
		{"containerd", map[string]string{oci.AnnotationCRIContainerType: "container", oci.AnnotationCRISandboxID: "s1",
			oci.AnnotationCRISandboxNamespace: "ml", oci.AnnotationCRISandboxName: "job-0", oci.AnnotationCRISandboxUID: "u1", oci.AnnotationCRIContainerName: "train"},
			oci.Pod{SandboxID: "s1", Engine: "containerd-cri", Namespace: "ml", Name: "job-0", UID: "u1", Container: "train"}},
		{"CRI-O", map[string]string{oci.AnnotationCRIOContainerType: "container", oci.AnnotationCRIOSandboxID: "s2",
			oci.AnnotationCRIOPodNamespace: "ml", oci.AnnotationCRIOPodName: "job-1", oci.AnnotationCRIOPodUID: "u2", oci.AnnotationCRIOContainerName: "train"},
			oci.Pod{SandboxID: "s2", Engine: "cri-o", Namespace: "ml", Name: "job-1", UID: "u2", Container: "train"}},
		{"a sandbox", map[string]string{oci.AnnotationCRIContainerType: "sandbox", oci.AnnotationCRISandboxID: "s3", oci.AnnotationCRISandboxName: "p"},
			oci.Pod{Sandbox: true, SandboxID: "s3", Engine: "containerd-cri", Name: "p"}},
		{"not in a pod", map[string]string{oci.AnnotationCRISandboxName: "p"}, oci.Pod{}},
	}
	for _, tt := range tests {
		if got := oci.CRIPod(&specs.Spec{Annotations: tt.ann}); got != tt.want {
			t.Errorf("%s: CRIPod = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
