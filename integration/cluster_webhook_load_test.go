//go:build integration

package integration

// The admission webhook under load on the multi-node cluster, as issue
// #27 asks: 1,000 GPU pods and 100 plain pods created by 8 concurrent
// clients, one webhook replica killed outright mid-run and the Deployment
// rolled by `kubectl rollout restart`. Half of the GPU pods have their GPU
// from a DRA claim (issue #38), which the webhook resolves. The pods name a
// scheduler that does not exist, so none is ever scheduled: admission is
// what is measured.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/policy"
)

// The load: counts and clients as the issue gives them.
const (
	loadGPUPods   = 1000
	loadPlainPods = 100
	loadClients   = 8
	// loadSteady is how many pods are created at full speed before the
	// first disruption (pods/s and latency without one).
	loadSteady = 400
	// loadPace is the creation rate while a replica is killed or rolled:
	// slow enough that the pods last until the rollout is over.
	loadPace = 15 // pods/s
	// refusedFor is how long a client keeps creating a pod the API server
	// refused because no webhook replica answered (gpu-pods.gpurun.io
	// fails closed), as a controller would.
	refusedFor = time.Minute
	// unscheduled is the scheduler the pods name: none runs.
	unscheduled = "gpurun-test-unscheduled"
)

// webhookOverlay writes the test-local kustomization over the shipped
// webhook overlay: the image, and the API server's address for the
// webhook's own API calls (no kube-proxy: the kubernetes Service's
// ClusterIP answers nowhere). Nothing else changes.
func webhookOverlay(t *testing.T, c *harness.Cluster) string {
	t.Helper()
	return overShipped(t, c, "webhook", fmt.Sprintf(`patches:
  - target: {kind: Deployment, name: gpurun-webhook}
    patch: |-
      - {op: add, path: /spec/template/spec/containers/0/env, value: [{name: KUBERNETES_SERVICE_HOST, value: %q}, {name: KUBERNETES_SERVICE_PORT, value: "6443"}]}
`, c.APIServerIP))
}

// webhookPod is one replica as the endpoints and the pod list show it.
type webhookPod struct {
	Name, Node, IP, Container string
	Ready                     bool
	Restarts                  int
	Hash                      string // pod-template-hash
	Deleting                  bool
}

// webhookPods lists the webhook's pods.
func webhookPods(c *harness.Cluster) ([]webhookPod, error) {
	out, err := c.Kubectl("get", "pods", "-n", "gpurun-system", "-l", "app.kubernetes.io/name=gpurun-webhook", "-o", "json")
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, err
	}
	var pods []webhookPod
	for _, p := range list.Items {
		w := webhookPod{Name: p.Name, Node: p.Spec.NodeName, IP: p.Status.PodIP, Hash: p.Labels["pod-template-hash"], Deleting: p.DeletionTimestamp != nil}
		for _, cs := range p.Status.ContainerStatuses {
			w.Container = strings.TrimPrefix(cs.ContainerID, "containerd://")
			w.Restarts = int(cs.RestartCount)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady {
				w.Ready = cond.Status == corev1.ConditionTrue
			}
		}
		pods = append(pods, w)
	}
	return pods, nil
}

// installWebhookMulti applies the webhook overlay and waits until both
// replicas are ready, on two nodes, with the CA in the caBundle; it returns
// how long that took.
func (e *multiEnv) installWebhookMulti(t *testing.T) time.Duration {
	t.Helper()
	c := e.c.For(t)
	start := time.Now()
	overlay := webhookOverlay(t, c)
	applyOverlay(t, c, overlay)
	waitDeployment(t, c)
	if err := waitUntil(agentTimeout, caBundlesSet(c)); err != nil {
		t.Fatalf("caBundle: %v\n%s", err, c.PodsDump("gpurun-system"))
	}
	took := time.Since(start)
	pods, err := webhookPods(c)
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, p := range pods {
		nodes[p.Node] = true
	}
	if len(pods) != 2 || len(nodes) != 2 {
		t.Errorf("webhook replicas %+v: want two, on two nodes (topologySpreadConstraints)", pods)
	}
	return took
}

// loadPod is one pod of the load.
type loadPod struct {
	name string
	gpu  bool
	// claim: its GPU is a DRA claim's (the ResourceClaimTemplate one-gpu
	// or the ResourceClaim shared-gpu of draClaims), not nvidia.com/gpu.
	claim bool
	body  []byte
}

// loadResult is what became of one.
type loadResult struct {
	pod        *loadPod
	phase      string
	sent, done time.Time
	status     int
	err        string
	// refused are the creates the API server refused before this one
	// because the webhook call failed (failurePolicy Fail), each as when
	// it was sent and the API server's message.
	refused []refusal
	// problem says what is wrong with the admitted pod ("" nothing): a
	// GPU pod without its sized volume, a plain pod changed.
	problem string
	// unsized: a GPU pod admitted without the volume (failed open).
	unsized bool
}

// loadPods returns the pods of the load, a plain one every eleventh: GPU
// pods of two containers (a trainer with one GPU and an 8 GiB limit, a
// 1 GiB sidecar), plain pods of one 1 GiB container. Every other GPU pod
// has its GPU from a DRA claim (the trainer uses the pod's claim: by the
// ResourceClaimTemplate one-gpu and the ResourceClaim shared-gpu in turn,
// which draClaims creates in the pods' namespace), the others from
// nvidia.com/gpu.
func loadPods() []*loadPod {
	mk := func(name string, gpu bool, claim string) *loadPod {
		ctr := func(n, mem string, gpus int, claim string) map[string]any {
			limits := map[string]any{"memory": mem}
			if gpus > 0 {
				limits[harness.GPUResource] = fmt.Sprint(gpus)
			}
			res := map[string]any{"limits": limits}
			if claim != "" {
				res["claims"] = []any{map[string]any{"name": "gpu"}}
			}
			return map[string]any{"name": n, "image": harness.BusyboxRef, "imagePullPolicy": "Never",
				"command": []string{"sleep", "2147483647"}, "resources": res}
		}
		spec := map[string]any{"schedulerName": unscheduled, "terminationGracePeriodSeconds": 0, "containers": []any{ctr("app", "1Gi", 0, "")}}
		switch {
		case gpu && claim != "":
			spec["containers"] = []any{ctr("trainer", "8Gi", 0, claim), ctr("sidecar", "1Gi", 0, "")}
			key := "resourceClaimName"
			if claim == "one-gpu" {
				key = "resourceClaimTemplateName"
			}
			spec["resourceClaims"] = []any{map[string]any{"name": "gpu", key: claim}}
		case gpu:
			spec["containers"] = []any{ctr("trainer", "8Gi", 1, ""), ctr("sidecar", "1Gi", 0, "")}
		}
		b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name}, "spec": spec})
		return &loadPod{name: name, gpu: gpu, claim: claim != "", body: b}
	}
	var pods []*loadPod
	g, p := 0, 0
	for g < loadGPUPods || p < loadPlainPods {
		if (len(pods)+1)%11 == 0 && p < loadPlainPods || g == loadGPUPods {
			p++
			pods = append(pods, mk(fmt.Sprintf("plain-%03d", p), false, ""))
		} else {
			g++
			claim := ""
			switch g % 4 {
			case 1:
				claim = "one-gpu"
			case 3:
				claim = "shared-gpu"
			}
			pods = append(pods, mk(fmt.Sprintf("gpu-%04d", g), true, claim))
		}
	}
	return pods
}

// loadRun creates the pods with loadClients clients, at full speed or
// paced, and records each result.
type loadRun struct {
	c    *harness.Cluster
	ns   string
	want int64 // the GPU pods' sizeLimit
	pods []*loadPod

	mu      sync.Mutex
	next    int
	phase   string
	pace    time.Duration // 0: full speed
	nextAt  time.Time
	results []loadResult
	created chan struct{} // one per pod done
}

// take returns the next pod to create (nil when none is left), after the
// pacing's wait.
func (r *loadRun) take() (*loadPod, string) {
	r.mu.Lock()
	if r.next == len(r.pods) {
		r.mu.Unlock()
		return nil, ""
	}
	p, phase := r.pods[r.next], r.phase
	r.next++
	var wait time.Duration
	if r.pace > 0 {
		now := time.Now()
		if r.nextAt.Before(now) {
			r.nextAt = now
		}
		wait = r.nextAt.Sub(now)
		r.nextAt = r.nextAt.Add(r.pace)
	}
	r.mu.Unlock()
	time.Sleep(wait)
	return p, phase
}

// setPhase names what comes next, at a pace (0: full speed).
func (r *loadRun) setPhase(phase string, perSecond int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = phase
	r.pace = 0
	if perSecond > 0 {
		r.pace = time.Second / time.Duration(perSecond)
	}
	r.nextAt = time.Now()
}

// remaining is how many pods are not yet taken.
func (r *loadRun) remaining() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pods) - r.next
}

// refusal is one create the API server refused because a webhook call
// failed.
type refusal struct {
	sent    time.Time
	message string
}

// start starts loadClients workers, each with a client (and so
// connections) of its own; the WaitGroup is done when they are.
func (r *loadRun) start() *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := 0; i < loadClients; i++ {
		wg.Add(1)
		client := r.c.APIClient()
		go func() { defer wg.Done(); r.worker(client) }()
	}
	return &wg
}

// worker creates pods until none is left. A create the API server refuses
// because the webhook call failed is sent again, with a growing pause, for
// up to refusedFor, as a Deployment's or Job's controller does.
func (r *loadRun) worker(client *http.Client) {
	for {
		p, phase := r.take()
		if p == nil {
			return
		}
		res := loadResult{pod: p, phase: phase}
		pause, first := 50*time.Millisecond, time.Now()
		for {
			res.sent = time.Now()
			resp, err := client.Post("https://127.0.0.1:6443/api/v1/namespaces/"+r.ns+"/pods", "application/json", bytes.NewReader(p.body))
			if err != nil {
				res.err = err.Error()
				break
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			res.status, res.err = resp.StatusCode, ""
			if resp.StatusCode == http.StatusCreated {
				res.problem, res.unsized = r.check(p, body)
				break
			}
			res.err = strings.TrimSpace(string(body))
			if !strings.Contains(res.err, "failed calling webhook") || time.Since(first) > refusedFor {
				break
			}
			res.refused = append(res.refused, refusal{sent: res.sent, message: res.err})
			time.Sleep(pause)
			pause = min(2*pause, 2*time.Second)
		}
		res.done = time.Now()
		r.mu.Lock()
		r.results = append(r.results, res)
		r.mu.Unlock()
		r.created <- struct{}{}
	}
}

// check says what is wrong with a pod as the API server created it.
func (r *loadRun) check(p *loadPod, body []byte) (problem string, unsized bool) {
	var pod corev1.Pod
	if err := json.Unmarshal(body, &pod); err != nil {
		return "the created pod cannot be read: " + err.Error(), false
	}
	decision, annotated := pod.Annotations[webhook.DecisionAnnotation]
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == webhook.VolumeName {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if !p.gpu {
		if vol != nil || annotated {
			return fmt.Sprintf("a plain pod changed: volume %+v, decision %q", vol, decision), false
		}
		return "", false
	}
	if vol == nil && !annotated {
		return "a GPU pod admitted without its volume (the webhook was not called or failed open)", true
	}
	if vol == nil || vol.EmptyDir == nil || vol.EmptyDir.Medium != corev1.StorageMediumMemory || vol.EmptyDir.SizeLimit == nil || vol.EmptyDir.SizeLimit.Value() != r.want {
		return fmt.Sprintf("a GPU pod with volume %+v (decision %q), want a Memory emptyDir of %s", vol, decision, resource.NewQuantity(r.want, resource.BinarySI)), false
	}
	for _, ctr := range pod.Spec.Containers {
		if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == webhook.VolumeName && m.MountPath == "/dev/shm" }) {
			return fmt.Sprintf("container %s does not mount %s at /dev/shm", ctr.Name, webhook.VolumeName), false
		}
	}
	// A claim the webhook could not read is sized too (unresolved_claims
	// "gpu"): the decision must name the claim's request and its class.
	if p.claim && !strings.Contains(decision, "of device class "+harness.DRAGPUClass) {
		return fmt.Sprintf("a GPU pod by a DRA claim whose claim the webhook did not resolve: decision %q", decision), false
	}
	return "", false
}

// readyTimeline records, every 100 ms, the webhook Service's ready
// endpoints, as the API server's endpoint resolver reads them.
type readyTimeline struct {
	mu     sync.Mutex
	points []readyPoint
}

type readyPoint struct {
	at    time.Time
	ready []string // addresses
}

func (tl *readyTimeline) run(ctx context.Context, c *harness.Cluster) {
	client := c.APIClient()
	for {
		resp, err := client.Get("https://127.0.0.1:6443/apis/discovery.k8s.io/v1/namespaces/gpurun-system/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dgpurun-webhook")
		if err == nil {
			var list discoveryv1.EndpointSliceList
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if err == nil {
				pt := readyPoint{at: time.Now()}
				for _, s := range list.Items {
					for _, ep := range s.Endpoints {
						if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
							pt.ready = append(pt.ready, ep.Addresses...)
						}
					}
				}
				tl.mu.Lock()
				tl.points = append(tl.points, pt)
				tl.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readyAt returns how many endpoints were ready at time at (the last
// point before it), -1 when unknown.
func (tl *readyTimeline) readyAt(at time.Time) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := -1
	for _, p := range tl.points {
		if p.at.After(at) {
			break
		}
		n = len(p.ready)
	}
	return n
}

// minReady is the fewest ready endpoints seen between from and to.
func (tl *readyTimeline) minReady(from, to time.Time) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	low := -1
	for _, p := range tl.points {
		if p.at.Before(from) || p.at.After(to) {
			continue
		}
		if low < 0 || len(p.ready) < low {
			low = len(p.ready)
		}
	}
	return low
}

// histogram is a cumulative Prometheus histogram: upper bound -> count.
type histogram map[float64]float64

// add adds h2's counts.
func (h histogram) add(h2 histogram) {
	for le, n := range h2 {
		h[le] += n
	}
}

// sub returns h - base.
func (h histogram) sub(base histogram) histogram {
	out := histogram{}
	for le, n := range h {
		out[le] = n - base[le]
	}
	return out
}

// count is the number of observations.
func (h histogram) count() float64 { return h[math.Inf(1)] }

// quantile is Prometheus' histogram_quantile: linear within the bucket.
func (h histogram) quantile(q float64) float64 {
	var les []float64
	for le := range h {
		les = append(les, le)
	}
	sort.Float64s(les)
	total := h.count()
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	prevLE, prevN := 0.0, 0.0
	for _, le := range les {
		n := h[le]
		if n >= rank {
			if math.IsInf(le, 1) {
				return prevLE
			}
			if n == prevN {
				return le
			}
			return prevLE + (le-prevLE)*(rank-prevN)/(n-prevN)
		}
		prevLE, prevN = le, n
	}
	return prevLE
}

// bucketOf names the bucket the q-quantile falls in: "(lo, hi]" in ms.
func (h histogram) bucketOf(q float64) string {
	var les []float64
	for le := range h {
		les = append(les, le)
	}
	sort.Float64s(les)
	rank, lo := q*h.count(), 0.0
	for _, le := range les {
		if h[le] >= rank {
			return fmt.Sprintf("(%g, %g] ms", lo*1000, le*1000)
		}
		lo = le
	}
	return "none"
}

// within is the share of observations at or below le (a bucket's bound).
func (h histogram) within(le float64) float64 {
	if h.count() == 0 {
		return math.NaN()
	}
	return h[le] / h.count()
}

// parseMetrics parses Prometheus' text format.
func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// histogramOf sums the histograms of family name whose labels include
// match.
func histogramOf(fams map[string]*dto.MetricFamily, name string, match map[string]string) histogram {
	h := histogram{}
	f := fams[name]
	if f == nil {
		return h
	}
	for _, m := range f.Metric {
		if !labelsMatch(m, match) {
			continue
		}
		for _, b := range m.GetHistogram().GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // the parser may list +Inf as a bucket: the count is its value
				h[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		h[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
	}
	return h
}

// counterOf sums the counters (or gauges) of family name whose labels
// include match.
func counterOf(fams map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	var v float64
	for _, m := range f.Metric {
		if labelsMatch(m, match) {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range match {
		if got[k] != v {
			return false
		}
	}
	return true
}

// apiHistOf is the API server's histogram of its calls to the named
// webhooks (admission of CREATEs), summed.
func apiHistOf(fams map[string]*dto.MetricFamily, names ...string) histogram {
	h := histogram{}
	for _, n := range names {
		h.add(histogramOf(fams, "apiserver_admission_webhook_admission_duration_seconds", map[string]string{"name": n, "operation": "CREATE", "type": "admit"}))
	}
	return h
}

// apiserverMetrics scrapes the API server's /metrics.
func apiserverMetrics(c *harness.Cluster) (map[string]*dto.MetricFamily, error) {
	resp, err := c.APIClient().Get("https://127.0.0.1:6443/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseMetrics(resp.Body)
}

// webhookScraper keeps the last scrape of every webhook process seen (a
// pod's address and its process start time name one): a replica killed or
// rolled away takes its counters with it, the last scrape keeps them.
type webhookScraper struct {
	c    *harness.Cluster
	mu   sync.Mutex
	last map[string]map[string]*dto.MetricFamily
}

func (s *webhookScraper) scrape(ctx context.Context) {
	pods, err := webhookPods(s.c)
	if err != nil {
		return
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: s.c.DialContext}}
	defer client.CloseIdleConnections()
	for _, p := range pods {
		if p.IP == "" {
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+p.IP+":9469/metrics", nil)
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		fams, err := parseMetrics(resp.Body)
		resp.Body.Close()
		if err != nil {
			continue
		}
		key := fmt.Sprintf("%s@%v", p.Name, counterOf(fams, "process_start_time_seconds", nil))
		s.mu.Lock()
		s.last[key] = fams
		s.mu.Unlock()
	}
}

// busiest returns, of two replicas, the one that answered the most reviews
// in the last half second, and how many it and the other answered.
func (s *webhookScraper) busiest(ctx context.Context, pods []webhookPod) (webhookPod, [2]float64) {
	reviews := func() []float64 {
		s.scrape(ctx)
		s.mu.Lock()
		defer s.mu.Unlock()
		n := make([]float64, len(pods))
		for i, p := range pods {
			for key, fams := range s.last {
				if strings.HasPrefix(key, p.Name+"@") {
					n[i] = max(n[i], counterOf(fams, webhook.MetricsPrefix+"reviews_total", nil))
				}
			}
		}
		return n
	}
	before := reviews()
	time.Sleep(500 * time.Millisecond)
	after := reviews()
	best := 0
	if after[1]-before[1] > after[0]-before[0] {
		best = 1
	}
	return pods[best], [2]float64{after[best] - before[best], after[1-best] - before[1-best]}
}

func (s *webhookScraper) run(ctx context.Context) {
	for {
		s.scrape(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// total sums a histogram over every process seen.
func (s *webhookScraper) histogram(name string) histogram {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := histogram{}
	for _, fams := range s.last {
		h.add(histogramOf(fams, name, nil))
	}
	return h
}

// max is the largest value of a gauge over every process seen.
func (s *webhookScraper) max(name string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v float64
	for _, fams := range s.last {
		v = math.Max(v, counterOf(fams, name, nil))
	}
	return v
}

func (s *webhookScraper) counter(name string, match map[string]string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var v float64
	for _, fams := range s.last {
		v += counterOf(fams, name, match)
	}
	return v
}

// testWebhookLoad: the webhook overlay as shipped, two replicas on two
// nodes; 1,000 GPU and 100 plain pods from 8 clients; after the first 400
// (at full speed) one replica is killed outright (SIGKILL), and once it is
// back the Deployment is rolled (kubectl rollout restart), the pods paced
// meanwhile so that the load outlasts both; the rest at full speed. Every
// GPU pod created while a replica was ready carries the sized volume, no
// plain pod is changed; the webhook's own p99 and the API server's view
// of the webhook (its admission duration histogram, its fail-open count)
// are reported, with the pods/s reached and how long the rollout took.
func (e *multiEnv) testWebhookLoad(t *testing.T) {
	c := e.c.For(t)
	installed := e.installWebhookMulti(t)
	t.Logf("webhook: replicas ready and caBundle set %s after kubectl apply -k", installed.Round(100*time.Millisecond))
	ns := testNamespace(t, c)
	c.Apply(draClaims(ns))
	waitWebhookClaims(t, c, ns)
	want, _ := e.pol.Target(policy.Request{MemoryLimit: 9 * policy.GiB, GPUs: 1})
	run := &loadRun{c: c, ns: ns, want: want, pods: loadPods(), created: make(chan struct{}, loadGPUPods+loadPlainPods)}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	tl := &readyTimeline{}
	scraper := &webhookScraper{c: c, last: map[string]map[string]*dto.MetricFamily{}}
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); tl.run(ctx, c) }()
	go func() { defer bg.Done(); scraper.run(ctx) }()
	before, err := apiserverMetrics(c)
	if err != nil {
		t.Fatal(err)
	}
	failOpenOf := func(fams map[string]*dto.MetricFamily, name string) float64 {
		return counterOf(fams, "apiserver_admission_webhook_fail_open_count", map[string]string{"name": name})
	}

	waitCreated := func(n int) {
		for i := 0; i < n; i++ {
			select {
			case <-run.created:
			case <-time.After(2 * time.Minute):
				t.Fatalf("no pod created for 2 minutes (%d of %d left)", run.remaining(), len(run.pods))
			}
		}
	}
	run.setPhase("steady", 0)
	began := time.Now()
	workers := run.start()
	waitCreated(loadSteady)
	steadyTook := time.Since(began)
	steadyMetrics, err := apiserverMetrics(c)
	if err != nil {
		t.Fatal(err)
	}

	// One replica killed outright, at full speed: the one answering the
	// most of the API server's reviews (over its kept-alive HTTP/1.1
	// connections, spread over both), so that reviews are in flight on it
	// when it dies. The load is paced while it is found (half a second of
	// counting, at full speed, would take a third of the pods left), and
	// back at full speed for the kill.
	pods, err := webhookPods(c)
	if err != nil || len(pods) != 2 {
		t.Fatalf("webhook pods %+v, %v", pods, err)
	}
	run.setPhase("aim", 4*loadPace)
	victim, answered := scraper.busiest(ctx, pods)
	run.setPhase("kill", 0)
	time.Sleep(100 * time.Millisecond)
	killedAt := time.Now()
	if err := c.KillContainer(c.Node(victim.Node), victim.Container, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	run.setPhase("kill", loadPace)
	t.Logf("killing %s, which answered %v of the last reviews (the other: %v)", victim.Name, answered[0], answered[1])
	if err := waitUntil(agentTimeout, func() (bool, string) {
		now, err := webhookPods(c)
		for _, p := range now {
			if p.Name == victim.Name {
				return err == nil && p.Restarts > victim.Restarts && p.Ready, fmt.Sprintf("%+v", p)
			}
		}
		return false, fmt.Sprint(now, err)
	}); err != nil {
		t.Fatalf("the killed replica did not come back: %v\n%s", err, c.PodsDump("gpurun-system"))
	}
	backAfter := time.Since(killedAt)
	time.Sleep(2 * time.Second)

	// The Deployment rolled: every old replica drains and goes.
	run.setPhase("rollout", loadPace)
	rolledAt := time.Now()
	c.MustKubectl("rollout", "restart", "-n", "gpurun-system", "deployment/gpurun-webhook")
	waitDeployment(t, c)
	oldHash := victim.Hash
	if err := waitUntil(agentTimeout, func() (bool, string) {
		now, err := webhookPods(c)
		for _, p := range now {
			if p.Hash == oldHash {
				return false, fmt.Sprintf("%+v", now)
			}
		}
		return err == nil && len(now) == 2, fmt.Sprint(now, err)
	}); err != nil {
		t.Fatalf("old replicas still there after the rollout: %v", err)
	}
	rollout := time.Since(rolledAt)
	time.Sleep(2 * time.Second)
	if run.remaining() == 0 {
		t.Errorf("the load ended before the rollout did (%s): its end was not under load; lower loadPace", rollout.Round(100*time.Millisecond))
	}
	run.setPhase("final", 0)
	finalFrom, finalLeft := time.Now(), run.remaining()
	workers.Wait()
	finalTook := time.Since(finalFrom)
	waitCreated(len(run.pods) - loadSteady)
	scraper.scrape(ctx)
	stop()
	bg.Wait()
	after, err := apiserverMetrics(c)
	if err != nil {
		t.Fatal(err)
	}

	// What became of each pod. A GPU pod goes to gpu-pods.gpurun.io,
	// which fails closed: a review lost with the killed replica (the
	// reviews it was answering die with it, and the API server may still
	// connect to it until the endpoints drop it) is a refused create,
	// which the client sends again, never a pod admitted without its
	// volume. So any GPU pod without it is a failure, and so is a refusal
	// outside the kill (a rollout drains: it must lose no review) or of a
	// plain pod (pods.gpurun.io fails open).
	perPhase := map[string][3]int{} // created, unsized GPU pods, refusals
	var unsized, problems, failures, refusedOutside, refusedInKill []string
	claimPods, unsizedClaims := 0, 0
	killWindowEnd := killedAt.Add(backAfter)
	for _, r := range run.results {
		pp := perPhase[r.phase]
		pp[0]++
		if r.pod.claim {
			claimPods++
			if r.unsized {
				unsizedClaims++
			}
		}
		pp[2] += len(r.refused)
		for _, f := range r.refused {
			note := fmt.Sprintf("%s (%s, sent %s after the kill, %d ready endpoints then): %s", r.pod.name, r.phase,
				f.sent.Sub(killedAt).Round(time.Millisecond), tl.readyAt(f.sent), f.message)
			if r.pod.gpu && !f.sent.Before(killedAt.Add(-time.Second)) && f.sent.Before(killWindowEnd) {
				refusedInKill = append(refusedInKill, note)
			} else {
				refusedOutside = append(refusedOutside, note)
			}
		}
		switch {
		case r.err != "":
			failures = append(failures, fmt.Sprintf("%s (%s): %d %s", r.pod.name, r.phase, r.status, r.err))
		case r.unsized:
			pp[1]++
			unsized = append(unsized, fmt.Sprintf("%s (%s, sent %s after the kill, answered %s later, %d ready endpoints then)", r.pod.name, r.phase,
				r.sent.Sub(killedAt).Round(time.Millisecond), r.done.Sub(r.sent).Round(time.Millisecond), tl.readyAt(r.sent)))
		case r.problem != "":
			problems = append(problems, r.pod.name+": "+r.problem)
		}
		perPhase[r.phase] = pp
	}
	failOpenGPU := failOpenOf(after, webhook.GPUWebhookName) - failOpenOf(before, webhook.GPUWebhookName)
	failOpenPods := failOpenOf(after, webhook.PodsWebhookName) - failOpenOf(before, webhook.PodsWebhookName)
	rejectedOf := func(fams map[string]*dto.MetricFamily) float64 {
		return counterOf(fams, "apiserver_admission_webhook_rejection_count", map[string]string{"name": webhook.GPUWebhookName, "error_type": "calling_webhook_error"})
	}
	rejected := rejectedOf(after) - rejectedOf(before)
	steadyHist := apiHistOf(steadyMetrics, webhook.GPUWebhookName, webhook.PodsWebhookName).sub(apiHistOf(before, webhook.GPUWebhookName, webhook.PodsWebhookName))
	allHist := apiHistOf(after, webhook.GPUWebhookName, webhook.PodsWebhookName).sub(apiHistOf(before, webhook.GPUWebhookName, webhook.PodsWebhookName))
	gpuHist := apiHistOf(after, webhook.GPUWebhookName).sub(apiHistOf(before, webhook.GPUWebhookName))
	podsHist := apiHistOf(after, webhook.PodsWebhookName).sub(apiHistOf(before, webhook.PodsWebhookName))
	own := scraper.histogram(webhook.MetricsPrefix + "admission_duration_seconds")
	mutated := scraper.counter(webhook.MetricsPrefix+"reviews_total", map[string]string{"outcome": webhook.OutcomeMutated})
	ms := func(s float64) string { return fmt.Sprintf("%.2f ms", s*1000) }

	t.Logf("load: %d GPU (%d of them by a DRA claim) + %d plain pods by %d clients; phases (created, GPU pods unsized, refusals sent again): %v; GPU pods by a claim unsized: %d",
		loadGPUPods, claimPods, loadPlainPods, loadClients, perPhase, unsizedClaims)
	t.Logf("pods/s at full speed: %.0f (first %d pods in %s), %.0f (last %d in %s)", float64(loadSteady)/steadyTook.Seconds(), loadSteady,
		steadyTook.Round(time.Millisecond), float64(finalLeft)/finalTook.Seconds(), finalLeft, finalTook.Round(time.Millisecond))
	t.Logf("killed replica %s on %s: ready again %s later; rollout restart: old replicas gone %s after it", victim.Name, victim.Node,
		backAfter.Round(100*time.Millisecond), rollout.Round(100*time.Millisecond))
	t.Logf("API server, both entries: p50 %s in %s, p99 %s in %s, %.1f%% within 5 ms over %v calls (no disruption: p50 %s, p99 %s in %s, %.1f%% within 5 ms); %s: %v calls, p99 %s; %s: %v calls, p99 %s; failed open: %v (%s), %v (%s)",
		ms(allHist.quantile(0.5)), allHist.bucketOf(0.5), ms(allHist.quantile(0.99)), allHist.bucketOf(0.99), 100*allHist.within(0.005), allHist.count(),
		ms(steadyHist.quantile(0.5)), ms(steadyHist.quantile(0.99)), steadyHist.bucketOf(0.99), 100*steadyHist.within(0.005),
		webhook.GPUWebhookName, gpuHist.count(), ms(gpuHist.quantile(0.99)), webhook.PodsWebhookName, podsHist.count(), ms(podsHist.quantile(0.99)),
		failOpenGPU, webhook.GPUWebhookName, failOpenPods, webhook.PodsWebhookName)
	t.Logf("API server: %v creates refused because the call to %s failed; the clients saw %d refusals (%d while the killed replica was dead or restarting)",
		rejected, webhook.GPUWebhookName, len(refusedInKill)+len(refusedOutside), len(refusedInKill))
	cpu := scraper.counter("process_cpu_seconds_total", nil)
	rss := scraper.max("process_resident_memory_bytes")
	conns := scraper.counter(webhook.MetricsPrefix+"connections_total", nil)
	t.Logf("the webhook's own histogram: p50 %s, p99 %s over %v reviews from %d processes (%v mutated); %.2f ms of CPU per review (start-up included), at most %.0f MiB resident; %v connections accepted",
		ms(own.quantile(0.5)), ms(own.quantile(0.99)), own.count(), len(scraper.last), mutated, 1000*cpu/own.count(), rss/(1<<20), conns)
	t.Logf("the machine's load average at the end: %s (%d CPUs); latency is this machine's, shared with other work", loadAverage(), runtime.NumCPU())
	fmt.Printf("bench: webhook-load gpu_pods=%d unsized=%d refused=%d failed_open=%v pods_per_s=%.0f apiserver_p50_ms=%.2f apiserver_p99_ms=%.2f apiserver_within_5ms=%.3f webhook_p50_ms=%.3f webhook_p99_ms=%.3f rollout_s=%.1f\n",
		loadGPUPods, len(unsized), len(refusedInKill)+len(refusedOutside), failOpenGPU+failOpenPods, float64(loadSteady)/steadyTook.Seconds(), allHist.quantile(0.5)*1000, allHist.quantile(0.99)*1000,
		allHist.within(0.005), own.quantile(0.5)*1000, own.quantile(0.99)*1000, rollout.Seconds())

	if len(failures) > 0 {
		t.Errorf("%d pods not created:\n%s", len(failures), strings.Join(failures[:min(len(failures), 20)], "\n"))
	}
	if len(problems) > 0 {
		t.Errorf("%d pods admitted wrong:\n%s", len(problems), strings.Join(problems[:min(len(problems), 20)], "\n"))
	}
	t.Run("every GPU node", func(t *testing.T) { e.webhookOnEveryNode(t, want) })
	t.Run("floor", func(t *testing.T) { e.testWebhookFloor(t, want) })

	low := tl.minReady(began, time.Now())
	if len(unsized) > 0 {
		t.Errorf("%d GPU pods admitted without their volume (fewest ready endpoints seen: %d):\n%s",
			len(unsized), low, strings.Join(unsized, "\n"))
	}
	if failOpenGPU > 0 {
		t.Errorf("the API server counted %v calls to %s failed open: it fails closed", failOpenGPU, webhook.GPUWebhookName)
	}
	if refusals := float64(len(refusedInKill) + len(refusedOutside)); rejected != refusals {
		t.Errorf("the API server counted %v creates refused by a failed call to %s, the clients %v", rejected, webhook.GPUWebhookName, refusals)
	}
	if len(refusedInKill) > 0 {
		t.Logf("%d creates of GPU pods refused while the killed replica was dead or restarting, each sent again and admitted with its volume (fewest ready endpoints seen: %d):\n%s",
			len(refusedInKill), low, strings.Join(refusedInKill[:min(len(refusedInKill), 20)], "\n"))
	}
	if len(refusedOutside) > 0 {
		t.Errorf("%d creates refused outside the kill (a rollout that lost reviews, or a plain pod refused):\n%s",
			len(refusedOutside), strings.Join(refusedOutside[:min(len(refusedOutside), 20)], "\n"))
	}
	if low < 1 {
		t.Errorf("at some point no webhook endpoint was ready: a rollout or a kill left none")
	}
	if gpuHist.count() < loadGPUPods || podsHist.count() < loadPlainPods {
		t.Errorf("the API server's histogram counted %v calls to %s and %v to %s, want at least %d and %d: each pod goes to one entry",
			gpuHist.count(), webhook.GPUWebhookName, podsHist.count(), webhook.PodsWebhookName, loadGPUPods, loadPlainPods)
	}
	if podsHist.count() > loadPlainPods+float64(len(refusedOutside)) {
		t.Errorf("the API server sent %v calls to %s for %d plain pods: GPU pods reached the entry that fails open", podsHist.count(), webhook.PodsWebhookName, loadPlainPods)
	}
	// The last second of the killed process's counters is not scraped.
	if own.count() < 0.9*float64(len(run.pods)) || mutated < 0.9*loadGPUPods {
		t.Errorf("the webhook's own metrics counted %v reviews, %v mutated: want about %d and %d", own.count(), mutated, len(run.pods), loadGPUPods)
	}
	// Latency depends on the machine: a budget is checked when one is
	// given (a quiet machine), and reported always.
	if budget := os.Getenv("GPURUN_TEST_WEBHOOK_P99_MS"); budget != "" {
		var b float64
		if _, err := fmt.Sscan(budget, &b); err != nil {
			t.Fatalf("GPURUN_TEST_WEBHOOK_P99_MS=%q: %v", budget, err)
		}
		if p99 := own.quantile(0.99) * 1000; p99 > b {
			t.Errorf("the webhook's own p99 %.2f ms: over the budget of %v ms", p99, b)
		}
	}
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// webhookOnEveryNode: with the webhook, a GPU pod on each GPU node (of
// whatever engine) runs with a /dev/shm of the policy's size, one tmpfs
// for its containers (the kubelet mounts the Memory emptyDir at its
// sizeLimit); a plain pod on the node without GPUs keeps containerd's. On
// the node with the DRA driver (containerd 2.x), a pod whose GPU is a DRA
// claim gets both: the webhook's size and its device.
func (e *multiEnv) webhookOnEveryNode(t *testing.T, want int64) {
	c := e.c.For(t)
	ns := testNamespace(t, c)
	type check struct {
		pod, node string
		want      int64
		ctrs      []string
	}
	var checks []check
	for _, n := range c.Nodes {
		name := "on-" + n.Name
		if n.GPUs == 0 {
			c.Apply(pinnedPod(ns, name, n.Name))
			checks = append(checks, check{name, n.Name, engineShm, []string{"app"}})
			continue
		}
		c.Apply(fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  nodeName: %[3]s
  terminationGracePeriodSeconds: 1
  containers:
  - {name: trainer, image: %[4]s, imagePullPolicy: Never, command: [sleep, "2147483647"], resources: {limits: {memory: 8Gi, %[5]s: 1}}}
  - {name: sidecar, image: %[4]s, imagePullPolicy: Never, command: [sleep, "2147483647"], resources: {limits: {memory: 1Gi}}}
`, name, ns, n.Name, harness.BusyboxRef, harness.GPUResource))
		checks = append(checks, check{name, n.Name, want, []string{"trainer", "sidecar"}})
	}
	var draPod podSpec
	if e.dra != nil {
		node := e.dra.gpus.Node.Name
		c.Apply(draClaims(ns))
		waitWebhookClaims(t, c, ns)
		draPod = podSpec{name: "dra-on-" + node, node: node, claims: []podClaim{{name: "gpu", template: "one-gpu"}}, containers: []containerSpec{
			{name: "trainer", claims: []string{"gpu"}, memoryLimit: "8Gi"}, {name: "sidecar", memoryLimit: "1Gi"}}}
		c.Apply(podManifest(ns, draPod))
		checks = append(checks, check{draPod.name, node, want, []string{"trainer", "sidecar"}})
	}
	for _, ch := range checks {
		c.WaitPodReady(ns, ch.pod, podTimeout)
		var first harness.Shm
		for i, ctr := range ch.ctrs {
			got := c.ShmOf(ns, ch.pod, ctr)
			if got.Bytes != ch.want {
				t.Errorf("node %s, container %s: /dev/shm %s, want %s", ch.node, ctr, policy.FormatSize(got.Bytes), policy.FormatSize(ch.want))
			}
			if i == 0 {
				first = got
			} else if got.Dev != first.Dev {
				t.Errorf("node %s: the pod's containers have /dev/shm of st_dev %d and %d: not one tmpfs", ch.node, first.Dev, got.Dev)
			}
		}
	}
	if e.dra != nil {
		checkDRADevices(t, c, e.dra, ns, draPod)
	}
}
