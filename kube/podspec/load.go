package podspec

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Load reads a pod from a YAML or JSON file (name is used in errors): a
// Pod, or the pod template of a Deployment, StatefulSet, DaemonSet,
// ReplicaSet, Job or CronJob (the pods their controllers create, which
// the webhook sees). Unknown fields are errors, named with the file.
func Load(name string, data []byte) (*corev1.Pod, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: empty", name)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	strict := func(into any) error {
		if err := yaml.UnmarshalStrict(data, into); err != nil {
			return fmt.Errorf("%s: %s: %w", name, head.Kind, err)
		}
		return nil
	}
	fromTemplate := func(meta corev1.PodTemplateSpec) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: meta.ObjectMeta, Spec: meta.Spec}
	}
	switch head.Kind {
	case "Pod":
		var p corev1.Pod
		if err := strict(&p); err != nil {
			return nil, err
		}
		return &p, nil
	case "Deployment":
		var o appsv1.Deployment
		if err := strict(&o); err != nil {
			return nil, err
		}
		return fromTemplate(o.Spec.Template), nil
	case "StatefulSet":
		var o appsv1.StatefulSet
		if err := strict(&o); err != nil {
			return nil, err
		}
		return fromTemplate(o.Spec.Template), nil
	case "DaemonSet":
		var o appsv1.DaemonSet
		if err := strict(&o); err != nil {
			return nil, err
		}
		return fromTemplate(o.Spec.Template), nil
	case "ReplicaSet":
		var o appsv1.ReplicaSet
		if err := strict(&o); err != nil {
			return nil, err
		}
		return fromTemplate(o.Spec.Template), nil
	case "Job":
		var o batchv1.Job
		if err := strict(&o); err != nil {
			return nil, err
		}
		return fromTemplate(o.Spec.Template), nil
	case "CronJob":
		var o batchv1.CronJob
		if err := strict(&o); err != nil {
			return nil, err
		}
		return fromTemplate(o.Spec.JobTemplate.Spec.Template), nil
	case "":
		return nil, fmt.Errorf("%s: no kind: want a Pod, or a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob", name)
	}
	return nil, fmt.Errorf("%s: kind %s: want a Pod, or a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob", name, head.Kind)
}

// LoadFile reads a pod from a file, "-" for standard input (stdin).
func LoadFile(path string, stdin []byte) (*corev1.Pod, error) {
	if path == "-" {
		if stdin == nil {
			return nil, errors.New("-: no standard input")
		}
		return Load("(stdin)", stdin)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read pod: %w", err)
	}
	return Load(path, data)
}
