package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/kube"
)

// fakeAPI is an API server holding one Secret and one
// MutatingWebhookConfiguration, with resourceVersion conflicts.
type fakeAPI struct {
	mu      sync.Mutex
	secret  []byte // JSON; nil: none
	version int
	mwc     []byte
	writes  int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	const secrets = "/api/v1/namespaces/gpurun-system/secrets"
	const mwc = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpurun"
	switch {
	case r.Method == "GET" && r.URL.Path == secrets+"/tls":
		if f.secret == nil {
			http.Error(w, `{"message": "secrets \"tls\" not found"}`, http.StatusNotFound)
			return
		}
		_, _ = w.Write(f.secret)
	case r.Method == "POST" && r.URL.Path == secrets:
		if f.secret != nil {
			http.Error(w, `{"message": "already exists"}`, http.StatusConflict)
			return
		}
		f.store(body)
	case r.Method == "PUT" && r.URL.Path == secrets+"/tls":
		var s corev1.Secret
		_ = json.Unmarshal(body, &s)
		if s.ResourceVersion != strings.TrimSpace(string(rune('0'+f.version))) {
			http.Error(w, `{"message": "the object has been modified"}`, http.StatusConflict)
			return
		}
		f.store(body)
	case r.Method == "GET" && r.URL.Path == mwc:
		_, _ = w.Write(f.mwc)
	case r.Method == "PATCH" && r.URL.Path == mwc:
		if r.Header.Get("Content-Type") != "application/json-patch+json" {
			http.Error(w, "bad content type", http.StatusUnsupportedMediaType)
			return
		}
		p, err := jsonpatch.DecodePatch(body)
		if err == nil {
			var out []byte
			if out, err = p.Apply(f.mwc); err == nil {
				f.mwc = out
				return
			}
		}
		http.Error(w, `{"message": "`+err.Error()+`"}`, http.StatusUnprocessableEntity)
	default:
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
	}
}

func (f *fakeAPI) store(body []byte) {
	var s corev1.Secret
	_ = json.Unmarshal(body, &s)
	f.version++
	s.ResourceVersion = string(rune('0' + f.version))
	f.secret, _ = json.Marshal(s)
	f.writes++
}

func newSelf(srv *httptest.Server, now time.Time) *SelfTLS {
	return &SelfTLS{Kube: &kube.Kube{Base: srv.URL, Client: srv.Client()}, Namespace: "gpurun-system", Secret: "tls",
		Service: "gpurun-webhook", WebhookConfig: "gpurun", Now: func() time.Time { return now }}
}

// TestSelfTLS: two replicas start together and end up serving one pair
// signed by one CA, which Sync puts into the caBundle (and puts back after
// an apply emptied it); a pair near its end is renewed under the same CA.
func TestSelfTLS(t *testing.T) {
	api := &fakeAPI{}
	mwc := admissionregistrationv1.MutatingWebhookConfiguration{Webhooks: []admissionregistrationv1.MutatingWebhook{
		{Name: GPUWebhookName, ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "gpurun-system", Name: "gpurun-webhook"}}},
		{Name: PodsWebhookName, ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "gpurun-system", Name: "gpurun-webhook"}}},
		{Name: "other.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "other", Name: "other"}}},
	}}
	api.mwc, _ = json.Marshal(mwc)
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	now := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	a, b := newSelf(srv, now), newSelf(srv, now)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*SelfTLS{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.Ensure(context.Background()) }()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("Ensure: %v, %v", errs[0], errs[1])
	}
	ca := *a.ca.Load()
	if !bytes.Equal(ca, *b.ca.Load()) {
		t.Fatal("the replicas serve under different CAs")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	for _, s := range []*SelfTLS{a, b} {
		c, err := s.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "gpurun-webhook.gpurun-system.svc", Roots: pool, CurrentTime: now}); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}
	caBundles := func() [][]byte {
		var got admissionregistrationv1.MutatingWebhookConfiguration
		_ = json.Unmarshal(api.mwc, &got)
		return [][]byte{got.Webhooks[0].ClientConfig.CABundle, got.Webhooks[1].ClientConfig.CABundle, got.Webhooks[2].ClientConfig.CABundle}
	}
	for round := 0; round < 2; round++ {
		if err := a.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := caBundles(); !bytes.Equal(got[0], ca) || !bytes.Equal(got[1], ca) || got[2] != nil {
			t.Fatalf("caBundles %q; want the CA on gpurun's two entries only", got)
		}
		api.mwc, _ = json.Marshal(mwc) // kubectl apply empties it again
	}
	writes := api.writes
	if err := a.Ensure(context.Background()); err != nil || api.writes != writes {
		t.Errorf("Ensure on a good pair: %v, %d writes", err, api.writes-writes)
	}
	// Eleven months on (340 days), the pair is renewed under the same CA.
	later := newSelf(srv, now.Add(340*24*time.Hour))
	if err := later.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(*later.ca.Load(), ca) || api.writes != writes+1 {
		t.Errorf("renewal: same CA %v, %d writes", bytes.Equal(*later.ca.Load(), ca), api.writes-writes)
	}
}
