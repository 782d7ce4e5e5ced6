package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/gpurun/gpurun/kube/webhook"
)

// The Helm chart (deploy/helm/gpurun) must render the objects the
// kustomize overlays render for the same settings. TestChartMatchesKustomize
// renders both for every mode and distribution, and for a few settings
// more, decodes them strictly into the API types, normalises what differs
// by design (see normalise) and compares them object by object.

// helmEnv names the helm binary the tests run (make sets it; it builds
// helm into /var/cache/gpurun-tools (.tools/ when not root)).
const helmEnv = "GPURUN_TEST_HELM"

// chartDir is the chart, from this package's directory.
const chartDir = "../helm/gpurun"

// releaseNamespace is the namespace the chart is rendered into: the
// overlays' namespace.
const releaseNamespace = "gpurun-system"

// The distributions the node agent's --distribution takes.
var distributions = []string{"auto", "containerd", "k3s", "rke2"}

// chartCase is one setting rendered both ways: values for the chart (YAML,
// over the defaults; flow style keeps a case on one line), and what a
// kustomization over the mode's overlay and the distribution's component
// adds for the same setting (YAML, appended to it).
type chartCase struct {
	name      string
	mode      string
	dist      string
	values    string
	kustomize string
}

// chartCases returns every mode × distribution with default settings,
// and the settings cases.
func chartCases() []chartCase {
	var cases []chartCase
	for _, mode := range []string{modeRuntimeClass, modeDefaultRuntime, modeNRI} {
		for _, dist := range distributions {
			cases = append(cases, chartCase{name: mode + "/" + dist, mode: mode, dist: dist})
		}
	}
	// The webhook runs nothing on the nodes: the distribution is not read.
	cases = append(cases, chartCase{name: modeWebhook, mode: modeWebhook, dist: "auto"},
		chartCase{name: "webhook: image and replicas", mode: modeWebhook, dist: "auto",
			values:    `{image: {repository: registry.example/gpurun, tag: v9.9.9}, webhook: {replicas: 3}}`,
			kustomize: `{images: [{name: ghcr.io/gpurun/gpurun, newName: registry.example/gpurun, newTag: v9.9.9}], replicas: [{name: gpurun-webhook, count: 3}]}`})
	return append(cases, []chartCase{
		{"serviceMonitor", modeRuntimeClass, "auto", `{metrics: {serviceMonitor: {enabled: true}}}`, `components: [$COMPONENTS/servicemonitor]`},
		{"serviceMonitor nri", modeNRI, "k3s", `{metrics: {serviceMonitor: {enabled: true, interval: 30s}}}`, `components: [$COMPONENTS/servicemonitor]`},
		{"serviceMonitor webhook", modeWebhook, "auto", `{metrics: {serviceMonitor: {enabled: true}}}`, `components: [$COMPONENTS/servicemonitor]`},
		{"restart systemd", modeRuntimeClass, "auto", `{nodeAgent: {restart: systemd, uninstallOnExit: false}}`, `configMapGenerator: [{name: gpurun-node, behavior: merge, literals: [restart=systemd, uninstall-on-exit=false]}]`},
		{"dropIn path", modeRuntimeClass, "auto", `{nodeAgent: {dropIn: /etc/containerd/gpu.d}}`, `configMapGenerator: [{name: gpurun-node, behavior: merge, literals: [drop-in=/etc/containerd/gpu.d]}]`},
		{"dropIn none", modeDefaultRuntime, "containerd", `{nodeAgent: {dropIn: none}}`, `configMapGenerator: [{name: gpurun-node, behavior: merge, literals: [drop-in=]}]`},
		{"node paths", modeDefaultRuntime, "containerd", `{nodeAgent: {binDir: /opt/bin, containerdConfig: /etc/containerd/gpu.toml}}`, `configMapGenerator: [{name: gpurun-node, behavior: merge, literals: [bin-dir=/opt/bin, containerd-config=/etc/containerd/gpu.toml]}]`},
		{"policy", modeRuntimeClass, "k3s", `{policy: "size = \"25%\"\nmax = \"8g\"\n"}`, `configMapGenerator: [{name: gpurun-policy, behavior: replace, options: {disableNameSuffixHash: true}, literals: ["config.toml=size = \"25%\"\nmax = \"8g\"\n"]}]`},
		{"policy nri", modeNRI, "rke2", `{policy: "match = \"all\"\n"}`, `configMapGenerator: [{name: gpurun-policy, behavior: replace, options: {disableNameSuffixHash: true}, literals: ["config.toml=match = \"all\"\n"]}]`},
		{"image", modeNRI, "auto", `{image: {repository: registry.example/gpurun, tag: v9.9.9, pullPolicy: Always}}`, `{images: [{name: ghcr.io/gpurun/gpurun, newName: registry.example/gpurun, newTag: v9.9.9}], patches: [{target: {kind: DaemonSet}, patch: '[{"op": "replace", "path": "/spec/template/spec/containers/0/imagePullPolicy", "value": "Always"}]'}]}`},
		{"nodeSelector", modeRuntimeClass, "rke2", `{nodeSelector: {nvidia.com/gpu.present: "true"}}`, `patches: [{target: {kind: DaemonSet}, patch: '[{"op": "add", "path": "/spec/template/spec/nodeSelector/nvidia.com~1gpu.present", "value": "true"}]'}]`},
		{"nodeSelector replaced", modeNRI, "k3s", `{nodeSelector: {kubernetes.io/os: null, gpu: "yes"}}`, `patches: [{target: {kind: DaemonSet}, patch: '[{"op": "replace", "path": "/spec/template/spec/nodeSelector", "value": {"gpu": "yes"}}]'}]`},
		{"tolerations", modeDefaultRuntime, "auto", `{tolerations: [{operator: Exists}]}`, `patches: [{target: {kind: DaemonSet}, patch: '[{"op": "replace", "path": "/spec/template/spec/tolerations", "value": [{"operator": "Exists"}]}]'}]`},
		{"affinity", modeRuntimeClass, "containerd", `{affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: gpu, operator: Exists}]}]}}}}`, `patches: [{target: {kind: DaemonSet}, patch: '[{"op": "add", "path": "/spec/template/spec/affinity", "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}}}]'}]`},
	}...)
}

func TestChartMatchesKustomize(t *testing.T) {
	helm := helmBinary(t)
	for _, tc := range chartCases() {
		t.Run(tc.name, func(t *testing.T) {
			want := normalise(t, "kustomize", kustomizeCase(t, tc))
			got := normalise(t, "helm", helmTemplate(t, helm, tc))
			compareObjects(t, got, want)
		})
	}
}

// helmBinary returns $GPURUN_TEST_HELM, failing the test when it is not
// set: the comparison is the chart's only guard against drift.
func helmBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv(helmEnv)
	if p == "" {
		t.Fatalf("%s is not set: run the tests with make (it builds helm into /var/cache/gpurun-tools (.tools/ when not root)), or point it at a helm v3 binary", helmEnv)
	}
	return p
}

// helmTemplate renders the chart with tc's values, as `helm install -n
// gpurun-system` would create it.
func helmTemplate(t *testing.T, helm string, tc chartCase) []runtime.Object {
	t.Helper()
	values := fmt.Sprintf("mode: %s\ndistribution: %s\n", tc.mode, tc.dist)
	if tc.values != "" {
		var extra map[string]any
		if err := yaml.Unmarshal([]byte(tc.values), &extra); err != nil {
			t.Fatalf("case values: %v", err)
		}
		extra["mode"], extra["distribution"] = tc.mode, tc.dist
		data, err := yaml.Marshal(extra)
		if err != nil {
			t.Fatal(err)
		}
		values = string(data)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, "template", "gpurun", chartDir, "--namespace", releaseNamespace, "--values", file)
	// No helm state of the user's is read, none is written.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template (values %s): %v\n%s", values, err, stderr.String())
	}
	objs, err := decodeAll("helm template "+tc.name, out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// kustomizeCase builds a kustomization of tc's own in a temporary
// directory: the mode's overlay, the distribution's component (k3s, rke2)
// or gpurun-node's distribution key (containerd; auto is the overlays'
// default), and tc.kustomize.
func kustomizeCase(t *testing.T, tc chartCase) []runtime.Object {
	t.Helper()
	dir := t.TempDir()
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		// kustomize takes relative paths only.
		r, err := filepath.Rel(dir, abs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{rel(filepath.Join("overlays", tc.mode))},
	}
	switch tc.dist {
	case "k3s", "rke2":
		k["components"] = []any{rel(filepath.Join("components", tc.dist))}
	case "containerd":
		if installs(tc.mode) {
			k["configMapGenerator"] = []any{map[string]any{"name": "gpurun-node", "behavior": "merge", "literals": []string{"distribution=containerd"}}}
		}
	}
	if tc.kustomize != "" {
		var extra map[string]any
		// $COMPONENTS is deploy/kubernetes/components, from the temporary
		// directory (kustomize takes relative paths only).
		text := strings.ReplaceAll(tc.kustomize, "$COMPONENTS", rel("components"))
		if err := yaml.Unmarshal([]byte(text), &extra); err != nil {
			t.Fatalf("case kustomize: %v", err)
		}
		for key, v := range extra {
			if prev, ok := k[key].([]any); ok {
				v = append(prev, v.([]any)...)
			}
			k[key] = v
		}
	}
	data, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build:\n%s\n%v", data, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll("kustomize "+tc.name, out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helmLabels are the labels the chart adds to every object's metadata
// (not to selectors or pod templates), which kustomize's do not have.
var helmLabels = []string{"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart"}

// generatedName matches the name of gpurun-node, the ConfigMap whose name
// ends in a hash of its data (kustomize's configMapGenerator; the chart
// takes a sha256 of it): the hashes differ, both must be there.
var generatedName = regexp.MustCompile(`^(gpurun-node)-[a-z0-9]{10}$`)

// normalise returns the objects by kind/namespace/name, as YAML, after
// what differs by design between the chart and the overlays is taken out:
//   - the chart's helmLabels on every object's metadata (each object must
//     have them);
//   - the Namespace, which the overlays create and the chart does not
//     (helm install --create-namespace; its objects go into the release's
//     namespace, checked to be the overlays' namespace);
//   - the hash at the end of gpurun-node's name, in the ConfigMap and
//     where the DaemonSet refers to it.
//
// Nothing else: every other field, label, comment-free value and order
// of lists must be equal.
func normalise(t *testing.T, who string, objs []runtime.Object) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil {
			t.Fatal(err)
		}
		if ns, ok := o.(*corev1.Namespace); ok {
			if who == "helm" {
				t.Errorf("the chart renders Namespace %s: it installs into the release's namespace", ns.Name)
			} else if ns.Name != releaseNamespace {
				t.Errorf("kustomize's namespace %s, want %s", ns.Name, releaseNamespace)
			}
			continue
		}
		if who == "helm" {
			labels := m.GetLabels()
			for _, l := range helmLabels {
				if labels[l] == "" {
					t.Errorf("helm: %T %s without label %s", o, m.GetName(), l)
				}
				delete(labels, l)
			}
			m.SetLabels(labels)
		}
		if sub := generatedName.FindStringSubmatch(m.GetName()); sub != nil {
			m.SetName(sub[1])
		} else if strings.HasPrefix(m.GetName(), "gpurun-node") && isConfigMap(o) {
			t.Errorf("%s: ConfigMap %s: want gpurun-node-<hash>", who, m.GetName())
		}
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			unhashRefs(ds)
		}
		gvk := o.GetObjectKind().GroupVersionKind()
		key := fmt.Sprintf("%s %s/%s", gvk.Kind, m.GetNamespace(), m.GetName())
		if _, dup := out[key]; dup {
			t.Errorf("%s renders %s twice", who, key)
		}
		data, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		out[key] = string(data)
	}
	return out
}

// isConfigMap reports whether o is a ConfigMap.
func isConfigMap(o runtime.Object) bool {
	_, ok := o.(*corev1.ConfigMap)
	return ok
}

// unhashRefs takes the hash off the DaemonSet's references to gpurun-node.
func unhashRefs(ds *appsv1.DaemonSet) {
	spec := &ds.Spec.Template.Spec
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			for j := range cs[i].Env {
				if ref := cs[i].Env[j].ValueFrom; ref != nil && ref.ConfigMapKeyRef != nil {
					if sub := generatedName.FindStringSubmatch(ref.ConfigMapKeyRef.Name); sub != nil {
						ref.ConfigMapKeyRef.Name = sub[1]
					}
				}
			}
		}
	}
	for i := range spec.Volumes {
		if cm := spec.Volumes[i].ConfigMap; cm != nil {
			if sub := generatedName.FindStringSubmatch(cm.Name); sub != nil {
				cm.Name = sub[1]
			}
		}
	}
}

// compareObjects reports objects only one side renders, and a line diff of
// each object both render differently.
func compareObjects(t *testing.T, helm, kustomize map[string]string) {
	t.Helper()
	var keys []string
	for k := range helm {
		keys = append(keys, k)
	}
	for k := range kustomize {
		if _, ok := helm[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		h, inHelm := helm[k]
		kz, inKustomize := kustomize[k]
		switch {
		case !inHelm:
			t.Errorf("%s: kustomize renders it, the chart does not", k)
		case !inKustomize:
			t.Errorf("%s: the chart renders it, kustomize does not", k)
		case h != kz:
			t.Errorf("%s differs (- kustomize, + helm):\n%s", k, lineDiff(kz, h))
		}
	}
}

// lineDiff is a minimal line diff of a and b (longest common subsequence):
// the lines only a has with "-", only b has with "+", the others with " ".
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			fmt.Fprintf(&out, "  %s\n", x[i])
			i, j = i+1, j+1
		case j < len(y) && (i == len(x) || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&out, "+ %s\n", y[j])
			j++
		default:
			fmt.Fprintf(&out, "- %s\n", x[i])
			i++
		}
	}
	return out.String()
}

// TestChartWebhookCertManager: with webhook.certManager, the chart asks
// cert-manager for the serving pair (an Issuer and a Certificate for the
// Service's names), mounts its Secret, has the CA injected into the
// MutatingWebhookConfiguration, and keeps no CA of its own.
func TestChartWebhookCertManager(t *testing.T) {
	helm := helmBinary(t)
	home := t.TempDir()
	cmd := exec.Command(helm, "template", "gpurun", chartDir, "--namespace", releaseNamespace, "--set", "mode=webhook", "--set", "webhook.certManager=true")
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	kinds := map[string]map[string]any{}
	for _, doc := range strings.Split(string(out), "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if k, _ := o["kind"].(string); k != "" {
			kinds[k] = o
		}
	}
	for _, k := range []string{"Issuer", "Certificate", "Deployment", "MutatingWebhookConfiguration"} {
		if kinds[k] == nil {
			t.Fatalf("no %s rendered", k)
		}
	}
	cert, _ := json.Marshal(kinds["Certificate"])
	dep, _ := json.Marshal(kinds["Deployment"])
	mwc, _ := json.Marshal(kinds["MutatingWebhookConfiguration"])
	for _, want := range []string{`"secretName":"gpurun-webhook-cert"`, `"gpurun-webhook.` + releaseNamespace + `.svc"`} {
		if !strings.Contains(string(cert), want) {
			t.Errorf("Certificate %s lacks %s", cert, want)
		}
	}
	for _, want := range []string{`--tls-cert-file=/etc/gpurun-tls/tls.crt`, `"secretName":"gpurun-webhook-cert"`} {
		if !strings.Contains(string(dep), want) {
			t.Errorf("Deployment lacks %s", want)
		}
	}
	if strings.Contains(string(dep), "--self-signed") {
		t.Error("the Deployment keeps a CA of its own too")
	}
	if !strings.Contains(string(mwc), `"cert-manager.io/inject-ca-from":"`+releaseNamespace+`/gpurun-webhook-cert"`) {
		t.Errorf("MutatingWebhookConfiguration %s: no CA injection", mwc)
	}
}

// TestChartWebhookHA: the chart's webhook stays a highly available
// service whatever its values (checkWebhookHA): the grace period follows
// the shutdown delay, the metrics port follows metrics.port; with the
// ServiceMonitor, its Service selects the webhook's pods at that port.
func TestChartWebhookHA(t *testing.T) {
	helm := helmBinary(t)
	for _, tc := range []struct{ name, values string }{
		{"defaults", `{}`},
		{"a longer shutdown delay", `{webhook: {shutdownDelay: 40s}}`},
		{"three replicas", `{webhook: {replicas: 3}}`},
		{"another metrics port and a ServiceMonitor", `{metrics: {port: 9500, serviceMonitor: {enabled: true}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := helmTemplate(t, helm, chartCase{name: tc.name, mode: modeWebhook, dist: "auto", values: tc.values})
			r := newRendered(modeWebhook, objs)
			if len(r.deployments) != 1 {
				t.Fatalf("%d Deployments", len(r.deployments))
			}
			d := r.deployments[0]
			args := d.Spec.Template.Spec.Containers[0].Args
			i := slices.Index(args, "webhook")
			if i < 0 {
				t.Fatalf("args %q", args)
			}
			r.checkWebhookHA(t, d, args[i:])
			for _, o := range objs {
				svc, ok := o.(*corev1.Service)
				if !ok || svc.Name != "gpurun-metrics" {
					continue
				}
				for k, v := range svc.Spec.Selector {
					if d.Spec.Template.Labels[k] != v {
						t.Errorf("Service gpurun-metrics selects %v, not the webhook's pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
					}
				}
				if tp := svc.Spec.Ports[0].TargetPort.String(); !slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == tp }) {
					t.Errorf("Service gpurun-metrics targets port %q, which the webhook does not have", tp)
				}
			}
		})
	}
}

// TestChartWebhookGPUFailurePolicy: webhook.gpuFailurePolicy sets what the
// API server does with a pod that has a GPU in its limits when no replica
// answers, and only that: every other pod fails open either way.
func TestChartWebhookGPUFailurePolicy(t *testing.T) {
	helm := helmBinary(t)
	for _, tc := range []struct {
		name, values string
		want         admissionregistrationv1.FailurePolicyType
	}{
		{"the default", `{}`, admissionregistrationv1.Fail},
		{"Ignore", `{webhook: {gpuFailurePolicy: Ignore}}`, admissionregistrationv1.Ignore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := helmTemplate(t, helm, chartCase{name: tc.name, mode: modeWebhook, dist: "auto", values: tc.values})
			var got []string
			for _, o := range objs {
				mwc, ok := o.(*admissionregistrationv1.MutatingWebhookConfiguration)
				if !ok {
					continue
				}
				for _, w := range mwc.Webhooks {
					got = append(got, fmt.Sprintf("%s=%s", w.Name, *w.FailurePolicy))
				}
			}
			want := []string{fmt.Sprintf("%s=%s", webhook.GPUWebhookName, tc.want), webhook.PodsWebhookName + "=Ignore"}
			if !slices.Equal(got, want) {
				t.Errorf("failure policies %q, want %q", got, want)
			}
		})
	}
}
