//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/integration/harness"
)

// TestShimContainerdRestart creates GPU pods through gpurun-runtime (the
// default runtime of a containerd with its CRI plugin) one after another
// while containerd is restarted under them, three times, and a few after. Each pod is made
// as a kubelet makes it: a step that fails (containerd gone mid-call) is
// retried, with a new sandbox for a sandbox that did not come up. It
// checks that none is lost: every pod that came up is still running after
// every restart, with the policy's /dev/shm in both of its containers on
// one tmpfs, grown on the host side; and every pod asked for came up.
func TestShimContainerdRestart(t *testing.T) {
	config, logFile := shimConfig(t, "")
	c := harness.StartContainerd(t, harness.ContainerdOptions{
		Runtimes:       map[string]string{"gpurun": bin(t, "gpurun-runtime")},
		DefaultRuntime: "gpurun",
		Env:            []string{"GPURUN_CONFIG=" + config},
	})
	want := hostTarget(t) / 1024
	const restarts, podsAfter = 3, 2

	type made struct{ name, pod, gpu, side string }
	var (
		mu      sync.Mutex
		up      []made
		retries int
		reasons = map[string]int{}
	)
	restarted := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < restarts && err == nil; i++ {
			time.Sleep(1500 * time.Millisecond)
			err = c.TryRestart()
		}
		restarted <- err
	}()

	failed := func(step string, err error) {
		mu.Lock()
		defer mu.Unlock()
		retries++
		msg := err.Error()
		if i := strings.LastIndex(msg, "desc = "); i >= 0 {
			msg = msg[i+len("desc = "):]
		}
		if len(msg) > 80 {
			msg = msg[:80]
		}
		reasons[step+": "+msg]++
	}
	deadline := time.Now().Add(3 * time.Minute)
	var restartErr error
	done, after := false, 0
	for i := 0; !done || after < podsAfter; i++ {
		if done {
			after++
		} else {
			select {
			case restartErr = <-restarted:
				done = true
			default:
			}
		}
		name := fmt.Sprintf("gpu-%d", i)
		for {
			if time.Now().After(deadline) {
				t.Fatalf("pod %s did not come up in time; retries so far: %v\n--- containerd log tail ---\n%s", name, reasons, c.LogTail(40))
			}
			pod, err := c.TryRunPod(harness.PodOptions{Name: name})
			if err != nil {
				failed("run pod", err)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			m := made{name: name, pod: pod}
			if m.gpu, err = c.TryCreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}); err == nil {
				if err = c.TryStartContainer(m.gpu); err == nil {
					if m.side, err = c.TryCreateContainer(pod, harness.ContainerOptions{Name: "sidecar"}); err == nil {
						err = c.TryStartContainer(m.side)
					}
				}
			}
			if err != nil {
				// As the kubelet does with a pod whose containers did not
				// all start: this sandbox goes, a new one is made.
				failed("containers", err)
				removeSandbox(c, pod)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			mu.Lock()
			up = append(up, m)
			mu.Unlock()
			break
		}
	}
	if restartErr != nil {
		t.Fatal(restartErr)
	}

	lost := 0
	for _, m := range up {
		for _, id := range []string{m.gpu, m.side} {
			st := c.ContainerStatus(id)
			if s := st.GetStatus().GetState(); s != runtimeapi.ContainerState_CONTAINER_RUNNING {
				lost++
				t.Errorf("pod %s: container %s is %s after the restarts (exit %d: %s)", m.name, st.GetStatus().GetMetadata().GetName(), s, st.GetStatus().GetExitCode(), st.GetStatus().GetMessage())
			}
		}
		g, err1 := c.Exec(m.gpu, "sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm")
		s, err2 := c.Exec(m.side, "sh", "-c", "df -k /dev/shm; stat -c %d /dev/shm")
		if err1 != nil || err2 != nil {
			t.Errorf("pod %s: exec: %v, %v\nshim log: %s", m.name, err1, err2, readFile(logFile))
			continue
		}
		if gk, sk := dfKiB(t, g), dfKiB(t, s); gk != want || sk != want {
			t.Errorf("pod %s: /dev/shm %d KiB (GPU), %d KiB (sidecar), want %d", m.name, gk, sk, want)
		}
		if lastLine(g) != lastLine(s) {
			t.Errorf("pod %s: the containers' /dev/shm differ (st_dev %s, %s)", m.name, lastLine(g), lastLine(s))
		}
		if host, err := sysinfo.TmpfsSize(c.SandboxShm(m.pod)); err != nil || host/1024 != want {
			t.Errorf("pod %s: host side %s: %d, %v", m.name, c.SandboxShm(m.pod), host, err)
		}
	}
	t.Logf("containerd restarted %d times while %d GPU pods were made through gpurun-runtime: %d up, %d lost; %d steps retried: %v",
		restarts, len(up), len(up), lost, retries, reasons)
	if retries == 0 {
		t.Errorf("no step failed: the restarts never met a pod being made (the test proves nothing); make the pods slower or the restarts sooner")
	}
}

// removeSandbox stops and removes a sandbox that did not come up, ignoring
// errors (containerd may be restarting; a later restart cleans it up too).
func removeSandbox(c *harness.Containerd, pod string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.Runtime().StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: pod})
	_, _ = c.Runtime().RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: pod})
}
