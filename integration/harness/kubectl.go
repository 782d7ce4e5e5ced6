package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// kubectlTimeout bounds one kubectl call (waits have their own).
const kubectlTimeout = 3 * time.Minute

// Kubectl runs kubectl (of the cluster's release, as the admin, inside the
// cluster's namespaces) and returns its stdout; the error carries the
// command, its status and stderr.
func (c *Cluster) Kubectl(args ...string) (string, error) {
	return c.KubectlIn(nil, args...)
}

// KubectlIn is Kubectl with stdin (a manifest for `apply -f -`).
func (c *Cluster) KubectlIn(stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	return c.kubectl(ctx, stdin, args...)
}

func (c *Cluster) kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	stdout, stderr, err := c.kubectlOut(ctx, stdin, args...)
	if err != nil {
		return stdout, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return stdout, nil
}

// KubectlWarnings runs kubectl with stdin and returns its standard output
// and its standard error apart, as a user's terminal shows them: the
// warnings an admission webhook returns ("Warning: …") are on the latter.
func (c *Cluster) KubectlWarnings(stdin []byte, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	return c.kubectlOut(ctx, stdin, args...)
}

// kubectlOut runs kubectl against the cluster, in its network namespace.
func (c *Cluster) kubectlOut(ctx context.Context, stdin []byte, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.k8sBin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Env = append(envWithout("KUBECONFIG"), "HOME="+c.Dir)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := c.ns.Command(cmd)
	return stdout.String(), stderr.String(), err
}

// MustKubectl is Kubectl failing the test on error.
func (c *Cluster) MustKubectl(args ...string) string {
	c.t.Helper()
	out, err := c.Kubectl(args...)
	if err != nil {
		c.t.Fatalf("harness: %v", err)
	}
	return out
}

// Apply applies a manifest (kubectl apply -f -), failing the test on error.
func (c *Cluster) Apply(manifest string) {
	c.t.Helper()
	if out, err := c.KubectlIn([]byte(manifest), "apply", "-f", "-"); err != nil {
		c.t.Fatalf("harness: %v\n%s\n--- manifest ---\n%s", err, out, manifest)
	}
}

// ApplyKustomize runs `kubectl apply -k dir` (kubectl's own kustomize, as
// an administrator would), failing the test on error, and returns
// kubectl's output.
func (c *Cluster) ApplyKustomize(dir string) string {
	c.t.Helper()
	out, err := c.Kubectl("apply", "-k", dir)
	if err != nil {
		c.t.Fatalf("harness: %v\n%s", err, out)
	}
	return out
}

// Object names a Kubernetes object for the wait helpers and Dump.
type Object struct {
	// Kind is kubectl's name for it: "pod", "daemonset", "job", "node".
	Kind string
	// Namespace is "" for cluster-scoped objects (and means "default" for
	// namespaced ones).
	Namespace, Name string
}

func (o Object) String() string {
	if o.Namespace == "" {
		return o.Kind + "/" + o.Name
	}
	return o.Namespace + "/" + o.Kind + "/" + o.Name
}

// args are kubectl's arguments naming o.
func (o Object) args() []string {
	a := []string{o.Kind, o.Name}
	if o.Kind != "node" {
		ns := o.Namespace
		if ns == "" {
			ns = "default"
		}
		a = append(a, "-n", ns)
	}
	return a
}

// Pod names a pod in namespace ns ("" is "default").
func Pod(ns, name string) Object { return Object{Kind: "pod", Namespace: ns, Name: name} }

// Get returns `kubectl get` of o with a jsonpath template.
func (c *Cluster) Get(o Object, jsonpath string) (string, error) {
	return c.Kubectl(append([]string{"get"}, append(o.args(), "-o", "jsonpath="+jsonpath)...)...)
}

// Dump returns what explains a failure around objs: their `kubectl
// describe`, the cluster's events, and the tails of the kubelet's and
// containerd's logs.
func (c *Cluster) Dump(objs ...Object) string {
	var b strings.Builder
	for _, o := range objs {
		out, err := c.Kubectl(append([]string{"describe"}, o.args()...)...)
		fmt.Fprintf(&b, "--- kubectl describe %s ---\n%s", o, out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
		if o.Kind == "pod" {
			for _, prev := range []bool{false, true} {
				args := append([]string{"logs"}, o.args()[1:]...)
				args = append(args, "--all-containers=true", "--tail=40", fmt.Sprintf("--previous=%v", prev))
				logs, err := c.Kubectl(args...)
				if err != nil {
					logs += "(" + err.Error() + ")\n"
				}
				fmt.Fprintf(&b, "--- log of %s (previous: %v) ---\n%s", o, prev, logs)
			}
		}
	}
	events, err := c.Kubectl("get", "events", "-A", "--sort-by=.lastTimestamp",
		"-o", "custom-columns=LAST:.lastTimestamp,NS:.metadata.namespace,OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message")
	if err != nil {
		events += "(" + err.Error() + ")"
	}
	fmt.Fprintf(&b, "--- events ---\n%s", lastLines(events, 40))
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "\n--- kubelet%s log tail ---\n%s\n", n.tag, logTail(filepath.Join(c.logDir, "kubelet"+n.tag+".log"), 30))
		if n.Containerd != nil {
			fmt.Fprintf(&b, "\n--- containerd%s log tail ---\n%s\n", n.tag, n.Containerd.LogTail(30))
		}
	}
	return b.String()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// poll calls check every interval until it says done, returns an error, or
// timeout passes; it returns check's last note with the failure.
func poll(timeout time.Duration, check func() (done bool, note string, err error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, note, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s (last seen: %s)", timeout, note)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitFor polls like poll and fails the test with a dump of objs.
func (c *Cluster) waitFor(what string, timeout time.Duration, objs []Object, check func() (bool, string, error)) {
	c.t.Helper()
	if err := poll(timeout, check); err != nil {
		c.t.Fatalf("harness: %s: %v\n%s", what, err, c.Dump(objs...))
	}
}

// condition returns the status of a condition of o ("" when absent).
func (c *Cluster) condition(o Object, typ string) (string, error) {
	return c.Get(o, `{.status.conditions[?(@.type=="`+typ+`")].status}`)
}

// WaitNodeReady waits until every node is Ready.
func (c *Cluster) WaitNodeReady(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for _, n := range c.Nodes {
		c.WaitNodeReadyOf(n, time.Until(deadline))
	}
}

// WaitNodeReadyOf waits until node n is Ready.
func (c *Cluster) WaitNodeReadyOf(n *ClusterNode, timeout time.Duration) {
	c.t.Helper()
	node := Object{Kind: "node", Name: n.Name}
	c.waitFor("node "+n.Name+" Ready", timeout, []Object{node}, func() (bool, string, error) {
		s, err := c.condition(node, "Ready")
		if err != nil {
			return false, err.Error(), nil // not registered yet
		}
		return s == "True", "Ready=" + s, nil
	})
}

// WaitPodReady waits until a pod is Ready.
func (c *Cluster) WaitPodReady(ns, name string, timeout time.Duration) {
	c.t.Helper()
	pod := Pod(ns, name)
	c.waitFor("pod "+pod.String()+" Ready", timeout, []Object{pod}, func() (bool, string, error) {
		s, err := c.condition(pod, "Ready")
		if err != nil {
			return false, err.Error(), nil
		}
		phase, _ := c.Get(pod, "{.status.phase}")
		if phase == "Failed" || phase == "Succeeded" {
			return false, "", fmt.Errorf("pod %s ended (%s) without being Ready\n%s", pod, phase, c.Dump(pod))
		}
		return s == "True", "phase " + phase + ", Ready=" + s, nil
	})
}

// WaitPodPhase waits until a pod is in phase ("Running", "Succeeded",
// "Failed").
func (c *Cluster) WaitPodPhase(ns, name, phase string, timeout time.Duration) {
	c.t.Helper()
	pod := Pod(ns, name)
	c.waitFor("pod "+pod.String()+" "+phase, timeout, []Object{pod}, func() (bool, string, error) {
		got, err := c.Get(pod, "{.status.phase}")
		if err != nil {
			return false, err.Error(), nil
		}
		return got == phase, "phase " + got, nil
	})
}

// WaitRollout waits until a DaemonSet has rolled out (kubectl rollout
// status); on failure it dumps the DaemonSet and its namespace's pods with
// their logs.
func (c *Cluster) WaitRollout(ns, name string, timeout time.Duration) {
	c.t.Helper()
	if err := c.TryWaitRollout(ns, name, timeout); err != nil {
		ds := Object{Kind: "daemonset", Namespace: ns, Name: name}
		c.t.Fatalf("harness: %v\n%s%s", err, c.Dump(ds), c.PodsDump(ns))
	}
}

// TryWaitRollout is WaitRollout returning the error instead.
func (c *Cluster) TryWaitRollout(ns, name string, timeout time.Duration) error {
	out, err := c.Kubectl("rollout", "status", "daemonset/"+name, "-n", ns, "--timeout", timeout.String())
	if err != nil {
		return fmt.Errorf("rollout of %s/daemonset/%s: %w\n%s", ns, name, err, out)
	}
	return nil
}

// PodsDump describes every pod of namespace ns, with the tail of each
// one's log.
func (c *Cluster) PodsDump(ns string) string {
	out, err := c.Kubectl("describe", "pods", "-n", ns)
	if err != nil {
		out += "(" + err.Error() + ")"
	}
	b := "--- pods of " + ns + " ---\n" + out
	names, _ := c.Kubectl("get", "pods", "-n", ns, "-o", "jsonpath={.items[*].metadata.name}")
	for _, p := range strings.Fields(names) {
		logs, err := c.Kubectl("logs", "-n", ns, p, "--all-containers=true", "--tail=40")
		if err != nil {
			logs += "(" + err.Error() + ")"
		}
		b += "--- log of " + ns + "/" + p + " ---\n" + logs
	}
	return b
}

// WaitJob waits until a Job has completed or failed and returns which
// ("Complete" or "Failed").
func (c *Cluster) WaitJob(ns, name string, timeout time.Duration) string {
	c.t.Helper()
	job := Object{Kind: "job", Namespace: ns, Name: name}
	var result string
	c.waitFor("job "+job.String()+" finished", timeout, []Object{job}, func() (bool, string, error) {
		for _, typ := range []string{"Complete", "Failed"} {
			s, err := c.condition(job, typ)
			if err != nil {
				return false, err.Error(), nil
			}
			if s == "True" {
				result = typ
				return true, "", nil
			}
		}
		active, _ := c.Get(job, "{.status.active}")
		return false, "active " + active, nil
	})
	return result
}

// WaitGone waits until an object no longer exists.
func (c *Cluster) WaitGone(o Object, timeout time.Duration) {
	c.t.Helper()
	c.waitFor(o.String()+" gone", timeout, []Object{o}, func() (bool, string, error) {
		out, err := c.Kubectl(append([]string{"get", "--ignore-not-found", "-o", "name"}, o.args()...)...)
		if err != nil {
			return false, err.Error(), nil
		}
		return strings.TrimSpace(out) == "", "still there", nil
	})
}

// WaitServiceAccount waits until a service account exists: pods that use
// it are refused before.
func (c *Cluster) WaitServiceAccount(ns, name string, timeout time.Duration) {
	c.t.Helper()
	sa := Object{Kind: "serviceaccount", Namespace: ns, Name: name}
	c.waitFor(sa.String()+" exists", timeout, []Object{sa}, func() (bool, string, error) {
		out, err := c.Kubectl(append([]string{"get", "--ignore-not-found", "-o", "name"}, sa.args()...)...)
		if err != nil {
			return false, err.Error(), nil
		}
		return strings.TrimSpace(out) != "", "not yet", nil
	})
}

// execRetry bounds how long Exec retries while the kubelet cannot reach
// containerd: after a containerd restart its CRI connection comes back
// only after a reconnect backoff of up to a few seconds.
const execRetry = 20 * time.Second

// Exec runs cmd in a container of a pod (kubectl exec) and returns its
// stdout. While the kubelet's connection to containerd is down (gRPC
// Unavailable, right after a containerd restart) it retries.
func (c *Cluster) Exec(ns, pod, container string, cmd ...string) (string, error) {
	if ns == "" {
		ns = "default"
	}
	args := []string{"exec", "-n", ns, pod}
	if container != "" {
		args = append(args, "-c", container)
	}
	args = append(append(args, "--"), cmd...)
	deadline := time.Now().Add(execRetry)
	for {
		out, err := c.Kubectl(args...)
		if err == nil || !strings.Contains(err.Error(), "code = Unavailable") || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Shm is what a container sees at /dev/shm.
type Shm struct {
	// Bytes is the filesystem's size (statfs blocks x block size).
	Bytes int64
	// Dev is stat's st_dev of /dev/shm: containers that share one tmpfs
	// see the same.
	Dev uint64
}

// ShmOf returns a container's /dev/shm size and st_dev, from busybox's
// stat inside it, failing the test when it cannot.
func (c *Cluster) ShmOf(ns, pod, container string) Shm {
	c.t.Helper()
	out, err := c.Exec(ns, pod, container, "stat", "-f", "-c", "%S %b", "/dev/shm")
	if err != nil {
		c.t.Fatalf("harness: %v\n%s", err, c.Dump(Pod(ns, pod)))
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		c.t.Fatalf("harness: stat -f of /dev/shm in %s/%s: %q", pod, container, out)
	}
	bs, err1 := strconv.ParseInt(f[0], 10, 64)
	blocks, err2 := strconv.ParseInt(f[1], 10, 64)
	out, err = c.Exec(ns, pod, container, "stat", "-c", "%d", "/dev/shm")
	if err != nil {
		c.t.Fatalf("harness: %v", err)
	}
	dev, err3 := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		c.t.Fatalf("harness: /dev/shm of %s/%s: %v %v %v", pod, container, err1, err2, err3)
	}
	return Shm{Bytes: bs * blocks, Dev: dev}
}

// ImportImage imports a docker-save archive into the node's containerd
// (namespace k8s.io), where pods find it without pulling.
func (c *Cluster) ImportImage(tarPath string) {
	c.t.Helper()
	c.Containerd.ImportImage(tarPath)
}

// WriteManifestDir writes files (name -> contents) into a new directory
// below the cluster's and returns it: a kustomization of a test's own.
func (c *Cluster) WriteManifestDir(files map[string]string) string {
	c.t.Helper()
	dir, err := os.MkdirTemp(c.Dir, "kustomize-")
	if err != nil {
		c.t.Fatalf("harness: %v", err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			c.t.Fatalf("harness: %v", err)
		}
	}
	return dir
}
