package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/policy"
)

// benchPod is a case of the benchmarks: a pod, and what resolves its
// claims.
type benchPod struct {
	name   string
	pod    *corev1.Pod
	claims podspec.Claims
}

// benchPods are a PyTorchJob worker as the Kubeflow operator creates it,
// its 4 GPUs from NVIDIA's device plugin (nvidia.com/gpu: 4); and the
// same worker with its 4 GPUs as a DRA claim of a ResourceClaimTemplate,
// resolved from a ClaimCache that listed it from an API server (as the
// webhook's does: a lookup in memory, no API call per review) among 1,000
// templates and 1,000 claims of other namespaces.
func benchPods(b *testing.B) []benchPod {
	t := &testing.T{}
	plugin := loadPod(t, "kubeflow-pytorchjob-worker.yaml")
	claim := plugin.DeepCopy()
	c := &claim.Spec.Containers[0]
	delete(c.Resources.Limits, "nvidia.com/gpu")
	delete(c.Resources.Requests, "nvidia.com/gpu")
	c.Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	claim.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: str("four-gpus")}}
	objects := draObjects()
	template := func(ns, name string) resourcev1.ResourceClaimTemplate {
		return resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{
			Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", Count: 4}}}}}}}
	}
	objects[ResourceClaimTemplates] = append(objects[ResourceClaimTemplates], template("kubeflow-user", "four-gpus"))
	for i := range 1000 {
		ns := fmt.Sprintf("team-%d", i)
		objects[ResourceClaimTemplates] = append(objects[ResourceClaimTemplates], template(ns, "four-gpus"))
		objects[ResourceClaims] = append(objects[ResourceClaims], resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"}})
	}
	cache := startCache(b, &draAPI{objects: objects})
	if tmpl, err := cache.ResourceClaimTemplate("kubeflow-user", "four-gpus"); err != nil || tmpl == nil {
		b.Fatalf("the cache lacks the template: %v", err)
	}
	return []benchPod{{"device-plugin", plugin, cache}, {"dra-claim", claim, cache}}
}

// BenchmarkReview: one admission decision in-process (decode the pod,
// translate, resolve its claims, decide, build the patch) for a
// PyTorchJob worker whose GPUs come from the device plugin, and for the
// same worker with its GPUs as a DRA claim; reports the 99th percentile,
// which must stay under a millisecond, and about the same for both.
func BenchmarkReview(b *testing.B) {
	pol := policy.Default()
	for _, bp := range benchPods(b) {
		b.Run(bp.name, func(b *testing.B) {
			r := review(&testing.T{}, bp.pod, admissionv1.Create)
			times := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				out, m := ReviewWith(r, pol, bp.claims)
				times = append(times, time.Since(start))
				if len(out.Response.Patch) == 0 || m.Decision.Plans[1].GPUs != 4 {
					b.Fatalf("no patch, or not 4 GPUs: %s", m.Decision.Reason)
				}
			}
			b.StopTimer()
			slices.Sort(times)
			p99 := times[len(times)*99/100]
			b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
			if testing.Verbose() {
				fmt.Printf("admission decision, %s: p99 %s over %d\n", bp.name, p99, len(times))
			}
		})
	}
}

// BenchmarkServe: one review as the API server sends it, end to end
// through the handler as Serve sets it up (TLS, HTTP/1.1 with kept-alive
// connections, the JSON log at Info, the metrics, the claims cache), from
// as many concurrent clients as GOMAXPROCS; for the device plugin's
// worker and the DRA claim's. The client shares the process and its
// CPUs: ns/op bounds what a review costs both ends.
func BenchmarkServe(b *testing.B) {
	pol := policy.Default()
	for _, bp := range benchPods(b) {
		b.Run(bp.name, func(b *testing.B) {
			body, err := json.Marshal(review(&testing.T{}, bp.pod, admissionv1.Create))
			if err != nil {
				b.Fatal(err)
			}
			h := &Handler{Policy: func() *policy.Policy { return pol }, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: NewMetrics(nil), Claims: bp.claims}
			srv := httptest.NewUnstartedServer(h)
			srv.Config.Protocols = reviewProtocols()
			srv.StartTLS()
			defer srv.Close()
			client := srv.Client()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := post(client, srv.URL, body); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// post sends one review and reads its answer.
func post(client *http.Client, url string, body []byte) error {
	resp, err := client.Post(url+MutatePath, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s", resp.Proto, resp.Status)
	}
	return nil
}

// Load of BenchmarkServeProcess: the multi-node cluster test's floor
// round, 8 clients creating pods at about 200 a second.
const (
	processClients = 8
	processPace    = 40 * time.Millisecond // between one client's reviews
)

// BenchmarkServeProcess: what a review costs the webhook process in CPU,
// as the cluster's webhook-load/floor test measures it
// (process_cpu_seconds_total over the reviews), without the cluster: Serve
// in a process of its own (the test binary, as TestServeSIGTERM starts
// it, with the GOGC the manifests set), 8 clients posting the PyTorchJob
// worker's review over kept-alive connections at about 200 reviews a
// second in all, as the API server does under the floor test's load. At
// that rate the process idles between reviews, and each wake-up costs
// more than a review sent back to back. Side by side, the same load on
// the do-nothing webhook (internal/nullwebhook) in a process started the
// same way: the floor, what any Go webhook served so costs here; gpurun's
// over it is what gpurun's review adds. Each reports the process's CPU
// time per review (cpu-ms/review; read from the kernel's per-thread
// schedstat, in nanoseconds) and the clients' p50 and p99.
// GPURUN_WEBHOOK_TEST_CPUPROFILE writes gpurun's process's CPU profile.
func BenchmarkServeProcess(b *testing.B) {
	t := &testing.T{}
	caPEM, certFile, keyFile, _ := servingPair(t, b.TempDir(), time.Now())
	body, err := json.Marshal(review(t, loadPod(t, "kubeflow-pytorchjob-worker.yaml"), admissionv1.Create))
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, kind := range []struct {
		name string
		env  []string
	}{
		{"do-nothing", []string{nullEnv + "=1"}},
		{"gpurun", nil},
	} {
		b.Run(kind.name, func(b *testing.B) {
			p := startWebhook(b, certFile, keyFile, 0, append(manifestEnv(b), kind.env...)...)
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: processClients,
				TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: ServiceNames("gpurun-webhook", "gpurun-system")[0]}}}
			defer client.CloseIdleConnections()
			paceReviews(b, p, client, "https://"+p.addr, body)
		})
	}
}

// paceReviews sends p b.N reviews of body at processPace from
// processClients clients, and reports p's CPU time per review and the
// clients' p50 and p99; then interrupts p and waits for it.
func paceReviews(b *testing.B, p *webhookProcess, client *http.Client, url string, body []byte) {
	for range 2 * processClients {
		if err := post(client, url, body); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	var took []time.Duration
	next := make(chan struct{})
	var wg sync.WaitGroup
	for range processClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(processPace)
			defer tick.Stop()
			for range next {
				<-tick.C
				start := time.Now()
				if err := post(client, url, body); err != nil {
					b.Error(err)
				}
				mu.Lock()
				took = append(took, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	before := threadsCPU(b, p.cmd.Process.Pid)
	b.ResetTimer()
	for b.Loop() {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	b.StopTimer()
	cpu := threadsCPU(b, p.cmd.Process.Pid) - before
	slices.Sort(took)
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(len(took)), "cpu-ms/review")
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	if err := p.cmd.Process.Signal(os.Interrupt); err == nil {
		<-p.done
	}
}

// manifestEnv is the webhook container's environment in the manifests
// (deploy/kubernetes/overlays/webhook/deployment.yaml), as VAR=value, of
// the variables with a value there: the Go runtime's settings.
func manifestEnv(b *testing.B) []string {
	file := filepath.Join("..", "..", "deploy", "kubernetes", "overlays", "webhook", "deployment.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	var env []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			b.Fatalf("%s: %v", file, err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Value != "" {
					env = append(env, e.Name+"="+e.Value)
				}
			}
		}
	}
	if len(env) == 0 {
		b.Fatalf("%s: no environment in the webhook's Deployment", file)
	}
	return env
}

// threadsCPU is the CPU time process pid's threads have run, from the
// kernel's schedstat (nanoseconds; /proc/PID/stat counts in ticks of
// 10 ms, too coarse for a second of reviews).
func threadsCPU(b *testing.B, pid int) time.Duration {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, task := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, task.Name(), "schedstat"))
		if err != nil {
			continue // the thread is gone
		}
		var ns int64
		if _, err := fmt.Sscan(string(data), &ns); err != nil {
			b.Fatalf("%s/%s/schedstat: %v", dir, task.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum
}
