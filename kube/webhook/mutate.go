// Package webhook is gpurun's mutating admission webhook: an AdmissionReview
// v1 server that gives a GPU pod, on CREATE, one Memory emptyDir mounted at
// /dev/shm in every container, sized by the policy (podspec.Decide), and
// records the decision in an annotation. It never denies a pod: anything it
// cannot read is admitted unchanged, with a warning.
package webhook

import (
	"encoding/json"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/policy"
)

const (
	// VolumeName is the volume the webhook adds.
	VolumeName = "gpurun-shm"
	// DecisionAnnotation records what the webhook decided for a GPU pod,
	// and why: "emptydir 16Gi: container trainer: …", "none: …".
	DecisionAnnotation = "gpurun.io/shm-decision"
)

// Patch is one RFC 6902 JSON patch operation.
type Patch struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Mutation is what the webhook does to one pod.
type Mutation struct {
	Decision podspec.Decision
	// Patches are the JSON patch; none when the pod is left as it is.
	Patches []Patch
	// Skipped says why the pod was not even planned ("" when it was).
	Skipped string
}

// Mutate decides a pod and returns the patch that carries the decision
// out. A pod that already has the webhook's volume is left as it is
// (re-admission changes nothing); a pod without GPU evidence too, with no
// annotation; a GPU pod left alone gets the annotation saying why. Nothing
// resolves the pod's DRA resource claims (MutateWith does).
func Mutate(pod *corev1.Pod, pol *policy.Policy) (Mutation, error) {
	return MutateWith(pod, pol, nil)
}

// MutateWith is Mutate with the pod's DRA resource claims resolved
// through claims (nil: none can be; the policy's unresolved_claims judges
// them).
func MutateWith(pod *corev1.Pod, pol *policy.Policy, claims podspec.Claims) (Mutation, error) {
	var m Mutation
	for _, v := range pod.Spec.Volumes {
		if v.Name == VolumeName {
			m.Skipped = "the pod already has the volume " + VolumeName
			return m, nil
		}
	}
	d, err := podspec.DecideWith(pod, pol, claims)
	if err != nil {
		return m, err
	}
	m.Decision = d
	if !d.Applies {
		return m, nil
	}
	switch d.Action {
	case podspec.ActionEmptyDir:
		size := resource.NewQuantity(d.Size, resource.BinarySI)
		vol := corev1.Volume{Name: VolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: size}}}
		m.Patches = append(m.Patches, appendTo("/spec/volumes", len(pod.Spec.Volumes), vol))
		mount := corev1.VolumeMount{Name: VolumeName, MountPath: "/dev/shm"}
		for i, c := range pod.Spec.InitContainers {
			m.Patches = append(m.Patches, appendTo(fmt.Sprintf("/spec/initContainers/%d/volumeMounts", i), len(c.VolumeMounts), mount))
		}
		for i, c := range pod.Spec.Containers {
			m.Patches = append(m.Patches, appendTo(fmt.Sprintf("/spec/containers/%d/volumeMounts", i), len(c.VolumeMounts), mount))
		}
	case podspec.ActionHostIPC:
		m.Patches = append(m.Patches, Patch{Op: "add", Path: "/spec/hostIPC", Value: true})
	}
	m.Patches = append(m.Patches, annotate(pod, DecisionAnnotation, DecisionText(d)))
	return m, nil
}

// DecisionText is the decision annotation's value.
func DecisionText(d podspec.Decision) string {
	head := string(d.Action)
	if d.Action == podspec.ActionEmptyDir {
		head += " " + policy.FormatQuantity(d.Size)
	}
	return head + ": " + d.Reason
}

// DecisionAction reads the action back from an annotation DecisionText
// wrote ("emptydir 1Gi: …" is ActionEmptyDir), "" for a text that starts
// with no action.
func DecisionAction(text string) podspec.PodAction {
	head, _, _ := strings.Cut(text, ":")
	word, _, _ := strings.Cut(head, " ")
	switch a := podspec.PodAction(word); a {
	case podspec.ActionEmptyDir, podspec.ActionHostIPC, podspec.ActionNone:
		return a
	}
	return ""
}

// appendTo adds value to the list at path, which has n elements: the list
// itself when it is empty (it may be absent), else its end.
func appendTo(path string, n int, value any) Patch {
	if n == 0 {
		return Patch{Op: "add", Path: path, Value: []any{value}}
	}
	return Patch{Op: "add", Path: path + "/-", Value: value}
}

// annotate sets an annotation, creating the map where there is none.
func annotate(pod *corev1.Pod, key, value string) Patch {
	if pod.Annotations == nil {
		return Patch{Op: "add", Path: "/metadata/annotations", Value: map[string]string{key: value}}
	}
	return Patch{Op: "add", Path: "/metadata/annotations/" + escape(key), Value: value}
}

// escape escapes a JSON pointer token (RFC 6901).
func escape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// Review answers an AdmissionReview: Pods on CREATE are mutated; anything
// else, or a pod that cannot be read, is allowed unchanged (with a warning
// for the latter). It returns the response review and the mutation made.
// An UPDATE — of the pod, or of its resize subresource, where the kubelet
// or a user changes a Memory emptyDir's sizeLimit in place (KEP-6030) — is
// never changed: the webhook decides a pod once, at its creation. Nothing
// resolves a pod's DRA resource claims (ReviewWith does).
func Review(req *admissionv1.AdmissionReview, pol *policy.Policy) (*admissionv1.AdmissionReview, Mutation) {
	return ReviewWith(req, pol, nil)
}

// ReviewWith is Review with pods' DRA resource claims resolved through
// claims (nil: none can be).
func ReviewWith(req *admissionv1.AdmissionReview, pol *policy.Policy, claims podspec.Claims) (*admissionv1.AdmissionReview, Mutation) {
	out := answerOf(req.TypeMeta)
	var m Mutation
	if req.Request == nil {
		return out, m
	}
	r := req.Request
	out.Response = &admissionv1.AdmissionResponse{UID: r.UID, Allowed: true}
	if why := notSized(r.Operation, r.Kind.Kind, r.SubResource); why != "" {
		m.Skipped = why
		return out, m
	}
	var pod corev1.Pod
	if err := json.Unmarshal(r.Object.Raw, &pod); err != nil {
		m.Skipped = "the pod cannot be read: " + err.Error()
		out.Response.Warnings = []string{"gpurun: /dev/shm left as it is: " + m.Skipped}
		return out, m
	}
	return out, reviewPod(out.Response, &pod, r.Namespace, pol, claims)
}

// answerOf is the answer's review, of the request's version.
func answerOf(tm metav1.TypeMeta) *admissionv1.AdmissionReview {
	out := &admissionv1.AdmissionReview{TypeMeta: tm}
	if out.APIVersion == "" {
		out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
	}
	return out
}

// notSized says why a request is not sized ("" for a pod's CREATE).
func notSized(op admissionv1.Operation, kind, subResource string) string {
	if op != admissionv1.Create || kind != "Pod" || subResource != "" {
		return fmt.Sprintf("%s %s: only pods on CREATE are sized", op, kind)
	}
	return ""
}

// reviewPod decides pod, created in namespace, and puts the patch and the
// warnings in resp.
func reviewPod(resp *admissionv1.AdmissionResponse, pod *corev1.Pod, namespace string, pol *policy.Policy, claims podspec.Claims) Mutation {
	if pod.Namespace == "" {
		// A pod's object may leave its namespace out; the request names
		// it, and its claims are in it.
		pod.Namespace = namespace
	}
	m, err := MutateWith(pod, pol, claims)
	if err != nil {
		m.Skipped = err.Error()
		resp.Warnings = []string{"gpurun: /dev/shm left as it is: " + err.Error()}
		return m
	}
	for _, w := range m.Decision.Warnings {
		resp.Warnings = append(resp.Warnings, "gpurun: "+w)
	}
	if len(m.Patches) > 0 {
		patch, err := json.Marshal(m.Patches)
		if err != nil {
			m.Skipped = err.Error()
			return m
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
	}
	return m
}
