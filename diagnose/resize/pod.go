package resize

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/policy"
)

// KEP6030Gate is the feature gate (Kubernetes 1.37, alpha) under which the
// API server takes a new sizeLimit of a Memory emptyDir through a pod's
// resize subresource and the kubelet remounts the tmpfs in place (cgroup
// v2 nodes only).
const KEP6030Gate = "InPlacePodVerticalScalingMemoryBackedVolumes"

// PodVolume is a pod's /dev/shm as the API server has it: a Memory
// emptyDir with a sizeLimit, mounted at /dev/shm.
type PodVolume struct {
	Namespace, Name string
	// Volume is the volume's name, Index its place in spec.volumes.
	Volume string
	Index  int
	// Webhook says it is gpurun webhook's (gpurun-shm).
	Webhook bool
	// SizeLimit is its sizeLimit now.
	SizeLimit resource.Quantity
	// MemoryLimit is the pod's (podspec.MemoryLimit), 0 for none.
	MemoryLimit int64
}

// ShmVolume finds the Memory emptyDir a pod mounts at /dev/shm: the
// webhook's where the pod has it, else the one volume its containers
// mount there. It says why there is none to resize through the API.
func ShmVolume(pod *corev1.Pod) (PodVolume, error) {
	who := pod.Namespace + "/" + pod.Name
	if pod.Spec.HostIPC {
		return PodVolume{}, fmt.Errorf("pod %s is hostIPC: its /dev/shm is the host's, which gpurun never resizes", who)
	}
	var names []string
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, m := range c.VolumeMounts {
				if path.Clean(m.MountPath) == "/dev/shm" && !slices.Contains(names, m.Name) {
					names = append(names, m.Name)
				}
			}
		}
	}
	name := ""
	switch {
	case len(names) == 0:
		return PodVolume{}, fmt.Errorf("pod %s mounts no volume at /dev/shm: its /dev/shm is the tmpfs its runtime made for the pod sandbox, which no pod field sizes; on its node, sudo gpurun resize --cri CONTAINER-ID SIZE grows it now (crictl ps names the id)", who)
	case slices.Contains(names, webhook.VolumeName):
		name = webhook.VolumeName
	case len(names) == 1:
		name = names[0]
	default:
		return PodVolume{}, fmt.Errorf("pod %s mounts different volumes at /dev/shm in its containers (%s); resize one by hand", who, strings.Join(names, ", "))
	}
	v := PodVolume{Namespace: pod.Namespace, Name: pod.Name, Volume: name, Index: -1, Webhook: name == webhook.VolumeName}
	v.MemoryLimit, _ = podspec.MemoryLimit(pod)
	for i, vol := range pod.Spec.Volumes {
		if vol.Name != name {
			continue
		}
		v.Index = i
		ed := vol.EmptyDir
		switch {
		case ed == nil || ed.Medium != corev1.StorageMediumMemory:
			return v, fmt.Errorf("pod %s mounts volume %s at /dev/shm, which is not an emptyDir of medium Memory: gpurun resizes only a tmpfs", who, name)
		case ed.SizeLimit == nil || ed.SizeLimit.IsZero():
			return v, fmt.Errorf("pod %s: volume %s (emptyDir, medium Memory) has no sizeLimit, and a resize may only change one it has (KEP-6030's alpha); recreate the pod with a sizeLimit, or the annotation %s", who, name, "gpurun.io/shm-size")
		}
		v.SizeLimit = *ed.SizeLimit
		return v, nil
	}
	return v, fmt.Errorf("pod %s mounts volume %s at /dev/shm, but has no such volume", who, name)
}

// sizeLimitPatch is the JSON patch that sets the volume's sizeLimit, and
// fails if the volume is not where it was read.
func sizeLimitPatch(v PodVolume, size resource.Quantity) []map[string]any {
	at := fmt.Sprintf("/spec/volumes/%d", v.Index)
	return []map[string]any{
		{"op": "test", "path": at + "/name", "value": v.Volume},
		{"op": "replace", "path": at + "/emptyDir/sizeLimit", "value": size.String()},
	}
}

// podPath is a pod's path, or its subresource's.
func podPath(namespace, name, sub string) string {
	p := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods/" + url.PathEscape(name)
	if sub != "" {
		p += "/" + sub
	}
	return p
}

// refused says why the API server refused the new sizeLimit, and what to
// do instead.
func refused(v PodVolume, size resource.Quantity, err error) error {
	who := v.Namespace + "/" + v.Name
	var se *kube.StatusError
	msg := err.Error()
	if errors.As(err, &se) {
		msg = fmt.Sprintf("%d: %s", se.Code, se.Message)
	}
	instead := fmt.Sprintf("instead, recreate the pod with the annotation gpurun.io/shm-size: %q (gpurun webhook sizes it at creation)", size.String())
	switch kube.Code(err) {
	case http.StatusUnprocessableEntity, http.StatusBadRequest:
		return fmt.Errorf("the API server refused to change the sizeLimit of pod %s's volume %s in place (%s): a Memory emptyDir is resized in place only on Kubernetes 1.37 or later with the feature gate %s on the API server and the kubelet, on a cgroup v2 node (KEP-6030); %s", who, v.Volume, msg, KEP6030Gate, instead)
	case http.StatusNotFound:
		return fmt.Errorf("pod %s: the API server has no resize subresource for it (%s): in-place resize needs Kubernetes 1.33 or later, and for a Memory emptyDir 1.37 with %s (KEP-6030); %s", who, msg, KEP6030Gate, instead)
	case http.StatusForbidden:
		return fmt.Errorf("pod %s: forbidden (%s): needs patch on pods/resize in namespace %s (kubectl auth can-i patch pods --subresource=resize -n %s)", who, msg, v.Namespace, v.Namespace)
	case http.StatusConflict:
		return fmt.Errorf("pod %s changed while it was read (%s); run gpurun resize again", who, msg)
	}
	return fmt.Errorf("pod %s: resize: %w", who, err)
}

// resizeCondition is the first of the pod's resize conditions: pending
// (Deferred, Infeasible) or in progress (with Error when it failed).
func resizeCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i, c := range pod.Status.Conditions {
		if (c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress) && c.Status == corev1.ConditionTrue {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// waitResized reads the pod until the kubelet has acted on generation
// (its status's observedGeneration, and no resize pending or in
// progress), says it cannot (Infeasible, or an Error in progress), or
// wait is over: nil only when the kubelet confirmed the new size.
func waitResized(ctx context.Context, k *kube.Kube, v PodVolume, generation int64, wait, poll time.Duration) error {
	who := v.Namespace + "/" + v.Name
	end := time.Now().Add(wait)
	var last *corev1.PodCondition
	for {
		var pod corev1.Pod
		if err := k.Do(ctx, http.MethodGet, podPath(v.Namespace, v.Name, ""), "", nil, &pod); err != nil {
			return fmt.Errorf("pod %s: read it back: %w", who, err)
		}
		c := resizeCondition(&pod)
		switch {
		case c != nil && c.Type == corev1.PodResizePending && c.Reason == corev1.PodReasonInfeasible:
			return fmt.Errorf("the kubelet will not resize pod %s's volume %s: %s (%s)", who, v.Volume, c.Reason, c.Message)
		case c != nil && c.Type == corev1.PodResizeInProgress && c.Reason == corev1.PodReasonError:
			return fmt.Errorf("the kubelet failed to resize pod %s's volume %s: %s (a size below what /dev/shm holds cannot be remounted; kubectl describe pod -n %s %s)", who, v.Volume, c.Message, v.Namespace, v.Name)
		case c == nil && pod.Status.ObservedGeneration >= generation && generation > 0:
			return nil
		}
		last = c
		if time.Now().Add(poll).After(end) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
	state := "no resize condition, and the pod's status has not observed the new spec"
	if last != nil {
		state = fmt.Sprintf("%s %s: %s", last.Type, last.Reason, last.Message)
	}
	return fmt.Errorf("the API server took the new sizeLimit of pod %s's volume %s, but its kubelet has not confirmed the resize in %s (%s): the kubelet resizes a Memory emptyDir in place only with the feature gate %s on, on a cgroup v2 node; kubectl exec -n %s %s -- df -h /dev/shm shows the size the processes see",
		who, v.Volume, wait, state, KEP6030Gate, v.Namespace, v.Name)
}

// runPod is gpurun resize --pod: the pod's Memory emptyDir at /dev/shm
// (the webhook's) gets sizeLimit size through the pod's resize
// subresource, and the kubelet remounts the tmpfs in place (KEP-6030).
// Bad input (the pod not found, no kubeconfig) is exit status 2; a pod
// whose /dev/shm cannot be resized so, the cluster's refusal, and a
// resize its kubelet does not confirm, exit status 1.
func runPod(ctx context.Context, o RunOptions, size int64) error {
	k, ns, err := o.podClient()
	if err != nil {
		return exitcode.New(2, err)
	}
	namespace, name, ok := strings.Cut(o.Container, "/")
	if !ok {
		namespace, name = ns, o.Container
	}
	var pod corev1.Pod
	if err := k.Do(ctx, http.MethodGet, podPath(namespace, name, ""), "", nil, &pod); err != nil {
		if errors.Is(err, kube.ErrNotFound) {
			return exitcode.New(2, fmt.Errorf("pod %s/%s not found", namespace, name))
		}
		return exitcode.New(2, fmt.Errorf("pod %s/%s: %w", namespace, name, err))
	}
	v, err := ShmVolume(&pod)
	if err != nil {
		return exitcode.New(1, err)
	}
	q := *resource.NewQuantity(size, resource.BinarySI)
	what := fmt.Sprintf("pod %s/%s's volume %s (emptyDir, medium Memory)", namespace, name, v.Volume)
	if v.Webhook {
		what = fmt.Sprintf("pod %s/%s's volume %s (gpurun webhook's emptyDir at /dev/shm)", namespace, name, v.Volume)
	}
	if v.SizeLimit.Value() == size {
		_, err := fmt.Fprintf(o.Out, "left %s: sizeLimit is %s already\n", what, v.SizeLimit.String())
		return err
	}
	if o.DryRun {
		_, err := fmt.Fprintf(o.Out, "would patch %s: sizeLimit %s -> %s, through the pod's resize subresource (KEP-6030)\n", what, v.SizeLimit.String(), q.String())
		return err
	}
	var patched corev1.Pod
	if err := k.Do(ctx, http.MethodPatch, podPath(namespace, name, "resize"), "application/json-patch+json", sizeLimitPatch(v, q), &patched); err != nil {
		return exitcode.New(1, refused(v, q, err))
	}
	fmt.Fprintf(o.Out, "patched %s: sizeLimit %s -> %s\n", what, v.SizeLimit.String(), q.String())
	if v.MemoryLimit > 0 && size >= v.MemoryLimit {
		fmt.Fprintf(o.Out, "note: %s is not below the pod's %s memory limit, which /dev/shm counts against: filling it gets the pod OOM-killed\n", policy.FormatSize(size), policy.FormatSize(v.MemoryLimit))
	}
	if o.Wait <= 0 {
		_, err := fmt.Fprintln(o.Out, "note: not waiting for the kubelet (--wait 0): kubectl get pod -o yaml shows a PodResizeInProgress or PodResizePending condition while it works or cannot")
		return err
	}
	poll := o.Poll
	if poll <= 0 {
		poll = time.Second
	}
	if err := waitResized(ctx, k, v, patched.Generation, o.Wait, poll); err != nil {
		return exitcode.New(1, err)
	}
	_, err = fmt.Fprintf(o.Out, "resized /dev/shm of pod %s/%s: %s -> %s (the kubelet remounted the tmpfs in place; every container of the pod sees it)\n", namespace, name, v.SizeLimit.String(), q.String())
	return err
}

// podClient is the API client of --pod: the one given (tests), else the
// kubeconfig's, and its namespace.
func (o RunOptions) podClient() (*kube.Kube, string, error) {
	if o.KubeClient != nil {
		ns := o.Kube.Namespace
		if ns == "" {
			ns = "default"
		}
		return o.KubeClient, ns, nil
	}
	if o.Kube.Timeout == 0 {
		o.Kube.Timeout = 15 * time.Second
	}
	return kube.FromKubeconfig(o.Kube)
}
