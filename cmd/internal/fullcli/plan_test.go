package fullcli

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPlanJSON(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	spec := filepath.Join("..", "..", "..", "oci", "testdata", "fixtures", "docker-20.10-gpu-memory-4g.json")
	_, stderr, code := execute(t, "plan", "--spec", spec, "--host-memory", "64g", "--json", "--config", filepath.Join(t.TempDir(), "none.toml"))
	if code != 2 || !strings.Contains(stderr, "none.toml") {
		t.Fatalf("a missing --config file: exit %d, %q", code, stderr)
	}
	stdout, stderr, code := execute(t, "plan", "--spec", spec, "--host-memory", "64g", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("not JSON: %q", stdout)
	}
	if dec.More() {
		t.Errorf("more than one JSON value: %q", stdout)
	}
	var keys []string
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if strings.Join(keys, ",") != "action,applies,current_bytes,gpu,gpus,reason,requested,size_bytes" {
		t.Errorf("keys = %v", keys)
	}
	if obj["action"] != "set-size" || obj["size_bytes"] != float64(2<<30) || obj["current_bytes"] != float64(64<<20) || obj["gpu"] != true || obj["applies"] != true || obj["requested"] != false {
		t.Errorf("plan = %v", obj)
	}
}

func TestPlanHuman(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	spec := filepath.Join("..", "..", "..", "oci", "testdata", "fixtures", "containerd-1.6-cri-container-env-nvidia-all.json")
	stdout, stderr, code := execute(t, "plan", "--spec", spec, "--host-memory", "16g")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"action:   remount", "-> 8GiB", "engine-host-tmpfs", "gpu:      yes", "containerd-cri container of sandbox"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestPlanBadInput(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad.json", "{\n  \"mounts\": [}\n")
	good := write("good.json", `{"ociVersion":"1.0.2"}`)
	badCfg := write("bad.toml", "mode = \"size\"\nshm_size = \"2g\"\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"malformed JSON", []string{"plan", "--spec", bad}, bad + ": malformed JSON at offset 15 (line 2, column 14)"},
		{"no such file", []string{"plan", "--spec", filepath.Join(dir, "missing.json")}, "missing.json: no such file or directory"},
		{"unknown config key", []string{"--config", badCfg, "plan", "--spec", good}, badCfg + `:2:1: unknown key "shm_size"`},
		{"no --spec", []string{"plan"}, "give one of --spec and --pod"},
		{"bad --host-memory", []string{"plan", "--spec", good, "--host-memory", "lots"}, `--host-memory: invalid size "lots"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := execute(t, tt.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q lacks %q", stderr, tt.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
}

// TestPlanPod: --pod prints the webhook's decision; --json one object.
func TestPlanPod(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	pods := filepath.Join("..", "..", "..", "kube", "podspec", "testdata", "pods")
	stdout, stderr, code := execute(t, "plan", "--pod", filepath.Join(pods, "kubeflow-pytorchjob-worker.yaml"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"action:   emptydir (medium Memory, sizeLimit 32Gi", "container pytorch: set-size, GPU (resources.limits nvidia.com/gpu: 4)", "init container init-pytorch: none"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, code = execute(t, "plan", "--pod", filepath.Join(pods, "nginx.yaml"), "--json")
	var d struct {
		Action string `json:"action"`
		GPU    bool   `json:"gpu"`
	}
	if err := json.Unmarshal([]byte(stdout), &d); code != 0 || err != nil || d.Action != "none" || d.GPU {
		t.Errorf("nginx: exit %d, %+v, %v: %s", code, d, err, stdout)
	}
	_, stderr, code = execute(t, "plan", "--pod", filepath.Join(pods, "nginx.yaml"), "--spec", "x.json")
	if code != 2 || !strings.Contains(stderr, "one of --spec and --pod") {
		t.Errorf("both: exit %d, %s", code, stderr)
	}
}

func TestPlanMeasuredPeak(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	pod := filepath.Join("..", "..", "..", "kube", "podspec", "testdata", "pods", "kubeflow-pytorchjob-worker.yaml")
	spec := filepath.Join("..", "..", "..", "oci", "testdata", "fixtures", "docker-20.10-env-nvidia-all.json")
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"pod near its 32Gi emptyDir", []string{"plan", "--pod", pod, "--measured-peak", "31Gi"}, 0,
			[]string{"measured: suggest 46.5GiB: near the ceiling: the peak 31GiB is 97% of the 32GiB /dev/shm", `pod annotation gpurun.io/shm-size: "47616Mi"`, `policy: min = "46.5GiB"`}},
		{"pod far below", []string{"plan", "--pod", pod, "--measured-peak", "1Gi"}, 0,
			[]string{"measured: suggest 1.5GiB: far below the ceiling"}},
		{"pod fits", []string{"plan", "--pod", pod, "--measured-peak", "20Gi"}, 0,
			[]string{"measured: peak 20GiB fits the 32GiB /dev/shm", "no change"}},
		{"spec as JSON", []string{"plan", "--spec", spec, "--host-memory", "64g", "--measured-peak", "31g", "--json"}, 0,
			[]string{`"action":"set-size"`, `"suggestion":{"size_bytes":49928994816`}},
		{"bad size", []string{"plan", "--pod", pod, "--measured-peak", "lots"}, 2,
			[]string{`--measured-peak "lots"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := execute(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s%s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout+stderr, w) {
					t.Errorf("output lacks %q:\n%s%s", w, stdout, stderr)
				}
			}
		})
	}
}

// kubeconfigFor writes a kubeconfig of the API server at url (its CA in
// PEM), with the token s3cret and the namespace ml, and returns its path.
func kubeconfigFor(t *testing.T, url string, caPEM []byte) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "config")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: reader, user: {token: s3cret}}]
contexts: [{name: ml, context: {cluster: test, user: reader, namespace: ml}}]
current-context: ml
`, url, base64.StdEncoding.EncodeToString(caPEM))
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestPlanPodClaims: -f and --from-cluster reach plan: a pod whose GPU is
// a claim, its template in another file (-f, repeatable, a directory), or
// in the cluster that --kubeconfig names (with its token, in the
// context's namespace).
func TestPlanPodClaims(t *testing.T) {
	t.Setenv("GPURUN_CONFIG", "")
	dra := filepath.Join("..", "..", "..", "kube", "podspec", "testdata", "dra")
	pod := filepath.Join(dra, "nvidia-fm-partition", "pod.yaml")
	templates := filepath.Join(dra, "nvidia-fm-partition", "resourceClaimTemplates.yaml")
	var gets []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, `{"kind":"Status","code":401,"message":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		gets = append(gets, r.URL.Path)
		if r.URL.Path != "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates/fm-partition-2gpu" {
			http.Error(w, `{"kind":"Status","code":404,"message":"not found"}`, http.StatusNotFound)
			return
		}
		fmt.Fprint(w, `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"namespace":"ml","name":"fm-partition-2gpu"},
			"spec":{"spec":{"devices":{"requests":[{"name":"gpus","exactly":{"deviceClassName":"gpu.nvidia.com","count":8}}]}}}}`)
	}))
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	kc := kubeconfigFor(t, srv.URL, caPEM)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"the template in another file", []string{"--pod", pod, "-f", templates}, []string{"request gpus: 2 of device class vfio.gpu.nvidia.com"}},
		{"the template in a directory", []string{"--pod", pod, "--filename", filepath.Join(dra, "nvidia-fm-partition")}, []string{"request gpus: 2 of device class vfio.gpu.nvidia.com"}},
		{"no template", []string{"--pod", pod}, []string{`warning:  container ctr: resources.claims gpus (resourceClaimTemplateName: fm-partition-2gpu) could not be read (ResourceClaimTemplate fm-partition-2gpu not found in the files given (-f FILE, or --from-cluster)): counted as a GPU`}},
		{"the template in the cluster", []string{"--pod", pod, "--from-cluster", "--kubeconfig", kc}, []string{"request gpus: 8 of device class gpu.nvidia.com"}},
		{"-f before the cluster", []string{"--pod", pod, "-f", templates, "--from-cluster", "--kubeconfig", kc}, []string{"request gpus: 2 of device class vfio.gpu.nvidia.com"}},
		{"another namespace, -n", []string{"--pod", pod, "--from-cluster", "--kubeconfig", kc, "-n", "other"}, []string{"ResourceClaimTemplate other/fm-partition-2gpu not found in the cluster"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := execute(t, append([]string{"plan"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, stdout)
				}
			}
		})
	}
	if !slices.Contains(gets, "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates/fm-partition-2gpu") {
		t.Errorf("the cluster was asked %q", gets)
	}
	_, stderr, code := execute(t, "plan", "--spec", "config.json", "-f", templates)
	if code != 2 || !strings.Contains(stderr, "they go with --pod") {
		t.Errorf("-f with --spec: exit %d, %s", code, stderr)
	}
}
