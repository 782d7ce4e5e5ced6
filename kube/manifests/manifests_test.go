package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// The modes, one overlay each.
const (
	modeRuntimeClass   = "runtime-class"
	modeDefaultRuntime = "default-runtime"
	modeNRI            = "nri"
	modeWebhook        = "webhook"
)

// installs reports whether a mode installs gpurun-runtime on the nodes.
func installs(mode string) bool { return mode == modeRuntimeClass || mode == modeDefaultRuntime }

// decoder decodes Kubernetes objects strictly: unknown and duplicate
// fields are errors.
var decoder = sync.OnceValue(func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, nodev1.AddToScheme, rbacv1.AddToScheme, admissionregistrationv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{Yaml: true, Strict: true})
})

// decodeAll decodes every document of a YAML stream; name is used in
// errors.
func decodeAll(name string, data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := decoder().Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			// A custom resource (the Prometheus Operator's ServiceMonitor):
			// decoded as it is, its kind checked by the tests that use it.
			u := &unstructured.Unstructured{}
			if uerr := yaml.Unmarshal(doc, &u.Object); uerr == nil && u.GetAPIVersion() == "monitoring.coreos.com/v1" {
				obj, err = u, nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		objs = append(objs, obj)
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// kustomizations returns every kustomization.yaml under this directory.
func kustomizations(t *testing.T) map[string]types.Kustomization {
	t.Helper()
	out := map[string]types.Kustomization{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var k types.Kustomization
		if err := yaml.UnmarshalStrict(data, &k); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		out[p] = k
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestManifestsDecodeStrictly(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case d.Name() == "kustomization.yaml":
			var k types.Kustomization
			if err := yaml.UnmarshalStrict(data, &k); err != nil {
				t.Errorf("%s: %v", p, err)
			}
			if k.Kind != types.KustomizationKind && k.Kind != types.ComponentKind {
				t.Errorf("%s: kind %q", p, k.Kind)
			}
		case strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml"):
			objs, err := decodeAll(p, data)
			if err != nil {
				t.Error(err)
			}
			if len(objs) == 0 {
				t.Errorf("%s: no object", p)
			}
			n += len(objs)
		case strings.HasSuffix(p, ".toml"):
			if _, err := policy.Parse(p, data); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no manifests found")
	}
}

// TestDecodeIsStrict shows the decoder rejects what kubectl's strict field
// validation rejects, so that a typo in a manifest fails the test above.
func TestDecodeIsStrict(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: x}\nhandlr: gpurun\n", "unknown field"},
		{"duplicate field", "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: x}\nhandler: a\nhandler: b\n", "duplicate"},
		{"unknown nested field", "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostPid: true\n", "unknown field"},
	} {
		if _, err := decodeAll(tc.name, []byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// rendered is an overlay built by kustomize and decoded strictly.
type rendered struct {
	mode        string
	objs        []runtime.Object
	daemonSets  []*appsv1.DaemonSet
	deployments []*appsv1.Deployment
	configMaps  map[string]*corev1.ConfigMap
	classes     []*nodev1.RuntimeClass
}

// build builds an overlay with kustomize.
func build(t *testing.T, mode string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join("overlays", mode))
	if err != nil {
		t.Fatalf("kustomize build overlays/%s: %v", mode, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll("overlays/"+mode+" (rendered)", out)
	if err != nil {
		t.Fatal(err)
	}
	return newRendered(mode, objs)
}

// newRendered sorts rendered objects by kind.
func newRendered(mode string, objs []runtime.Object) *rendered {
	r := &rendered{mode: mode, objs: objs, configMaps: map[string]*corev1.ConfigMap{}}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			r.daemonSets = append(r.daemonSets, o)
		case *appsv1.Deployment:
			r.deployments = append(r.deployments, o)
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *nodev1.RuntimeClass:
			r.classes = append(r.classes, o)
		}
	}
	return r
}

// overlays lists the overlay directories.
func overlays(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("overlays")
	if err != nil {
		t.Fatal(err)
	}
	var modes []string
	for _, e := range ents {
		if e.IsDir() {
			modes = append(modes, e.Name())
		}
	}
	return modes
}

func TestOverlaysAreTheModes(t *testing.T) {
	got := overlays(t)
	want := []string{modeDefaultRuntime, modeNRI, modeRuntimeClass, modeWebhook}
	if !slices.Equal(got, want) {
		t.Errorf("overlays %v, want %v", got, want)
	}
}

// imageKnob returns the one images: entry of all kustomizations.
func imageKnob(t *testing.T) (file string, img types.Image) {
	t.Helper()
	for p, k := range kustomizations(t) {
		for _, i := range k.Images {
			if file != "" {
				t.Errorf("images: in %s and %s: keep one knob", file, p)
			}
			file, img = p, i
		}
	}
	if file == "" {
		t.Fatal("no kustomization sets images:")
	}
	return file, img
}

func TestImageKnob(t *testing.T) {
	file, img := imageKnob(t)
	if img.NewTag == "" || img.NewTag == "latest" || img.Digest != "" && img.NewTag != "" {
		t.Errorf("%s: image %+v: want a version tag", file, img)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+`).MatchString(img.NewTag) {
		t.Errorf("%s: tag %q is not a version", file, img.NewTag)
	}
	want := img.Name + ":" + img.NewTag
	for _, mode := range overlays(t) {
		r := build(t, mode)
		if len(r.daemonSets)+len(r.deployments) == 0 {
			t.Errorf("%s: no DaemonSet or Deployment", mode)
		}
		for _, ds := range r.daemonSets {
			for _, c := range allContainers(ds) {
				if c.Image != want {
					t.Errorf("%s: %s/%s runs %q, want %q", mode, ds.Name, c.Name, c.Image, want)
				}
			}
		}
		for _, d := range r.deployments {
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Image != want {
					t.Errorf("%s: %s/%s runs %q, want %q", mode, d.Name, c.Name, c.Image, want)
				}
			}
		}
	}
}

func allContainers(ds *appsv1.DaemonSet) []corev1.Container {
	return append(slices.Clone(ds.Spec.Template.Spec.InitContainers), ds.Spec.Template.Spec.Containers...)
}

func TestRenderedInvariants(t *testing.T) {
	for _, mode := range overlays(t) {
		t.Run(mode, func(t *testing.T) {
			r := build(t, mode)
			var ns *corev1.Namespace
			for _, o := range r.objs {
				switch o := o.(type) {
				case *corev1.Namespace:
					ns = o
				case *rbacv1.ClusterRole:
					if mode != modeWebhook && !isEventsRole(o) {
						t.Errorf("ClusterRole %s %+v: gpurun's node pods may create, patch and get events, nothing else", o.Name, o.Rules)
					}
				case *rbacv1.ClusterRoleBinding:
					if mode != modeWebhook && (o.RoleRef.Name != "gpurun-events" || len(o.Subjects) != 1 || o.Subjects[0].Name != "gpurun") {
						t.Errorf("ClusterRoleBinding %s: gpurun's node pods' account gets the events role only", o.Name)
					}
				case *rbacv1.Role, *rbacv1.RoleBinding:
					if mode != modeWebhook {
						t.Errorf("RBAC object %T: gpurun's node pods need events only", o)
					}
				}
			}
			if ns == nil {
				t.Fatal("no Namespace")
			}
			if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
				t.Errorf("namespace %s does not allow privileged pods: %v", ns.Name, ns.Labels)
			}
			for _, o := range r.objs {
				m := o.(interface{ GetNamespace() string })
				switch o.(type) {
				case *corev1.Namespace, *nodev1.RuntimeClass, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding, *admissionregistrationv1.MutatingWebhookConfiguration:
					if m.GetNamespace() != "" {
						t.Errorf("%T is cluster-scoped but has namespace %q", o, m.GetNamespace())
					}
				default:
					if m.GetNamespace() != ns.Name {
						t.Errorf("%T in namespace %q, want %q", o, m.GetNamespace(), ns.Name)
					}
				}
			}
			var sa *corev1.ServiceAccount
			for _, o := range r.objs {
				if s, ok := o.(*corev1.ServiceAccount); ok && s.Name == "gpurun" {
					sa = s
				}
			}
			if sa == nil || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
				t.Errorf("service account %+v: want one, without a token", sa)
			}
			pol := r.policyConfigMap(t)
			for _, ds := range r.daemonSets {
				r.checkPod(t, ds, sa, pol)
			}
			switch {
			case installs(mode):
				r.checkNodeAgent(t)
			case mode == modeNRI:
				r.checkNRI(t)
			case mode == modeWebhook:
				r.checkWebhook(t, ns.Name)
			default:
				t.Fatalf("mode %s: no checks", mode)
			}
		})
	}
}

// policyConfigMap returns the ConfigMap holding the policy, checked.
func (r *rendered) policyConfigMap(t *testing.T) *corev1.ConfigMap {
	t.Helper()
	var found *corev1.ConfigMap
	for _, cm := range r.configMaps {
		if _, ok := cm.Data["config.toml"]; ok {
			found = cm
		}
	}
	if found == nil {
		t.Fatal("no ConfigMap holds config.toml")
	}
	data := []byte(found.Data["config.toml"])
	if _, err := policy.Parse(found.Name+"/config.toml", data); err != nil {
		t.Error(err)
	}
	var keys map[string]any
	if err := toml.Unmarshal(data, &keys); err != nil {
		t.Fatal(err)
	}
	if _, set := keys["runtime"]; set {
		t.Error("the policy ConfigMap sets runtime: it would replace the runtime gpurun install chains on a node")
	}
	return found
}

// checkPod checks what every gpurun pod needs.
func (r *rendered) checkPod(t *testing.T, ds *appsv1.DaemonSet, sa *corev1.ServiceAccount, pol *corev1.ConfigMap) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	// The token posts Events (ShmSized, ShmNotSized): the pod asks for it,
	// the account itself stays without one.
	if spec.ServiceAccountName != sa.Name || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("%s: service account %q, automount %v: want the token for the events", ds.Name, spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	ctr := spec.Containers[0]
	if !slices.Contains(ctr.Args, "--events") || !slices.Contains(ctr.Args, "--metrics-address=:9469") {
		t.Errorf("%s: args %v: want --events and --metrics-address=:9469", ds.Name, ctr.Args)
	}
	if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Errorf("%s: no NODE_NAME from spec.nodeName (the events' source)", ds.Name)
	}
	ann := ds.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "9469" || !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 9469 }) {
		t.Errorf("%s: scrape annotations %v, ports %v: want port 9469 scraped", ds.Name, ann, ctr.Ports)
	}
	if spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("%s: nodeSelector %v: want the kubernetes.io/os=linux knob", ds.Name, spec.NodeSelector)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "nvidia.com/gpu" && tol.Operator == corev1.TolerationOpExists
	}) {
		t.Errorf("%s: does not tolerate GPU nodes' nvidia.com/gpu taint", ds.Name)
	}
	sel, tmpl := ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels
	for k, v := range sel {
		if tmpl[k] != v {
			t.Errorf("%s: selector %v does not match the template's labels %v", ds.Name, sel, tmpl)
		}
	}
	for _, c := range allContainers(ds) {
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: resources %v: want cpu and memory requests and a memory limit", ds.Name, c.Name, c.Resources)
		}
		if len(c.Command) == 0 || c.Command[0] != imageBinary {
			t.Errorf("%s/%s: command %q: want %s, where the image has it", ds.Name, c.Name, c.Command, imageBinary)
		}
	}
	// The policy ConfigMap is the one the pods mount.
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name != pol.Name {
			if _, ok := r.configMaps[v.ConfigMap.Name]; !ok {
				t.Errorf("%s: volume %s mounts ConfigMap %q, which the overlay does not create", ds.Name, v.Name, v.ConfigMap.Name)
			}
		}
	}
}

// imageBinary is gpurun in the image (deploy/image/Dockerfile).
const imageBinary = "/usr/local/bin/gpurun"

// hostPathMount returns where a container mounts the hostPath volume of
// the node path p, or "".
func hostPathMount(ds *appsv1.DaemonSet, c corev1.Container, p string) (string, *corev1.VolumeMount) {
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath == nil || filepath.Clean(v.HostPath.Path) != p {
			continue
		}
		for i, m := range c.VolumeMounts {
			if m.Name == v.Name {
				return m.MountPath, &c.VolumeMounts[i]
			}
		}
	}
	return "", nil
}

// configMapMount returns where a container mounts a ConfigMap, or "".
func configMapMount(spec corev1.PodSpec, c corev1.Container, name string) string {
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil || v.ConfigMap.Name != name {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				return m.MountPath
			}
		}
	}
	return ""
}

// expandArgs resolves $(VAR) in a container's args from its env, as the
// kubelet does, with values from the rendered ConfigMaps.
func (r *rendered) expandArgs(t *testing.T, c corev1.Container) ([]string, map[string]string) {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := r.configMaps[ref.Name]
			if !ok {
				t.Fatalf("env %s: ConfigMap %q is not in the overlay", e.Name, ref.Name)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				t.Fatalf("env %s: ConfigMap %s has no key %q", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var args []string
	for _, a := range c.Args {
		args = append(args, ref.ReplaceAllStringFunc(a, func(m string) string {
			name := ref.FindStringSubmatch(m)[1]
			v, ok := env[name]
			if !ok {
				t.Errorf("arg %q: $(%s) is not in the container's env", a, name)
			}
			return v
		}))
	}
	return args, env
}

// flagValue returns the value of --name=V or --name V in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// checkNodeAgent checks the install modes: the agent DaemonSet and the
// RuntimeClass.
func (r *rendered) checkNodeAgent(t *testing.T) {
	t.Helper()
	if len(r.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want the node agent only", len(r.daemonSets))
	}
	ds := r.daemonSets[0]
	spec := ds.Spec.Template.Spec
	if !spec.HostPID {
		t.Error("node agent without hostPID: it cannot see or restart the node's containerd")
	}
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priority class %q", spec.PriorityClassName)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("node agent is not privileged")
	}
	hostRoot, m := hostPathMount(ds, c, "/")
	if hostRoot != "/host" || m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("the node's / is mounted at %q (%+v): want /host, writable, HostToContainer", hostRoot, m)
	}
	args, _ := r.expandArgs(t, c)
	if len(args) < 2 || args[0] != "node" || args[1] != "run" {
		t.Fatalf("args %q: want gpurun node run", args)
	}
	if v, _ := flagValue(args, "host-root"); v != hostRoot {
		t.Errorf("--host-root %q, want the mount %q", v, hostRoot)
	}
	if v, _ := flagValue(args, "from"); v != filepath.Dir(imageBinary) {
		t.Errorf("--from %q, want %q where the image has the binaries", v, filepath.Dir(imageBinary))
	}
	mode, _ := flagValue(args, "restart")
	if _, err := restart.ParseMode(mode); err != nil {
		t.Error(err)
	}
	if mode != string(restart.None) {
		t.Errorf("restart %q by default: restarting containerd must be opt-in", mode)
	}
	setDefault, _ := flagValue(args, "set-as-default")
	if want := strconv.FormatBool(r.mode == modeDefaultRuntime); setDefault != want {
		t.Errorf("--set-as-default=%s in mode %s, want %s", setDefault, r.mode, want)
	}
	for _, b := range []string{"uninstall-on-exit", "set-as-default"} {
		v, _ := flagValue(args, b)
		if _, err := strconv.ParseBool(v); err != nil {
			t.Errorf("--%s=%q: %v", b, v, err)
		}
	}
	for _, p := range []string{"bin-dir", "containerd-config"} {
		if v, _ := flagValue(args, p); !filepath.IsAbs(v) {
			t.Errorf("--%s=%q: want an absolute node path", p, v)
		}
	}
	if v, ok := flagValue(args, "drop-in"); !ok || v != wantDropIn(r.mode, "auto") {
		t.Errorf("--drop-in=%q (given: %v) in mode %s, want %q", v, ok, r.mode, wantDropIn(r.mode, "auto"))
	}
	src, _ := flagValue(args, "policy-source")
	pol := r.policyConfigMap(t)
	if mnt := configMapMount(ds.Spec.Template.Spec, c, pol.Name); src != filepath.Join(mnt, "config.toml") {
		t.Errorf("--policy-source %q, but the policy ConfigMap is mounted at %q", src, mnt)
	}
	parses(t, args...)
	// Readiness: gpurun node status, on the same host root.
	if c.ReadinessProbe == nil || c.ReadinessProbe.Exec == nil {
		t.Fatal("no exec readiness probe")
	}
	probe := c.ReadinessProbe.Exec.Command
	if len(probe) < 3 || probe[0] != imageBinary || probe[1] != "node" || probe[2] != "status" {
		t.Errorf("readiness probe %q: want gpurun node status", probe)
	} else {
		if v, _ := flagValue(probe, "host-root"); v != hostRoot {
			t.Errorf("readiness probe --host-root %q, want %q", v, hostRoot)
		}
		parses(t, probe[1:]...)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 120 {
		t.Errorf("terminationGracePeriodSeconds %v: an uninstall on exit may restart containerd (2 minutes at most)", g)
	}
	// The RuntimeClass names the handler the installer registers.
	if len(r.classes) != 1 {
		t.Fatalf("%d RuntimeClasses, want 1", len(r.classes))
	}
	rc := r.classes[0]
	if rc.Name != install.RuntimeName || rc.Handler != install.RuntimeName {
		t.Errorf("RuntimeClass %q handler %q, want %q handler %q (the runtime install registers)", rc.Name, rc.Handler, install.RuntimeName, install.RuntimeName)
	}
}

// wantDropIn is the node agent's drop-in directory a mode's overlay
// gives, on a distribution: in default-runtime mode a directory of
// gpurun's own next to containerd's config, which the agent imports after
// NVIDIA's conf.d (node/install's OwnDropInDir, which refusals and
// doctor name); none in runtime-class mode, nor on k3s and RKE2, whose
// template takes gpurun's tables.
func wantDropIn(mode, dist string) string {
	if mode != modeDefaultRuntime || dist == "k3s" || dist == "rke2" {
		return ""
	}
	return install.OwnDropInDir(install.DefaultContainerdConfig)
}

// TestNodeAgentDropIn renders each node agent mode with each
// distribution's component (as an administrator adds it) and checks the
// agent's --drop-in: wantDropIn, and a setting the agent takes.
func TestNodeAgentDropIn(t *testing.T) {
	for _, mode := range []string{modeRuntimeClass, modeDefaultRuntime} {
		for _, dist := range distributions {
			t.Run(mode+"/"+dist, func(t *testing.T) {
				r := newRendered(mode, kustomizeCase(t, chartCase{name: mode + "/" + dist, mode: mode, dist: dist}))
				if len(r.daemonSets) != 1 {
					t.Fatalf("%d DaemonSets", len(r.daemonSets))
				}
				args, _ := r.expandArgs(t, r.daemonSets[0].Spec.Template.Spec.Containers[0])
				v, ok := flagValue(args, "drop-in")
				if want := wantDropIn(mode, dist); !ok || v != want {
					t.Errorf("--drop-in=%q (given: %v), want %q", v, ok, want)
				}
				if v != "" && (!filepath.IsAbs(v) || filepath.Dir(v) != filepath.Dir(install.DefaultContainerdConfig)) {
					t.Errorf("--drop-in=%q: want a directory next to %s", v, install.DefaultContainerdConfig)
				}
				parses(t, args...)
			})
		}
	}
}

// checkNRI checks the nri mode: `gpurun nri` with the NRI socket mounted,
// nothing installed on the nodes.
func (r *rendered) checkNRI(t *testing.T) {
	t.Helper()
	if len(r.classes) != 0 {
		t.Error("nri mode creates a RuntimeClass, but installs no runtime handler")
	}
	if len(r.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want the NRI plugin only", len(r.daemonSets))
	}
	ds := r.daemonSets[0]
	c := ds.Spec.Template.Spec.Containers[0]
	if mnt, _ := hostPathMount(ds, c, "/"); mnt != "" {
		t.Errorf("nri mode mounts the node's / at %s: it installs nothing", mnt)
	}
	args, _ := r.expandArgs(t, c)
	i := slices.Index(args, "nri")
	if i < 0 {
		t.Fatalf("args %q: want gpurun nri", args)
	}
	if slices.Contains(args, "node") {
		t.Errorf("args %q run the node agent", args)
	}
	socket, ok := flagValue(args[i:], "socket")
	if !ok {
		t.Fatalf("args %q: no --socket", args)
	}
	const nriSocket = "/var/run/nri/nri.sock"
	if socket != nriSocket {
		t.Errorf("--socket %q, want %q", socket, nriSocket)
	}
	if mnt, _ := hostPathMount(ds, c, filepath.Dir(nriSocket)); mnt != filepath.Dir(socket) {
		t.Errorf("the node's %s is mounted at %q, want %q (the socket's directory)", filepath.Dir(nriSocket), mnt, filepath.Dir(socket))
	}
	// On a node without NRI the plugin runs, not ready, and says why: the
	// socket's directory is made when missing, and readiness is /readyz on
	// the metrics port (registered with the runtime).
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if hp := v.HostPath; hp != nil && hp.Path == filepath.Dir(nriSocket) && (hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate) {
			t.Errorf("volume %s (%s): type %v, want DirectoryOrCreate", v.Name, hp.Path, hp.Type)
		}
	}
	metrics, _ := flagValue(args[i:], "metrics-address")
	switch p := c.ReadinessProbe; {
	case metrics == "" && p != nil:
		t.Errorf("readiness probe %+v without --metrics-address, which serves /readyz", p)
	case metrics == "":
	case p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz":
		t.Errorf("readiness probe %+v: want GET /readyz on the metrics port", p)
	case p.HTTPGet.Port.String() != "metrics" || !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
		return cp.Name == "metrics" && ":"+fmt.Sprint(cp.ContainerPort) == metrics
	}):
		t.Errorf("readiness probe on port %s, ports %+v: want the metrics port %s", p.HTTPGet.Port.String(), c.Ports, metrics)
	}
	config, _ := flagValue(args[:i], "config")
	pol := r.policyConfigMap(t)
	if mnt := configMapMount(ds.Spec.Template.Spec, c, pol.Name); config != filepath.Join(mnt, "config.toml") {
		t.Errorf("--config %q, but the policy ConfigMap is mounted at %q", config, mnt)
	}
	// The pods' /dev/shm tmpfs, which the plugin grows, at the same path.
	if mnt, m := hostPathMount(ds, c, "/run/containerd"); mnt != "/run/containerd" || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("containerd's state is mounted at %q: want /run/containerd with HostToContainer", mnt)
	}
	parses(t, args...)
}

// checkWebhook: the webhook mode is one Deployment of two unprivileged
// replicas behind a Service that the MutatingWebhookConfiguration calls,
// in two entries (pods with a GPU in their limits failing closed, every
// other pod failing open), a timeout, a selector that skips kube-system
// and gpurun's namespace, and RBAC for its own Secret and caBundle only.
func (r *rendered) checkWebhook(t *testing.T, namespace string) {
	t.Helper()
	if len(r.daemonSets) != 0 || len(r.classes) != 0 {
		t.Errorf("webhook mode runs %d DaemonSets and %d RuntimeClasses: it runs nothing on the nodes", len(r.daemonSets), len(r.classes))
	}
	if len(r.deployments) != 1 {
		t.Fatalf("%d Deployments, want the webhook's", len(r.deployments))
	}
	d := r.deployments[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas %v: want two or more", d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	if spec.HostPID || spec.HostNetwork || spec.HostIPC || len(spec.Volumes) != 1 || spec.Volumes[0].ConfigMap == nil {
		t.Errorf("webhook pod: host namespaces or volumes other than the policy: %+v", spec)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Errorf("webhook container security %+v / %+v: want non-root, no privilege, read-only root", sc, spec.SecurityContext)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("webhook resources %v", c.Resources)
	}
	args, _ := r.expandArgs(t, c)
	i := slices.Index(args, "webhook")
	if i < 0 {
		t.Fatalf("args %q: want gpurun webhook", args)
	}
	config, _ := flagValue(args[:i], "config")
	pol := r.policyConfigMap(t)
	if mnt := configMapMount(spec, c, pol.Name); config != filepath.Join(mnt, "config.toml") {
		t.Errorf("--config %q, but the policy ConfigMap is mounted at %q", config, mnt)
	}
	parses(t, args...)
	service, _ := flagValue(args[i:], "service")
	secret, _ := flagValue(args[i:], "secret")
	mwcName, _ := flagValue(args[i:], "webhook-config")
	listen, _ := flagValue(args[i:], "listen")
	var svc *corev1.Service
	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	var role *rbacv1.Role
	var crole *rbacv1.ClusterRole
	for _, o := range r.objs {
		switch o := o.(type) {
		case *corev1.Service:
			svc = o
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			mwc = o
		case *rbacv1.Role:
			role = o
		case *rbacv1.ClusterRole:
			crole = o
		}
	}
	if svc == nil || svc.Name != service {
		t.Fatalf("Service %v: want %q (--service)", svc, service)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %v does not select the webhook's pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
		}
	}
	if port := svc.Spec.Ports[0]; port.Port != 443 || port.TargetPort.String() != c.Ports[0].Name || ":"+strconv.Itoa(int(c.Ports[0].ContainerPort)) != listen {
		t.Errorf("Service port %+v, container port %+v, --listen %q: they must meet", port, c.Ports[0], listen)
	}
	if mwc == nil || mwc.Name != mwcName || len(mwc.Webhooks) != 2 {
		t.Fatalf("MutatingWebhookConfiguration %v: want two webhooks, in one configuration named %q (--webhook-config)", mwc, mwcName)
	}
	// Each pod goes to exactly one entry: a pod with a GPU in its limits
	// to the one that fails closed, every other pod to the one that fails
	// open; the conditions are the table's (webhook.GPURequestCondition).
	gpuCond := webhook.GPURequestCondition(oci.EvidenceOf(nil))
	want := []struct {
		name, condName, cond string
		policy               admissionregistrationv1.FailurePolicyType
	}{
		{webhook.GPUWebhookName, webhook.GPURequestConditionName, gpuCond, admissionregistrationv1.Fail},
		{webhook.PodsWebhookName, webhook.NoGPURequestConditionName, webhook.NoGPURequestCondition(oci.EvidenceOf(nil)), admissionregistrationv1.Ignore},
	}
	for j, w := range mwc.Webhooks {
		wt := want[j]
		if w.Name != wt.name {
			t.Errorf("webhook %d is %q, want %q", j, w.Name, wt.name)
		}
		if len(w.MatchConditions) != 1 || w.MatchConditions[0].Name != wt.condName || strings.Join(strings.Fields(w.MatchConditions[0].Expression), " ") != wt.cond {
			t.Errorf("webhook %s: matchConditions %+v, want one, %s: %s", w.Name, w.MatchConditions, wt.condName, wt.cond)
		}
		ref := w.ClientConfig.Service
		if ref == nil || ref.Name != svc.Name || ref.Namespace != namespace || ref.Path == nil || *ref.Path != "/mutate-pods" || len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("webhook %s: clientConfig %+v: want the Service, path /mutate-pods, no caBundle (the webhook sets it)", w.Name, w.ClientConfig)
		}
		if w.FailurePolicy == nil || *w.FailurePolicy != wt.policy || w.TimeoutSeconds == nil || *w.TimeoutSeconds > 10 ||
			w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
			t.Errorf("webhook %s: failurePolicy %v, timeout %v, sideEffects %v: want %s, at most 10 s, None", w.Name, w.FailurePolicy, w.TimeoutSeconds, w.SideEffects, wt.policy)
		}
		if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) || !slices.Equal(w.Rules[0].Resources, []string{"pods"}) {
			t.Errorf("webhook %s: rules %+v: want pods on CREATE", w.Name, w.Rules)
		}
		skips := map[string]bool{}
		for _, e := range w.NamespaceSelector.MatchExpressions {
			if e.Key == "kubernetes.io/metadata.name" && e.Operator == metav1.LabelSelectorOpNotIn {
				for _, v := range e.Values {
					skips[v] = true
				}
			}
		}
		if !skips["kube-system"] || !skips[namespace] {
			t.Errorf("webhook %s: namespaceSelector %+v: want kube-system and %s skipped", w.Name, w.NamespaceSelector, namespace)
		}
	}
	r.checkWebhookHA(t, d, args[i:])
	if role == nil || crole == nil {
		t.Fatal("webhook mode: no Role or ClusterRole")
	}
	for _, rule := range role.Rules {
		if !slices.Equal(rule.Resources, []string{"secrets"}) || slices.Contains(rule.Verbs, "list") || slices.Contains(rule.Verbs, "watch") ||
			!slices.Equal(rule.Verbs, []string{"create"}) && !slices.Equal(rule.ResourceNames, []string{secret}) {
			t.Errorf("Role rule %+v: want secrets, create, or get/update of %q (--secret) only", rule, secret)
		}
	}
	// Cluster-wide: get/patch of its own configuration, and read access
	// (get, list, watch: its cache) to the DRA objects claims name.
	dra := false
	for _, rule := range crole.Rules {
		if slices.Equal(rule.APIGroups, []string{"resource.k8s.io"}) {
			dra = slices.Equal(rule.Resources, []string{"resourceclaims", "resourceclaimtemplates", "deviceclasses"}) && slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) && len(rule.ResourceNames) == 0
			if !dra {
				t.Errorf("ClusterRole rule %+v: want get, list and watch of resourceclaims, resourceclaimtemplates and deviceclasses only", rule)
			}
			continue
		}
		if !slices.Equal(rule.Resources, []string{"mutatingwebhookconfigurations"}) || !slices.Equal(rule.ResourceNames, []string{mwcName}) || slices.ContainsFunc(rule.Verbs, func(v string) bool { return v != "get" && v != "patch" }) {
			t.Errorf("ClusterRole rule %+v: want get/patch of %q only", rule, mwcName)
		}
	}
	if !dra {
		t.Errorf("ClusterRole %s: no read access to resource.k8s.io's claims, templates and device classes: the webhook cannot resolve a pod's claims", crole.Name)
	}
}

// checkWebhookHA: the webhook as a highly available service. A rollout
// never takes a ready replica away before its successor is ready; the
// replicas go to different nodes (taints they do not tolerate leave a node
// out of the count, or a replica would wait for a GPU node it may not
// use); a PodDisruptionBudget lets a drain evict one at a time; ready
// means able to admit (/readyz); the pod's grace period covers the
// webhook's drain and its wait for reviews in flight; its metrics port is
// the one it listens on and the one Prometheus is told.
func (r *rendered) checkWebhookHA(t *testing.T, d *appsv1.Deployment, args []string) {
	t.Helper()
	spec := d.Spec.Template.Spec
	labels := d.Spec.Template.Labels
	selects := func(sel *metav1.LabelSelector) bool {
		if sel == nil || len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && s.Matches(k8slabels.Set(labels))
	}
	st := d.Spec.Strategy
	if st.Type != appsv1.RollingUpdateDeploymentStrategyType || st.RollingUpdate == nil || st.RollingUpdate.MaxUnavailable == nil ||
		st.RollingUpdate.MaxUnavailable.IntValue() != 0 || st.RollingUpdate.MaxSurge == nil || st.RollingUpdate.MaxSurge.IntValue() < 1 {
		t.Errorf("strategy %+v: want a rolling update with maxUnavailable 0 and a surge", st)
	}
	spread := false
	for _, c := range spec.TopologySpreadConstraints {
		if c.TopologyKey == "kubernetes.io/hostname" && c.WhenUnsatisfiable == corev1.DoNotSchedule && c.MaxSkew == 1 &&
			c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor && selects(c.LabelSelector) {
			spread = true
		}
	}
	if !spread {
		t.Errorf("topologySpreadConstraints %+v: want the replicas on different nodes (hostname, maxSkew 1, DoNotSchedule, nodeTaintsPolicy Honor, selecting them)", spec.TopologySpreadConstraints)
	}
	var pdb *policyv1.PodDisruptionBudget
	for _, o := range r.objs {
		if p, ok := o.(*policyv1.PodDisruptionBudget); ok {
			pdb = p
		}
	}
	switch {
	case pdb == nil:
		t.Error("no PodDisruptionBudget for the webhook")
	case !selects(pdb.Spec.Selector):
		t.Errorf("PodDisruptionBudget selector %+v does not select the webhook's pods %v", pdb.Spec.Selector, labels)
	case pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 || d.Spec.Replicas == nil || pdb.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas):
		t.Errorf("PodDisruptionBudget minAvailable %v with %v replicas: want at least one kept, and one evictable", pdb.Spec.MinAvailable, d.Spec.Replicas)
	}
	c := spec.Containers[0]
	probe := func(p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != c.Ports[0].Name || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe %+v: want HTTPS GET %s on port %s", p, path, c.Ports[0].Name)
		}
	}
	probe(c.ReadinessProbe, "/readyz")
	probe(c.LivenessProbe, "/healthz")
	delay, timeout := time.Duration(-1), time.Duration(-1)
	if v, ok := flagValue(args, "shutdown-delay"); ok {
		delay, _ = time.ParseDuration(v)
	}
	if v, ok := flagValue(args, "shutdown-timeout"); ok {
		timeout, _ = time.ParseDuration(v)
	}
	if delay <= 0 || timeout <= 0 {
		t.Errorf("args %q: want --shutdown-delay and --shutdown-timeout above 0", args)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= delay+timeout {
		t.Errorf("terminationGracePeriodSeconds %v: want more than --shutdown-delay %s and --shutdown-timeout %s together", ptrString(g), delay, timeout)
	}
	listen, _ := flagValue(args, "metrics-listen")
	port := ""
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			port = strconv.Itoa(int(p.ContainerPort))
		}
	}
	ann := d.Spec.Template.Annotations
	if listen != ":"+port || port == "" || ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port || labels["gpurun.io/metrics"] != "true" {
		t.Errorf("--metrics-listen %q, port metrics %q, annotations %v, labels %v: want one metrics port, scraped", listen, port, ann, labels)
	}
	checkGoMemory(t, c)
}

// checkGoMemory: the Go runtime's soft memory limit (GOMEMLIMIT) is set,
// below the container's memory limit, so that the garbage collector works
// harder, instead of the kernel killing the webhook, as a heap that
// GOGC lets grow comes near the limit.
func checkGoMemory(t *testing.T, c corev1.Container) {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	limit := c.Resources.Limits.Memory()
	soft, err := resource.ParseQuantity(strings.TrimSuffix(env["GOMEMLIMIT"], "B"))
	switch {
	case err != nil:
		t.Errorf("container %s: GOMEMLIMIT %q: %v", c.Name, env["GOMEMLIMIT"], err)
	case limit.IsZero() || soft.Cmp(*limit) >= 0:
		t.Errorf("container %s: GOMEMLIMIT %s, memory limit %s: want a soft limit below the limit", c.Name, env["GOMEMLIMIT"], limit)
	}
	if g, err := strconv.Atoi(env["GOGC"]); env["GOGC"] != "" && (err != nil || g < 100) {
		t.Errorf("container %s: GOGC %q: want a number, at least Go's default 100", c.Name, env["GOGC"])
	}
}

// ptrString shows what p points at, or nil.
func ptrString[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// gpurunBinary builds gpurun-full, the build that holds every command the
// manifests run (node, webhook, ...), from this checkout once, named gpurun
// as the manifests call it.
var gpurunBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gpurun-manifests-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "gpurun")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/gpurun/gpurun/cmd/gpurun-full")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build gpurun: %w\n%s", err, out)
	}
	return bin, nil
})

// manifestsDir is deploy/kubernetes, from this package's directory: the
// tests run there, as an admin's kubectl apply -k does.
const manifestsDir = "../../deploy/kubernetes"

func TestMain(m *testing.M) {
	if err := os.Chdir(manifestsDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if bin, err := gpurunBinary(); err == nil {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// parses runs the real gpurun with args and --help: the command exists and
// every flag parses (an unknown subcommand or flag, or a value of the
// wrong type, fails).
func parses(t *testing.T, args ...string) {
	t.Helper()
	bin, err := gpurunBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(slices.Clone(args), "--help")...)
	// Were args taken for a docker run, this fails instead of running one.
	cmd.Env = append(os.Environ(), "GPURUN_DOCKER=/nonexistent/docker", "DOCKER_HOST=unix:///nonexistent.sock")
	out, err := cmd.CombinedOutput()
	var sub []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		sub = append(sub, a)
		if len(sub) == 2 {
			break
		}
	}
	// The command cobra resolved: its usage line.
	usage := "gpurun " + strings.Join(sub, " ")
	if err != nil || !strings.Contains(string(out), "Usage:\n  "+usage) {
		t.Errorf("gpurun %q does not parse (%v): want the help of %q\n%s", args, err, usage, out)
	}
}

// isEventsRole reports whether a ClusterRole grants create, patch and get
// on core events and nothing else.
func isEventsRole(r *rbacv1.ClusterRole) bool {
	if r.Name != "gpurun-events" || len(r.Rules) != 1 {
		return false
	}
	rule := r.Rules[0]
	verbs := slices.Sorted(slices.Values(rule.Verbs))
	return slices.Equal(rule.APIGroups, []string{""}) && slices.Equal(rule.Resources, []string{"events"}) &&
		slices.Equal(verbs, []string{"create", "get", "patch"}) && len(rule.ResourceNames) == 0 && len(rule.NonResourceURLs) == 0
}
