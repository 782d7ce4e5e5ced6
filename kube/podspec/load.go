package podspec

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// head is what a document says of itself.
type head struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// podKinds are the kinds Load reads a pod from, as an error lists them.
const podKinds = "a Pod, or a Deployment, StatefulSet, DaemonSet, ReplicaSet, Job or CronJob"

// Load reads a pod from a YAML or JSON file (name is used in errors): a
// Pod, or the pod template of a Deployment, StatefulSet, DaemonSet,
// ReplicaSet, Job or CronJob (the pods their controllers create, which
// the webhook sees; in the workload's namespace). Unknown fields are
// errors, named with the file.
func Load(name string, data []byte) (*corev1.Pod, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: empty", name)
	}
	var h head
	if err := yaml.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	pod, ok, err := decodePod(name, h, data)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return pod, nil
	case h.Kind == "":
		return nil, fmt.Errorf("%s: no kind: want %s", name, podKinds)
	}
	return nil, fmt.Errorf("%s: kind %s: want %s", name, h.Kind, podKinds)
}

// decodePod decodes a document of a pod's kind, strictly; ok is false
// for a document of another kind.
func decodePod(name string, h head, data []byte) (pod *corev1.Pod, ok bool, err error) {
	strict := func(into any) error {
		if err := yaml.UnmarshalStrict(data, into); err != nil {
			return fmt.Errorf("%s: %s: %w", name, h.Kind, err)
		}
		return nil
	}
	var tmpl *corev1.PodTemplateSpec
	switch h.Kind {
	case "Pod":
		var p corev1.Pod
		if err := strict(&p); err != nil {
			return nil, true, err
		}
		return &p, true, nil
	case "Deployment":
		var o appsv1.Deployment
		err, tmpl = strict(&o), &o.Spec.Template
	case "StatefulSet":
		var o appsv1.StatefulSet
		err, tmpl = strict(&o), &o.Spec.Template
	case "DaemonSet":
		var o appsv1.DaemonSet
		err, tmpl = strict(&o), &o.Spec.Template
	case "ReplicaSet":
		var o appsv1.ReplicaSet
		err, tmpl = strict(&o), &o.Spec.Template
	case "Job":
		var o batchv1.Job
		err, tmpl = strict(&o), &o.Spec.Template
	case "CronJob":
		var o batchv1.CronJob
		err, tmpl = strict(&o), &o.Spec.JobTemplate.Spec.Template
	default:
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	p := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	if p.Namespace == "" {
		p.Namespace = h.Metadata.Namespace
	}
	return p, true, nil
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

// Source is a pod read from a file, and where it came from.
type Source struct {
	Pod *corev1.Pod
	// From names it: "pods.yaml: Pod gpu-test1/pod1", "job.yaml: Job
	// train (its pod template)".
	From string
}

// Set is what gpurun plan --pod reads: pods (and the pod templates of
// workloads), and the DRA objects their claims name, from every document
// of the files given.
type Set struct {
	Pods []Source
	// Objects are the ResourceClaims, ResourceClaimTemplates and
	// DeviceClasses read.
	Objects Objects
	// Skipped are the kinds of the documents that are none of these
	// (a Namespace, a Service), each once.
	Skipped []string
}

// LoadPath reads every document of a YAML or JSON file, of every .yaml,
// .yml and .json file of a directory (not its subdirectories, as kubectl
// apply -f DIR), or of standard input ("-", stdin) into the set.
func (s *Set) LoadPath(path string, stdin []byte) error {
	if path == "-" {
		if stdin == nil {
			return errors.New("-: no standard input")
		}
		return s.LoadDocuments("(stdin)", stdin)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("read %w", err)
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read %w", err)
		}
		return s.LoadDocuments(path, data)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return fmt.Errorf("read %w", err)
	}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || ext != ".yaml" && ext != ".yml" && ext != ".json" {
			continue
		}
		if err := s.LoadPath(filepath.Join(path, e.Name()), nil); err != nil {
			return err
		}
	}
	return nil
}

// LoadDocuments reads every document of YAML or JSON text (name is used
// in errors and in each pod's From): pods and workloads as Load reads
// them, ResourceClaims, ResourceClaimTemplates and DeviceClasses of
// resource.k8s.io (v1, v1beta2, v1beta1), and the items of a List.
// Documents of other kinds are skipped; unknown fields of the kinds read
// are errors.
func (s *Set) LoadDocuments(name string, data []byte) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if err := s.loadDocument(fmt.Sprintf("%s: document %d", name, i), name, doc); err != nil {
			return err
		}
	}
}

// loadDocument reads one document; where names it in errors, file in a
// pod's From.
func (s *Set) loadDocument(where, file string, doc []byte) error {
	var h head
	if err := yaml.Unmarshal(doc, &h); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if h.Kind == "" && h.APIVersion == "" && len(bytes.TrimSpace(stripComments(doc))) == 0 {
		return nil // an empty document: a leading ---, or comments only
	}
	pod, ok, err := decodePod(where, h, doc)
	if err != nil {
		return err
	}
	if ok {
		from := fmt.Sprintf("%s: %s %s", file, h.Kind, objectName(h.Metadata.Namespace, h.Metadata.Name))
		if h.Kind != "Pod" {
			from += " (its pod template)"
		}
		s.Pods = append(s.Pods, Source{Pod: pod, From: from})
		return nil
	}
	if h.Kind == "List" {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := yaml.Unmarshal(doc, &list); err != nil {
			return fmt.Errorf("%s: List: %w", where, err)
		}
		for j, item := range list.Items {
			if err := s.loadDocument(fmt.Sprintf("%s: item %d", where, j+1), file, item); err != nil {
				return err
			}
		}
		return nil
	}
	if ok, err := s.Objects.decode(where, h, doc); ok || err != nil {
		return err
	}
	if h.Kind == "" {
		return fmt.Errorf("%s: no kind", where)
	}
	if !slices.Contains(s.Skipped, h.Kind) {
		s.Skipped = append(s.Skipped, h.Kind)
	}
	return nil
}

// stripComments drops YAML comment lines.
func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// objectName is namespace/name, or name without a namespace.
func objectName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Check says what is wrong with a set that gpurun plan --pod cannot plan:
// no pod at all.
func (s *Set) Check(names []string) error {
	if len(s.Pods) > 0 {
		return nil
	}
	msg := fmt.Sprintf("%s: no pod: want %s", strings.Join(names, ", "), podKinds)
	if len(s.Skipped) > 0 {
		msg += " (found " + strings.Join(s.Skipped, ", ") + ")"
	}
	return errors.New(msg)
}
