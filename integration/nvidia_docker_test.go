//go:build integration

package integration

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/integration/harness"
)

// dockerGPUHost is a Docker GPU host of the NVIDIA tests: a private
// dockerd whose runtimes see a fake NVIDIA GPU (harness.NVIDIA: a device
// node and the CDI specs naming it; NVIDIA's runtime in CDI mode reads
// them), NVIDIA's toolkit, and gpurun's policy, log and install state.
type dockerGPUHost struct {
	t  *testing.T
	nv *harness.NVIDIA
	d  *harness.Dockerd
	// img is the busybox image containers run.
	img string
	// policy and log are gpurun's policy file and log; state is the
	// install state.
	policy, log, state string
	// want is the policy's /dev/shm for a container without a memory
	// limit, in KiB.
	want int64
}

func newDockerGPUHost(t *testing.T) *dockerGPUHost {
	t.Helper()
	nv := harness.NewNVIDIA(t)
	nv.RuntimeConfig()
	policy, logFile := shimConfig(t, "")
	d := harness.StartDockerd(t, harness.DockerdOptions{Env: []string{"GPURUN_CONFIG=" + policy, nv.RuntimeEnv()}})
	return &dockerGPUHost{t: t, nv: nv, d: d, img: harness.BusyboxImage(t, d), policy: policy, log: logFile,
		state: filepath.Join(t.TempDir(), "install-state.json"), want: hostTarget(t) / 1024}
}

// gpurun runs `gpurun install|uninstall docker` for the daemon with
// --set-as-default (install) and --reload, failing the test on an error,
// and reloads the daemon (waiting until it answers again).
func (h *dockerGPUHost) gpurun(verb string) string {
	h.t.Helper()
	args := []string{verb, "docker", "--config", h.d.ConfigPath, "--runtime-path", bin(h.t, "gpurun-runtime"),
		"--state", h.state, "--policy", h.policy, "--reload", "--pid-file", filepath.Join(h.d.Dir, "dockerd.pid")}
	if verb == "install" {
		args = append(args, "--set-as-default")
	}
	out := installDocker(h.t, h.d, args...)
	h.d.Reload()
	return out
}

// nvidiaCTK runs nvidia-ctk runtime configure --runtime=docker
// --set-as-default on the daemon's daemon.json and reloads the daemon.
func (h *dockerGPUHost) nvidiaCTK() {
	h.t.Helper()
	h.nv.ConfigureDocker(h.d.ConfigPath, true)
	h.d.Reload()
}

// expect runs a container of a GPU job (NVIDIA_VISIBLE_DEVICES=all, as
// CUDA images set it) or a plain one, with args before the image
// (--runtime nvidia), and checks its /dev/shm in KiB and whether it has the
// GPU (the device node and the driver library NVIDIA's runtime injects
// from the CDI spec).
func (h *dockerGPUHost) expect(what string, gpuJob bool, args []string, wantKiB int64, wantGPU bool) {
	h.t.Helper()
	run := append([]string{"run", "--rm", "--network", "none"}, args...)
	if gpuJob {
		run = append(run, "-e", "NVIDIA_VISIBLE_DEVICES=all")
	}
	run = append(run, h.img, "sh", "-c", "df -k /dev/shm; if [ -c "+harness.GPUDevicePath+" ]; then echo has-device; fi; cat "+harness.DriverLibPath+" 2>/dev/null; true")
	out, stderr, err := h.d.Docker(run...)
	if err != nil {
		h.t.Errorf("%s: docker %s: %v\n%s\n--- gpurun log tail ---\n%s\n--- dockerd log tail ---\n%s", what, strings.Join(args, " "), err, stderr, lastLines(h.log, 5), h.d.LogTail(10))
		return
	}
	var df []string
	for _, l := range strings.Split(out, "\n") {
		if l != "has-device" && !strings.Contains(l, strings.TrimSpace(harness.DriverLibContent)) {
			df = append(df, l)
		}
	}
	shm := dfKiB(h.t, strings.Join(df, "\n"))
	device := strings.Contains(out, "has-device")
	lib := strings.Contains(out, strings.TrimSpace(harness.DriverLibContent))
	if shm != wantKiB || device != wantGPU || lib != wantGPU {
		h.t.Errorf("%s: docker run %s (GPU job %v): /dev/shm %d KiB, device %v, driver library %v; want %d KiB, GPU %v\n--- gpurun log tail ---\n%s",
			what, strings.Join(args, " "), gpuJob, shm, device, lib, wantKiB, wantGPU, lastLines(h.log, 5))
	}
}

// daemonJSON decodes a daemon.json.
func daemonJSON(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("daemon.json: %v\n%s", err, data)
	}
	return m
}

// TestNVIDIADocker is docs/nvidia.md's Docker row against NVIDIA's real
// toolkit: `nvidia-ctk runtime configure --runtime=docker
// --set-as-default` (runtime nvidia, the default) on a private dockerd's
// daemon.json, and `gpurun install docker --set-as-default --reload`, in
// both orders. With both, GPU jobs of the default runtime are sized and
// get their GPU from NVIDIA's runtime (in CDI mode), which gpurun chains;
// `--runtime nvidia` is kept (its containers get their GPU, and Docker's
// 64 MiB); plain containers keep 64 MiB. The toolkit second makes nvidia
// the default again, which gpurun's install run again puts right.
// gpurun's uninstall leaves daemon.json as nvidia-ctk left it: byte for
// byte when nvidia-ctk came first, what nvidia-ctk makes of the original
// file when it came second (it rewrites the whole file); a dockerd started
// on it runs GPU jobs with NVIDIA's runtime.
func TestNVIDIADocker(t *testing.T) {
	for _, tc := range []struct {
		name         string
		toolkitFirst bool
	}{
		{"toolkit first", true},
		{"gpurun first", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newDockerGPUHost(t)
			original, err := os.ReadFile(h.d.ConfigPath)
			if err != nil {
				t.Fatal(err)
			}
			policy := readFile(h.policy)
			var nvidiaLeft []byte // daemon.json as nvidia-ctk leaves it
			if tc.toolkitFirst {
				h.nvidiaCTK()
				nvidiaLeft, _ = os.ReadFile(h.d.ConfigPath)
				h.expect("the toolkit alone", true, nil, engineDefaultKiB, true)
				h.gpurun("install")
			} else {
				h.gpurun("install")
				h.expect("gpurun alone", true, nil, h.want, false)
				h.nvidiaCTK()
				// nvidia is the default now: GPU jobs bypass gpurun.
				h.expect("the toolkit after gpurun", true, nil, engineDefaultKiB, true)
				h.gpurun("install")
				// What nvidia-ctk makes of the original file, alone.
				scratch := filepath.Join(t.TempDir(), "daemon.json")
				if err := os.WriteFile(scratch, original, 0o644); err != nil {
					t.Fatal(err)
				}
				h.nv.ConfigureDocker(scratch, true)
				nvidiaLeft, _ = os.ReadFile(scratch)
			}
			if pol := readFile(h.policy); !strings.Contains(pol, h.nv.Bin("nvidia-container-runtime")) {
				t.Errorf("gpurun's policy does not chain NVIDIA's runtime:\n%s", pol)
			}
			h.expect("both", true, nil, h.want, true)
			h.expect("both, --runtime nvidia", true, []string{"--runtime", "nvidia"}, engineDefaultKiB, true)
			h.expect("both, a plain container", false, nil, engineDefaultKiB, false)

			out := h.gpurun("uninstall")
			now, _ := os.ReadFile(h.d.ConfigPath)
			switch {
			case tc.toolkitFirst && string(now) != string(nvidiaLeft):
				t.Errorf("gpurun's uninstall left\n%s\nwant what nvidia-ctk left, byte for byte:\n%s\n%s", now, nvidiaLeft, out)
			case !tc.toolkitFirst && !reflect.DeepEqual(daemonJSON(t, now), daemonJSON(t, nvidiaLeft)):
				t.Errorf("gpurun's uninstall left\n%s\nwant what nvidia-ctk makes of the original file:\n%s\n%s", now, nvidiaLeft, out)
			}
			if pol := readFile(h.policy); pol != policy {
				t.Errorf("gpurun's policy after the uninstall:\n%s\nwant it as it was:\n%s", pol, policy)
			}
			h.expect("gpurun uninstalled, --runtime nvidia", true, []string{"--runtime", "nvidia"}, engineDefaultKiB, true)

			restored := daemonJSON(t, now)
			if runtimes, _ := restored["runtimes"].(map[string]any); !maps.Equal(keys(runtimes), map[string]bool{"nvidia": true}) {
				t.Errorf("runtimes after gpurun's uninstall: %v; want nvidia's only", runtimes)
			}
			if tc.toolkitFirst {
				return // nvidia-ctk's own file, which ran GPU jobs above
			}
			// dockerd keeps what a reload no longer finds until it
			// restarts: one started on the file runs GPU jobs of its
			// default runtime with NVIDIA's.
			delete(restored, "deprecated-key-path") // the harness sets its own
			fresh := &dockerGPUHost{t: t, nv: h.nv, policy: h.policy, log: h.log}
			fresh.d = harness.StartDockerd(t, harness.DockerdOptions{DaemonJSON: restored, Env: []string{"GPURUN_CONFIG=" + h.policy, h.nv.RuntimeEnv()}})
			fresh.img = harness.BusyboxImage(t, fresh.d)
			fresh.expect("a dockerd started on the restored daemon.json", true, nil, engineDefaultKiB, true)
		})
	}
}

// keys returns the set of a map's keys.
func keys(m map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}
