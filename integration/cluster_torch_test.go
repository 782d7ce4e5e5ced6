//go:build integration && e2e

package integration

// The users' failure as a Kubernetes Job (make e2e): the PyTorch DataLoader
// of torch_test.go dies of containerd's 64 MiB /dev/shm (shmFailure), and
// completes when the Job's pod runs under the runtime-class overlay's
// RuntimeClass gpurun, on a real single-node cluster. There the node
// agent's metrics report the Job's /dev/shm peak, and the size suggested
// from it, asked for by the pod annotation, makes the same Job complete
// (half the peak does not).

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/policy"
)

// jobTimeout bounds one DataLoader Job (the image is already on the node).
const jobTimeout = 5 * time.Minute

// importTorchImage imports the e2e PyTorch image into the cluster's
// containerd: hack/build-torch-image.sh builds (or reuses) its root
// filesystem, which becomes the one layer of the image, with the
// configuration the script's own `docker import` gives it.
func importTorchImage(t *testing.T, c *harness.Cluster) {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(filepath.Join("..", "hack", "build-torch-image.sh"), "--tarball").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("hack/build-torch-image.sh --tarball: %v\n%s", err, stderr)
	}
	rootfs := strings.TrimSpace(string(out))
	dir := t.TempDir()
	archive := harness.RootfsImageTar(t, dir, torchImage, rootfs, []string{"python3"},
		[]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
	c.ImportImage(archive)
	if err := os.Remove(archive); err != nil {
		t.Fatal(err)
	}
	t.Logf("PyTorch image imported into the node's containerd in %s", time.Since(start).Round(100*time.Millisecond))
}

// loaderJob is one DataLoader Job: its name, its pod's RuntimeClass ("":
// none) and annotations, and whether dataloader.py holds its prefetched
// batches in /dev/shm until the test releases it (--hold).
type loaderJob struct {
	name, runtimeClass string
	annotations        map[string]string
	hold               bool
}

// releaseFile is the --hold file: the test creates it in the container to
// let the DataLoader go on.
const releaseFile = "/tmp/release"

// manifest renders the Job that runs dataloader.py blocks in a GPU
// container (NVIDIA_VISIBLE_DEVICES, as the device plugin sets it), with
// the script from a ConfigMap.
func (j loaderJob) manifest(ns string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: %s
spec:
  backoffLimit: 0
  template:
`, j.name, ns)
	if len(j.annotations) > 0 {
		b.WriteString("    metadata:\n      annotations:\n")
		for k, v := range j.annotations {
			fmt.Fprintf(&b, "        %q: %q\n", k, v)
		}
	}
	b.WriteString(`    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
`)
	if j.runtimeClass != "" {
		fmt.Fprintf(&b, "      runtimeClassName: %s\n", j.runtimeClass)
	}
	args := append([]string{"python3", "/e2e/dataloader.py"}, blocksArgs()...)
	if j.hold {
		args = append(args, "--hold", releaseFile)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	fmt.Fprintf(&b, `      containers:
      - name: train
        image: %s
        imagePullPolicy: Never
        command: [%s]
        env:
        - name: NVIDIA_VISIBLE_DEVICES
          value: %q
        volumeMounts:
        - name: e2e
          mountPath: /e2e
          readOnly: true
      volumes:
      - name: e2e
        configMap:
          name: dataloader
`, torchImage, strings.Join(quoted, ", "), "GPU-6a8b1f4e-3c2d-4e5f-8a9b-0c1d2e3f4a5b")
	return b.String()
}

// holding is dataloader.py's HOLDING line: the bytes in use in /dev/shm
// once its workers had prefetched, and the bytes of those batches.
type holding struct {
	ShmUsed  int64 `json:"shm_used"`
	InFlight int64 `json:"in_flight"`
}

// runJob runs a DataLoader Job to its end and returns how it ended
// ("Complete" or "Failed") and its pod's log. A held Job (j.hold) that
// reaches its HOLDING line is held while atPeak (nil: nothing) runs with
// its pod's name and that line, then released; held is nil when the Job
// ended before it held.
func runJob(t *testing.T, c *harness.Cluster, ns string, j loaderJob, atPeak func(pod string, h holding)) (end, logs string, held *holding) {
	t.Helper()
	start := time.Now()
	c.Apply(j.manifest(ns))
	var note string
	if j.hold {
		pod := jobPod(t, c, ns, j.name)
		if err := waitUntil(jobTimeout, func() (bool, string) {
			out, err := c.Kubectl("logs", "-n", ns, pod)
			if _, line, ok := strings.Cut(out, "\nHOLDING "); err == nil && ok {
				line, _, _ = strings.Cut(line, "\n")
				held = new(holding)
				if err := json.Unmarshal([]byte(line), held); err != nil {
					t.Fatalf("pod %s: HOLDING line %q: %v", pod, line, err)
				}
				return true, ""
			}
			phase, _ := c.Get(harness.Pod(ns, pod), "{.status.phase}")
			return phase == "Succeeded" || phase == "Failed", "phase " + phase + ", log: " + out
		}); err != nil {
			t.Fatalf("Job %s did not hold: %v", j.name, err)
		}
		if held != nil {
			at := time.Now()
			if atPeak != nil {
				atPeak(pod, *held)
			}
			if out, err := c.Exec(ns, pod, "train", "touch", releaseFile); err != nil {
				t.Fatalf("release pod %s: %v\n%s", pod, err, out)
			}
			note = fmt.Sprintf(" (held %s at its peak, %s after it started)", time.Since(at).Round(100*time.Millisecond),
				at.Sub(start).Round(100*time.Millisecond))
		}
	}
	end = c.WaitJob(ns, j.name, jobTimeout)
	logs, err := c.Kubectl("logs", "-n", ns, "job/"+j.name)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Dump(harness.Object{Kind: "job", Namespace: ns, Name: j.name}))
	}
	t.Logf("Job %s (runtimeClassName %q, annotations %v): %s in %s%s", j.name, j.runtimeClass, j.annotations, end,
		time.Since(start).Round(100*time.Millisecond), note)
	return end, logs, held
}

// checkBlocks checks the RESULT of a DataLoader Job that completed: all
// samples in their batches, and a /dev/shm of shm bytes.
func checkBlocks(t *testing.T, logs string, shm int64) {
	t.Helper()
	r := result(t, logs, 0)
	if r.ShmBytes != shm {
		t.Errorf("/dev/shm %d bytes, want %d", r.ShmBytes, shm)
	}
	if want := (blocksSamples + blocksBatch - 1) / blocksBatch; r.Samples != blocksSamples || r.Batches != want {
		t.Errorf("%d samples in %d batches, want %d in %d", r.Samples, r.Batches, blocksSamples, want)
	}
}

// measured is what the node agent reported of a pod's /dev/shm: its peak
// and size, and the size that fits the peak.
type measured struct {
	peak, size, suggested int64
}

// measurePeak waits until the node agent's metrics show the peak of the
// held DataLoader's pod (the bytes its HOLDING line saw in use), checks it
// against the workload's batches and the /dev/shm size, and returns it with
// the suggested size: shmstats.Fit of the peak, which the agent's
// gpurun_shm_suggested_size_bytes must equal when it has one for the pod.
func measurePeak(t *testing.T, c *harness.Cluster, agent, ns, pod string, h holding) measured {
	t.Helper()
	labels := map[string]string{"namespace": ns, "pod": pod, "container": "train", "engine": "containerd"}
	var raw string
	var mfs map[string]*dto.MetricFamily
	var m measured
	if err := waitUntil(observeTimeout, func() (bool, string) {
		var err error
		if raw, mfs, err = scrapeAgent(t, c, agent); err != nil {
			return false, raw
		}
		peak, ok := seriesWith(mfs, "gpurun_shm_peak_bytes", labels)
		m.peak = int64(peak)
		return ok && m.peak >= h.ShmUsed-page, fmt.Sprintf("peak %d (seen %v)", m.peak, ok)
	}); err != nil {
		t.Fatalf("the peak of pod %s/%s (%d bytes in use at the hold) in the agent's metrics: %v\n%s", ns, pod, h.ShmUsed, err,
			grepLines(raw, "gpurun_shm_"))
	}
	t.Logf("scraped from %s:\n%s", agent, grepLines(raw, `pod="`+pod+`"`))
	size, ok := seriesWith(mfs, "gpurun_shm_size_bytes", labels)
	if !ok {
		t.Fatalf("no gpurun_shm_size_bytes for pod %s/%s", ns, pod)
	}
	m.size = int64(size)
	// The workload's batches: the DataLoader holds at most its prefetch
	// queues (workers x prefetch batches) and the batch it works on.
	batch := int64(blocksBatch * blocksSampleMiB * policy.MiB)
	inFlight := blocksWorkers * blocksPrefetch * batch
	if h.InFlight != inFlight || h.ShmUsed < inFlight {
		t.Errorf("HOLDING %+v: want %d bytes in flight, all in /dev/shm", h, inFlight)
	}
	if m.peak <= 0 || m.peak > m.size || m.peak < inFlight-page || m.peak > inFlight+batch {
		t.Errorf("peak %d bytes: want about the %d bytes in flight (%d batches of %d), within the %d bytes of /dev/shm",
			m.peak, inFlight, blocksWorkers*blocksPrefetch, batch, m.size)
	}
	m.suggested = shmstats.Fit(m.peak)
	if g, ok := seriesWith(mfs, "gpurun_shm_suggested_size_bytes", labels); ok && int64(g) != m.suggested {
		t.Errorf("gpurun_shm_suggested_size_bytes %d, want shmstats.Fit(%d) = %d", int64(g), m.peak, m.suggested)
	} else if !ok {
		t.Logf("the agent suggests no size for pod %s (the peak fits its /dev/shm); shmstats.Fit gives %d", pod, m.suggested)
	}
	return m
}

// TestClusterTorchJob: the same DataLoader Job fails with Bus error at
// containerd's 64 MiB /dev/shm, and completes with the policy's /dev/shm
// under the webhook overlay (unchanged Job) and once it asks for
// runtimeClassName gpurun (runtime-class overlay). Under the latter it is
// held at its peak until the node agent's metrics show it; the size
// suggested for that peak, set with the pod annotation, makes the Job
// complete, and half the peak makes it fail with Bus error.
func TestClusterTorchJob(t *testing.T) {
	if batch := int64(blocksBatch * blocksSampleMiB * policy.MiB); batch <= engineShm {
		t.Fatalf("a batch of %d bytes fits in containerd's /dev/shm: the test would prove nothing", batch)
	}
	var c *harness.Cluster
	t.Run("cluster", func(t *testing.T) {
		c = harness.StartCluster(t, harness.ClusterOptions{})
		e := newClusterEnv(t, c, false)
		importTorchImage(t, c)
		ns := testNamespace(t, c)
		script, err := filepath.Abs(filepath.Join("testdata", "e2e", "dataloader.py"))
		if err != nil {
			t.Fatal(err)
		}
		c.MustKubectl("create", "configmap", "dataloader", "-n", ns, "--from-file=dataloader.py="+script)

		t.Run("containerd's 64 MiB: Bus error", func(t *testing.T) {
			end, logs, _ := runJob(t, c, ns, loaderJob{name: "dataloader-default"}, nil)
			if end != "Failed" || !shmFailure().MatchString(logs) {
				t.Fatalf("Job %s, want Failed with %q:\n%s", end, shmFailure(), logs)
			}
			if want := "/dev/shm " + strconv.FormatInt(engineShm, 10) + " bytes"; !strings.Contains(logs, want) {
				t.Errorf("log lacks %q:\n%s", want, logs)
			}
		})
		t.Run("webhook: completes", func(t *testing.T) {
			e.installWebhook(t)
			end, logs, _ := runJob(t, c, ns, loaderJob{name: "dataloader-webhook"}, nil)
			if end != "Complete" {
				logs2, _ := c.Kubectl("logs", "-n", "gpurun-system", "deployment/gpurun-webhook")
				t.Fatalf("Job %s, want Complete:\n%s\nwebhook log:\n%s", end, logs, logs2)
			}
			// No memory limit: the node is not known at admission, so the
			// policy's compose_default is the size.
			want, _ := e.pol.Target(policy.Request{Portable: true})
			if r := result(t, logs, 0); r.ShmBytes != want {
				t.Errorf("/dev/shm %d bytes, want the webhook's sizeLimit %d", r.ShmBytes, want)
			}
		})
		t.Run("runtimeClassName gpurun: completes", func(t *testing.T) {
			e.installAgent(t, "runtime-class")
			agent := agentPod(t, c, "gpurun-node")
			// Held at its peak until the agent has sampled it.
			var m measured
			end, logs, held := runJob(t, c, ns, loaderJob{name: "dataloader-gpurun", runtimeClass: "gpurun", hold: true},
				func(pod string, h holding) { m = measurePeak(t, c, agent, ns, pod, h) })
			if end != "Complete" {
				t.Fatalf("Job %s, want Complete:\n%s\ngpurun-runtime log:\n%s", end, logs, e.runtimeLog())
			}
			checkBlocks(t, logs, e.target(0))
			if held == nil || m.peak == 0 {
				t.Fatalf("the Job ended before the agent measured its peak:\n%s", logs)
			}
			if m.size != e.target(0) {
				t.Errorf("gpurun_shm_size_bytes %d, want the policy's %d", m.size, e.target(0))
			}
			t.Logf("measured: peak %s (%d bytes) of %s; at the hold %d bytes in use, %d in the prefetched batches; suggested %s",
				policy.FormatSize(m.peak), m.peak, policy.FormatSize(m.size), held.ShmUsed, held.InFlight, policy.FormatSize(m.suggested))
			if len(e.pol.AllowedAnnotations) == 0 {
				t.Fatal("the shipped policy allows no annotation: a pod cannot ask for the measured size")
			}
			key := e.pol.AllowedAnnotations[0]

			t.Run("the suggested size: completes", func(t *testing.T) {
				j := loaderJob{name: "dataloader-measured", runtimeClass: "gpurun", hold: true,
					annotations: map[string]string{key: policy.FormatQuantity(m.suggested)}}
				end, logs, held := runJob(t, c, ns, j, nil)
				if end != "Complete" {
					t.Fatalf("Job %s, want Complete:\n%s\ngpurun-runtime log:\n%s", end, logs, e.runtimeLog())
				}
				checkBlocks(t, logs, m.suggested)
				// Its whole peak was in /dev/shm at once.
				if held == nil || held.ShmUsed < held.InFlight {
					t.Errorf("the prefetched batches were not all in /dev/shm at once: %+v", held)
				}
			})
			t.Run("half the peak: Bus error", func(t *testing.T) {
				below := m.peak / 2 / policy.MiB * policy.MiB
				if below <= engineShm {
					t.Fatalf("half the peak, %d bytes, is not above containerd's %d: the test would prove nothing", below, engineShm)
				}
				j := loaderJob{name: "dataloader-below", runtimeClass: "gpurun", hold: true,
					annotations: map[string]string{key: policy.FormatQuantity(below)}}
				end, logs, _ := runJob(t, c, ns, j, nil)
				if end != "Failed" || !shmFailure().MatchString(logs) {
					t.Fatalf("Job %s, want Failed with %q:\n%s", end, shmFailure(), logs)
				}
				if want := "/dev/shm " + strconv.FormatInt(below, 10) + " bytes"; !strings.Contains(logs, want) {
					t.Errorf("log lacks %q:\n%s", want, logs)
				}
			})
		})
	})
	if c != nil {
		if left := c.Leftovers(); len(left) > 0 {
			t.Errorf("the cluster's cleanup left:\n%s", strings.Join(left, "\n"))
		}
	}
}
