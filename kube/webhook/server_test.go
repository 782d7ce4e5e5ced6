package webhook

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gpurun/gpurun/policy"
)

// servingPair makes a CA and a serving pair for the webhook's Service,
// valid from now, and returns the CA (PEM) and the pair, as files in dir
// and loaded.
func servingPair(t *testing.T, dir string, now time.Time) (caPEM []byte, certFile, keyFile string, pair *tls.Certificate) {
	t.Helper()
	caPEM, caKey, err := NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := NewServing(caPEM, caKey, ServiceNames("gpurun-webhook", "gpurun-system"), now)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, data := range map[string][]byte{certFile: crt, keyFile: key} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	return caPEM, certFile, keyFile, &p
}

// TestReadiness: /readyz says the webhook can admit only with a policy, a
// serving pair valid now, a self-review that goes through, and not while
// it drains; /healthz stays ok throughout. The ready gauge follows.
func TestReadiness(t *testing.T) {
	now := time.Now()
	_, _, _, pair := servingPair(t, t.TempDir(), now)
	leaf := leafOf(pair)
	for _, tc := range []struct {
		name  string
		h     *Handler
		drain bool
		want  string // "" ready, else a part of the reason
	}{
		{"ready", &Handler{Policy: policy.Default, Certificate: func() *tls.Certificate { return pair }}, false, ""},
		{"ready, no certificate check", &Handler{Policy: policy.Default}, false, ""},
		{"no policy", &Handler{Policy: func() *policy.Policy { return nil }}, false, "no policy"},
		{"no certificate yet", &Handler{Policy: policy.Default, Certificate: func() *tls.Certificate { return nil }}, false, "no serving certificate"},
		{"expired certificate", &Handler{Policy: policy.Default, Certificate: func() *tls.Certificate { return pair },
			Now: func() time.Time { return leaf.NotAfter.Add(time.Minute) }}, false, "not now"},
		{"draining", &Handler{Policy: policy.Default}, true, "draining"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.h.Metrics = NewMetrics(nil)
			if tc.drain {
				tc.h.Drain()
			}
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			get := func(path string) (int, string) {
				resp, err := srv.Client().Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			status, body := get("/readyz")
			gauge := testutil.ToFloat64(tc.h.Metrics.ready)
			if tc.want == "" && (status != 200 || gauge != 1) {
				t.Errorf("/readyz %d %q, gauge %v: want ready", status, body, gauge)
			}
			if tc.want != "" && (status != 503 || !strings.Contains(body, tc.want) || gauge != 0) {
				t.Errorf("/readyz %d %q, gauge %v: want 503 saying %q", status, body, gauge, tc.want)
			}
			if status, body := get("/healthz"); status != 200 {
				t.Errorf("/healthz %d %q: want alive", status, body)
			}
		})
	}
}

// TestDrainingAnswers: once draining, reviews are still answered, and each
// HTTP/1 answer closes its connection (the API server's pooled
// connections to this replica go away one by one as they are used).
func TestDrainingAnswers(t *testing.T) {
	body, _ := json.Marshal(review(t, loadPod(t, "vllm-deployment.yaml"), admissionv1.Create))
	for _, drain := range []bool{false, true} {
		h := &Handler{Policy: policy.Default}
		if drain {
			h.Drain()
		}
		srv := httptest.NewServer(h)
		resp, err := srv.Client().Post(srv.URL+MutatePath, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out admissionv1.AdmissionReview
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != 200 || err != nil || out.Response == nil || len(out.Response.Patch) == 0 {
			t.Errorf("draining %v: %d %v %+v: want the review answered with its patch", drain, resp.StatusCode, err, out.Response)
		}
		if resp.Close != drain {
			t.Errorf("draining %v: the answer closes the connection: %v", drain, resp.Close)
		}
		if got := h.drained.Load(); got != map[bool]int64{false: 0, true: 1}[drain] {
			t.Errorf("draining %v: %d reviews counted as answered while draining", drain, got)
		}
	}
}

// TestRequestLimits: a review larger than MaxBody is refused with 413,
// whether it says its length or is chunked; one of exactly MaxBody bytes
// is answered.
func TestRequestLimits(t *testing.T) {
	body, _ := json.Marshal(review(t, loadPod(t, "vllm-deployment.yaml"), admissionv1.Create))
	h := &Handler{Policy: policy.Default, MaxBody: int64(len(body))}
	srv := httptest.NewServer(h)
	defer srv.Close()
	padded := append(bytes.Clone(body), ' ')
	for _, tc := range []struct {
		name    string
		body    []byte
		chunked bool
		status  int
	}{
		{"at the limit", body, false, 200},
		{"at the limit, chunked", body, true, 200},
		{"a byte over", padded, false, 413},
		{"a byte over, chunked", padded, true, 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tc.body)
			if tc.chunked {
				r = io.MultiReader(r) // no length known: sent chunked
			}
			req, _ := http.NewRequest("POST", srv.URL+MutatePath, r)
			req.Header.Set("Content-Type", "application/json")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
		})
	}
}

// TestMetricsAfterReviews: each review is counted by its decision and
// outcome and timed in the histogram; a refused request is counted as
// invalid/error; /metrics serves them with the histogram's buckets.
func TestMetricsAfterReviews(t *testing.T) {
	pol := policy.Default()
	gpu := review(t, loadPod(t, "vllm-deployment.yaml"), admissionv1.Create)
	plain := review(t, loadPod(t, "nginx.yaml"), admissionv1.Create)
	update := review(t, loadPod(t, "vllm-deployment.yaml"), admissionv1.Update)

	// What each review should count as, from the decision itself.
	want := map[[2]string]float64{}
	for _, r := range []*admissionv1.AdmissionReview{gpu, plain, update} {
		out, m := Review(r, pol)
		d, o := classify(out, m)
		want[[2]string{d, o}]++
	}
	want[[2]string{DecisionInvalid, OutcomeError}]++
	if len(want) < 4 {
		t.Fatalf("the reviews count as %v: want four kinds", want)
	}

	h := &Handler{Policy: func() *policy.Policy { return pol }, Metrics: NewMetrics(nil)}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, r := range []*admissionv1.AdmissionReview{gpu, plain, update} {
		b, _ := json.Marshal(r)
		resp, err := srv.Client().Post(srv.URL+MutatePath, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := srv.Client().Post(srv.URL+MutatePath, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Readiness's self-review is not a review.
	_ = h.Ready()

	var total float64
	for k, n := range want {
		if got := testutil.ToFloat64(h.Metrics.reviews.WithLabelValues(k[0], k[1])); got != n {
			t.Errorf("reviews_total{decision=%q,outcome=%q} = %v, want %v", k[0], k[1], got, n)
		}
		total += n
	}
	if got := testutil.CollectAndCount(h.Metrics.reviews); got != len(want) {
		t.Errorf("%d reviews_total series, want %d", got, len(want))
	}
	var hist dto.Metric
	if err := h.Metrics.duration.Write(&hist); err != nil {
		t.Fatal(err)
	}
	if got := float64(hist.GetHistogram().GetSampleCount()); got != total {
		t.Errorf("admission_duration_seconds counted %v, want %v", got, total)
	}

	ms := httptest.NewServer(h.Metrics.Handler())
	defer ms.Close()
	mresp, err := ms.Client().Get(ms.URL)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, s := range []string{
		MetricsPrefix + `admission_duration_seconds_bucket{le="0.001"}`,
		MetricsPrefix + `admission_duration_seconds_bucket{le="0.005"}`,
		MetricsPrefix + `reviews_total{decision="` + DecisionInvalid + `",outcome="` + OutcomeError + `"} 1`,
		MetricsPrefix + `tls_reloads_total{result="success"} 0`,
		MetricsPrefix + `reviews_in_flight 0`,
		MetricsPrefix + `connections_total 0`,
		MetricsPrefix + `connections_open 0`,
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(string(text), s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
}

// TestTLSReloads: a FilePair reports each change of its files after the
// first load, once per change: a new pair as a success, files that cannot
// be loaded as a failure (the last pair stays in use); the metric counts
// them.
func TestTLSReloads(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	_, certFile, keyFile, first := servingPair(t, dir, now)
	m := NewMetrics(nil)
	f := &FilePair{CertFile: certFile, KeyFile: keyFile, OnReload: m.TLSReloaded}
	touch := func(name string, data []byte, at time.Time) {
		t.Helper()
		if data != nil {
			if err := os.WriteFile(name, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(name, at, at); err != nil {
			t.Fatal(err)
		}
	}
	load := func() *tls.Certificate {
		t.Helper()
		c, err := f.Load()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := load(); !bytes.Equal(c.Certificate[0], first.Certificate[0]) {
		t.Fatal("first load: another pair")
	}
	counts := func() (float64, float64) {
		return testutil.ToFloat64(m.tlsReloads.WithLabelValues("success")), testutil.ToFloat64(m.tlsReloads.WithLabelValues("failure"))
	}
	if s, fl := counts(); s != 0 || fl != 0 {
		t.Errorf("after the first load: %v reloads, %v failures", s, fl)
	}
	// A renewal: new files.
	_, _, _, second := servingPair(t, dir, now.Add(time.Hour))
	touch(certFile, nil, now.Add(time.Minute))
	touch(keyFile, nil, now.Add(time.Minute))
	load()
	if c := load(); !bytes.Equal(c.Certificate[0], second.Certificate[0]) {
		t.Error("after a renewal: the old pair")
	}
	if s, fl := counts(); s != 1 || fl != 0 {
		t.Errorf("after a renewal: %v reloads, %v failures; want 1, 0", s, fl)
	}
	// Mid-rotation garbage: a failure, once, and the last pair stays.
	touch(certFile, []byte("not a certificate"), now.Add(2*time.Minute))
	for i := 0; i < 3; i++ {
		if c := load(); !bytes.Equal(c.Certificate[0], second.Certificate[0]) {
			t.Error("after a bad file: not the last good pair")
		}
	}
	if s, fl := counts(); s != 1 || fl != 1 {
		t.Errorf("after a bad file: %v reloads, %v failures; want 1, 1", s, fl)
	}
}

// TestConnectionMetrics: the review port's connections are counted as
// they are accepted and while they are open, for connections kept alive
// (one for many reviews, as the API server's HTTP/2 connection) and not.
func TestConnectionMetrics(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepAlive bool
		want      float64
	}{
		{"kept alive", true, 1},
		{"one per request", false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMetrics(nil)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			srv.Config.ConnState = m.ConnState
			srv.Start()
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: !tc.keepAlive}}
			for i := 0; i < 3; i++ {
				resp, err := client.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if got := testutil.ToFloat64(m.conns); got != tc.want {
				t.Errorf("connections_total %v, want %v", got, tc.want)
			}
			if got := testutil.ToFloat64(m.connsOpen); tc.keepAlive && got != 1 {
				t.Errorf("connections_open %v with one kept alive, want 1", got)
			}
			client.CloseIdleConnections()
			srv.Close() // waits for every connection to close
			if got := testutil.ToFloat64(m.connsOpen); got != 0 {
				t.Errorf("connections_open %v after the server closed, want 0", got)
			}
		})
	}
}
