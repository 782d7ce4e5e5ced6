package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

var (
	fixtures = filepath.Join("..", "..", "oci", "testdata", "fixtures")
	pods     = filepath.Join("..", "..", "kube", "podspec", "testdata", "pods")
)

// options are Run's, with the default policy and a host of 64 GiB and 8
// GPUs, printing to out.
func options(out *bytes.Buffer) Options {
	return Options{
		LoadPolicy: func() (*policy.Policy, error) { return policy.Default(), nil },
		Facts:      func() (oci.Facts, error) { return oci.Facts{HostMemory: 64 * policy.GiB, HostGPUs: 8}, nil },
		Out:        out,
	}
}

// ncclPod turns NCCL's shared-memory transport off, which its /dev/shm
// makes needless.
const ncclPod = `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: trainer
    image: x
    env: [{name: NCCL_SHM_DISABLE, value: "1"}]
    resources: {limits: {nvidia.com/gpu: 1, memory: 16Gi}}
`

// bigShmPod asks for a /dev/shm above its memory limit.
const bigShmPod = `apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 32Gi}}]
  containers:
  - name: trainer
    image: x
    volumeMounts: [{name: dshm, mountPath: /dev/shm}]
    resources: {limits: {nvidia.com/gpu: 1, memory: 16Gi}}
`

func TestRun(t *testing.T) {
	podYAML, err := os.ReadFile(filepath.Join(pods, "kubeflow-pytorchjob-worker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	two := 2
	for _, tc := range []struct {
		name     string
		set      func(*Options)
		wantCode int
		want     []string
	}{
		{"neither --spec nor --pod", func(*Options) {}, 2, []string{"give one of --spec and --pod"}},
		{"both", func(o *Options) { o.SpecPath, o.PodPath = "a", "b" }, 2, []string{"give one of --spec and --pod"}},
		{"a policy that cannot be read", func(o *Options) {
			o.SpecPath = "x"
			o.LoadPolicy = func() (*policy.Policy, error) { return nil, errors.New("bad.toml: unknown key") }
		}, 2, []string{"bad.toml"}},
		{"the host's facts", func(o *Options) {
			o.SpecPath = filepath.Join(fixtures, "docker-20.10-gpu-memory-4g.json")
		}, 0, []string{"action:   set-size", "/dev/shm: 64MiB -> 2GiB", "gpu:      yes"}},
		{"--host-memory and --host-gpus over the host's", func(o *Options) {
			o.SpecPath, o.HostMemory, o.HostGPUs = filepath.Join(fixtures, "docker-20.10-env-nvidia-all.json"), "16g", &two
		}, 0, []string{"-> 8GiB", "gpu:      yes, 2 "}},
		{"no host memory known", func(o *Options) {
			o.SpecPath = filepath.Join(fixtures, "docker-20.10-gpu-memory-4g.json")
			o.Facts = func() (oci.Facts, error) { return oci.Facts{}, errors.New("no /proc/meminfo") }
		}, 2, []string{"no /proc/meminfo"}},
		{"a pod on standard input", func(o *Options) {
			o.PodPath, o.In = "-", bytes.NewReader(podYAML)
		}, 0, []string{"action:   emptydir (medium Memory, sizeLimit 32Gi", "init container init-pytorch: none"}},
		{"a measured peak", func(o *Options) {
			o.PodPath, o.In, o.MeasuredPeak = "-", bytes.NewReader(podYAML), "31Gi"
		}, 0, []string{"measured: suggest 46.5GiB"}},
		{"a bad measured peak", func(o *Options) { o.PodPath, o.MeasuredPeak = "-", "-1g" }, 2, []string{`--measured-peak "-1g"`}},
		{"the decision's warnings", func(o *Options) {
			o.PodPath, o.In = "-", strings.NewReader(ncclPod)
		}, 0, []string{"warning:  container trainer: NCCL_SHM_DISABLE=1 is set, but /dev/shm will be 8GiB"}},
		{"a sizeLimit above the memory limit", func(o *Options) {
			o.PodPath, o.In = "-", strings.NewReader(bigShmPod)
		}, 0, []string{"warning:  container trainer: volume dshm (emptyDir, medium Memory, sizeLimit 32Gi) is not below the 16GiB memory limit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			o := options(&out)
			tc.set(&o)
			err := Run(o)
			if got := exitcode.Of(err); got != tc.wantCode {
				t.Fatalf("exit %d (%v), want %d", got, err, tc.wantCode)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) && (err == nil || !strings.Contains(err.Error(), w)) {
					t.Errorf("output %q (error %v) lacks %q", out.String(), err, w)
				}
			}
		})
	}
}

// TestRunJSON: --json prints one object, with the suggestion when a peak
// was measured.
func TestRunJSON(t *testing.T) {
	for _, peak := range []string{"", "31g"} {
		var out bytes.Buffer
		o := options(&out)
		o.SpecPath, o.JSON, o.MeasuredPeak = filepath.Join(fixtures, "docker-20.10-env-nvidia-all.json"), true, peak
		if err := Run(o); err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(out.Bytes(), &obj); err != nil {
			t.Fatalf("not JSON: %v: %s", err, out.String())
		}
		if _, has := obj["suggestion"]; has != (peak != "") || obj["action"] != "set-size" {
			t.Errorf("peak %q: %v", peak, obj)
		}
	}
}
