//go:build integration && e2e

package integration

// The users' failure as a Kubernetes Job (make e2e): the PyTorch DataLoader
// of torch_test.go dies with Bus error at containerd's 64 MiB /dev/shm, and
// completes when the Job's pod runs under the runtime-class overlay's
// RuntimeClass gpurun, on a real single-node cluster.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
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

// dataloaderJob renders the Job that runs dataloader.py blocks in a GPU
// container (NVIDIA_VISIBLE_DEVICES, as the device plugin sets it), with the
// script from a ConfigMap.
func dataloaderJob(ns, name, runtimeClass string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: %s
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 1
`, name, ns)
	if runtimeClass != "" {
		fmt.Fprintf(&b, "      runtimeClassName: %s\n", runtimeClass)
	}
	args := append([]string{"python3", "/e2e/dataloader.py"}, blocksArgs()...)
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

// runJob runs a DataLoader Job to its end and returns how it ended
// ("Complete" or "Failed") and its pod's log.
func runJob(t *testing.T, c *harness.Cluster, ns, name, runtimeClass string) (string, string) {
	t.Helper()
	start := time.Now()
	c.Apply(dataloaderJob(ns, name, runtimeClass))
	end := c.WaitJob(ns, name, jobTimeout)
	logs, err := c.Kubectl("logs", "-n", ns, "job/"+name)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Dump(harness.Object{Kind: "job", Namespace: ns, Name: name}))
	}
	t.Logf("Job %s (runtimeClassName %q): %s in %s", name, runtimeClass, end, time.Since(start).Round(100*time.Millisecond))
	return end, logs
}

// TestClusterTorchJob: the same DataLoader Job fails with Bus error at
// containerd's 64 MiB /dev/shm, and completes with the policy's /dev/shm
// under the webhook overlay (unchanged Job) and once it asks for
// runtimeClassName gpurun (runtime-class overlay).
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
			end, logs := runJob(t, c, ns, "dataloader-default", "")
			if end != "Failed" || !busError().MatchString(logs) {
				t.Fatalf("Job %s, want Failed with %q:\n%s", end, busError(), logs)
			}
			if want := "/dev/shm " + strconv.FormatInt(engineShm, 10) + " bytes"; !strings.Contains(logs, want) {
				t.Errorf("log lacks %q:\n%s", want, logs)
			}
		})
		t.Run("webhook: completes", func(t *testing.T) {
			e.installWebhook(t)
			end, logs := runJob(t, c, ns, "dataloader-webhook", "")
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
			end, logs := runJob(t, c, ns, "dataloader-gpurun", "gpurun")
			if end != "Complete" {
				t.Fatalf("Job %s, want Complete:\n%s\ngpurun-runtime log:\n%s", end, logs, e.runtimeLog())
			}
			r := result(t, logs, 0)
			if want := e.target(0); r.ShmBytes != want {
				t.Errorf("/dev/shm %d bytes, want the policy's %d", r.ShmBytes, want)
			}
			if want := (blocksSamples + blocksBatch - 1) / blocksBatch; r.Samples != blocksSamples || r.Batches != want {
				t.Errorf("%d samples in %d batches, want %d in %d", r.Samples, r.Batches, blocksSamples, want)
			}
		})
	})
	if c != nil {
		if left := c.Leftovers(); len(left) > 0 {
			t.Errorf("the cluster's cleanup left:\n%s", strings.Join(left, "\n"))
		}
	}
}
