package fullcli

import (
	"encoding/json"
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
