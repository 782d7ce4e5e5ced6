package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsPrefix starts the name of every metric of the webhook's own.
const MetricsPrefix = "gpurun_webhook_"

// DurationBuckets returns the admission duration histogram's upper bounds, in
// seconds: fine below 10 ms, where a review should be (a quarter of a
// millisecond apart up to 2 ms, one millisecond apart up to 5 ms), coarse
// up to the API server's longest timeout (30 s).
func DurationBuckets() []float64 {
	return []float64{
		0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005,
		0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
	}
}

// The values of the reviews counter's outcome label.
const (
	// OutcomeMutated: the pod was admitted with a patch.
	OutcomeMutated = "mutated"
	// OutcomeUnchanged: admitted as it is.
	OutcomeUnchanged = "unchanged"
	// OutcomeWarning: admitted as it is, with a warning (a pod that
	// cannot be read or decided).
	OutcomeWarning = "warning"
	// OutcomeError: the request was refused with an HTTP error (not a
	// POSTed JSON AdmissionReview, too large, undecodable); the API server
	// counts it as a failed call.
	OutcomeError = "error"
)

// The values of the reviews counter's decision label beyond podspec's
// actions (emptydir, host-ipc, none).
const (
	// DecisionNotGPU: the policy does not apply to the pod (no GPU
	// evidence, or opted out).
	DecisionNotGPU = "not-gpu"
	// DecisionSkipped: the review was not planned (not a pod CREATE, a
	// pod that already has the volume, a pod that cannot be read).
	DecisionSkipped = "skipped"
	// DecisionInvalid: the request was refused before any review.
	DecisionInvalid = "invalid"
)

// Metrics are the webhook's own Prometheus metrics, on a registry of
// their own (never the process-wide default): how long each admission
// took, each review by decision and outcome, the reviews in flight,
// readiness, and the serving certificate's reloads and expiry.
type Metrics struct {
	// Registry holds them, and Go's and the process's collectors.
	Registry *prometheus.Registry

	duration   prometheus.Histogram
	reviews    *prometheus.CounterVec
	inFlight   prometheus.Gauge
	ready      prometheus.Gauge
	tlsReloads *prometheus.CounterVec
	conns      prometheus.Counter
	connsOpen  prometheus.Gauge
	cacheObjs  *prometheus.GaugeVec
	cacheSync  *prometheus.GaugeVec
}

// NewMetrics makes the metrics and their registry. cert, when not nil,
// returns the serving certificate in use, for the expiry gauge.
func NewMetrics(cert func() *tls.Certificate) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    MetricsPrefix + "admission_duration_seconds",
			Help:    "Time from a review's request to its answer, in the webhook (TLS and the network not included).",
			Buckets: DurationBuckets(),
		}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricsPrefix + "reviews_total",
			Help: "Admission reviews answered, by decision (emptydir, host-ipc, none, not-gpu, skipped, invalid) and outcome (mutated, unchanged, warning, error).",
		}, []string{"decision", "outcome"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricsPrefix + "reviews_in_flight",
			Help: "Reviews being answered now.",
		}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricsPrefix + "ready",
			Help: "1 while the webhook can admit (its readiness), 0 while it starts or drains.",
		}),
		tlsReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricsPrefix + "tls_reloads_total",
			Help: "Serving certificate loads after the first, by result (success, failure: the previous pair stays in use).",
		}, []string{"result"}),
		conns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricsPrefix + "connections_total",
			Help: "Connections accepted on the review port, a TLS handshake each. The API server keeps its connections open: a count that grows with the reviews means connections are not reused.",
		}),
		connsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricsPrefix + "connections_open",
			Help: "Connections open on the review port now.",
		}),
		cacheObjs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricsPrefix + "claims_cache_objects",
			Help: "Objects in the cache the webhook resolves pods' DRA resource claims from, by resource (resourceclaims, resourceclaimtemplates, deviceclasses).",
		}, []string{"resource"}),
		cacheSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricsPrefix + "claims_cache_synced",
			Help: "1 while the claims cache of a resource is current (listed, and watched since), 0 while its list fails: claims it cannot resolve are judged by the policy's unresolved_claims.",
		}, []string{"resource"}),
	}
	m.Registry.MustRegister(m.duration, m.reviews, m.inFlight, m.ready, m.tlsReloads, m.conns, m.connsOpen, m.cacheObjs, m.cacheSync,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cert != nil {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricsPrefix + "tls_certificate_expiry_timestamp_seconds",
			Help: "When the serving certificate in use expires (Unix time; 0: none loaded).",
		}, func() float64 {
			if leaf := leafOf(cert()); leaf != nil {
				return float64(leaf.NotAfter.Unix())
			}
			return 0
		}))
	}
	for _, r := range []string{"success", "failure"} {
		m.tlsReloads.WithLabelValues(r)
	}
	return m
}

// leafOf returns a pair's parsed leaf certificate, or nil.
func leafOf(c *tls.Certificate) *x509.Certificate {
	if c == nil || len(c.Certificate) == 0 {
		return nil
	}
	if c.Leaf != nil {
		return c.Leaf
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil
	}
	return leaf
}

// observe records one answered review.
func (m *Metrics) observe(decision, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.duration.Observe(took.Seconds())
	m.reviews.WithLabelValues(decision, outcome).Inc()
}

// begin and end count a review in flight.
func (m *Metrics) begin() {
	if m != nil {
		m.inFlight.Inc()
	}
}

func (m *Metrics) end() {
	if m != nil {
		m.inFlight.Dec()
	}
}

// setReady records readiness.
func (m *Metrics) setReady(ok bool) {
	if m == nil {
		return
	}
	v := 0.0
	if ok {
		v = 1
	}
	m.ready.Set(v)
}

// TLSReloaded counts a serving certificate load after the first (err
// nil: it is in use now).
func (m *Metrics) TLSReloaded(err error) {
	if m == nil {
		return
	}
	r := "success"
	if err != nil {
		r = "failure"
	}
	m.tlsReloads.WithLabelValues(r).Inc()
}

// ConnState counts the review port's connections: set it as the
// http.Server's ConnState.
func (m *Metrics) ConnState(_ net.Conn, state http.ConnState) {
	if m == nil {
		return
	}
	switch state {
	case http.StateNew:
		m.conns.Inc()
		m.connsOpen.Inc()
	case http.StateClosed, http.StateHijacked:
		m.connsOpen.Dec()
	}
}

// claimsCache records a claims cache's state.
func (m *Metrics) claimsCache(resource string, objects int, synced bool) {
	if m == nil {
		return
	}
	m.cacheObjs.WithLabelValues(resource).Set(float64(objects))
	v := 0.0
	if synced {
		v = 1
	}
	m.cacheSync.WithLabelValues(resource).Set(v)
}

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
