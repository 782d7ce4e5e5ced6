package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/kube"
)

// Validity of what SelfTLS makes, and when a serving certificate is
// renewed.
const (
	caValidity      = 10 * 365 * 24 * time.Hour
	servingValidity = 365 * 24 * time.Hour
	renewBefore     = 30 * 24 * time.Hour
)

// Keys of the TLS Secret SelfTLS keeps (a kubernetes.io/tls Secret with
// the CA beside the serving pair).
const (
	keyCACert = "ca.crt"
	keyCAKey  = "ca.key"
)

// newKey returns a P-256 key.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encode(der []byte, key *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// NewCA makes a self-signed CA, valid from now for ten years.
func NewCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "gpurun webhook CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	return encode(der, key)
}

// NewServing issues a serving certificate for dnsNames, signed by the CA,
// valid from now for a year (never past the CA).
func NewServing(caCertPEM, caKeyPEM []byte, dnsNames []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	ca, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("the CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("the CA: %w", err)
	}
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(servingValidity)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return nil, nil, err
	}
	return encode(der, key)
}

// ServiceNames are the DNS names the API server uses for a webhook served
// by a Service.
func ServiceNames(service, namespace string) []string {
	return []string{service + "." + namespace + ".svc", service + "." + namespace + ".svc.cluster.local", service + "." + namespace, service}
}

// goodFor reports whether a serving pair is valid for dnsNames until well
// past now, and signed by the CA.
func goodFor(certPEM, keyPEM, caPEM []byte, dnsNames []string, now time.Time) bool {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || now.Add(renewBefore).After(leaf.NotAfter) {
		return false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return false
	}
	for _, n := range dnsNames {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: pool, CurrentTime: now}); err != nil {
			return false
		}
	}
	return true
}

// SelfTLS is the webhook's own CA, for clusters without cert-manager: the
// CA and the serving pair live in a Secret that every replica shares (the
// first to start makes it), and the CA is kept in the
// MutatingWebhookConfiguration's caBundle (an apply of the manifests
// empties it again; Sync puts it back).
type SelfTLS struct {
	Kube                       *kube.Kube
	Namespace, Secret, Service string
	// WebhookConfig is the MutatingWebhookConfiguration whose webhooks
	// that call Service get the CA.
	WebhookConfig string
	Logger        *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// OnReload, when set, is called when a serving pair other than the
	// first is loaded (a renewal, or another replica's new pair).
	OnReload func(error)

	cert atomic.Pointer[tls.Certificate]
	ca   atomic.Pointer[[]byte]
}

func (s *SelfTLS) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *SelfTLS) secretPath() string {
	return "/api/v1/namespaces/" + url.PathEscape(s.Namespace) + "/secrets"
}

// Ensure reads the Secret, makes it (or a new serving pair) where needed,
// and loads the pair for GetCertificate.
func (s *SelfTLS) Ensure(ctx context.Context) error {
	names := ServiceNames(s.Service, s.Namespace)
	for attempt := 0; attempt < 5; attempt++ {
		var sec corev1.Secret
		err := s.Kube.Do(ctx, "GET", s.secretPath()+"/"+url.PathEscape(s.Secret), "", nil, &sec)
		exists := err == nil
		if err != nil && !errors.Is(err, kube.ErrNotFound) {
			return fmt.Errorf("read secret %s/%s: %w", s.Namespace, s.Secret, err)
		}
		d := sec.Data
		if exists && goodFor(d[corev1.TLSCertKey], d[corev1.TLSPrivateKeyKey], d[keyCACert], names, s.now()) {
			return s.load(d)
		}
		caCert, caKey := d[keyCACert], d[keyCAKey]
		if _, err := tls.X509KeyPair(caCert, caKey); err != nil || !exists {
			if caCert, caKey, err = NewCA(s.now()); err != nil {
				return fmt.Errorf("make a CA: %w", err)
			}
		}
		crt, key, err := NewServing(caCert, caKey, names, s.now())
		if err != nil {
			return fmt.Errorf("issue a serving certificate: %w", err)
		}
		sec.APIVersion, sec.Kind = "v1", "Secret"
		sec.Name, sec.Namespace, sec.Type = s.Secret, s.Namespace, corev1.SecretTypeTLS
		sec.Data = map[string][]byte{keyCACert: caCert, keyCAKey: caKey, corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}
		if exists {
			err = s.Kube.Do(ctx, "PUT", s.secretPath()+"/"+url.PathEscape(s.Secret), "", &sec, nil)
		} else {
			sec.ResourceVersion = ""
			err = s.Kube.Do(ctx, "POST", s.secretPath(), "", &sec, nil)
		}
		if errors.Is(err, kube.ErrConflict) {
			continue // another replica wrote it first: use theirs
		}
		if err != nil {
			return fmt.Errorf("write secret %s/%s: %w", s.Namespace, s.Secret, err)
		}
		s.log().Info("webhook certificate written", "secret", s.Namespace+"/"+s.Secret, "new_ca", !exists)
		return s.load(sec.Data)
	}
	return fmt.Errorf("secret %s/%s: changed by others five times in a row", s.Namespace, s.Secret)
}

func (s *SelfTLS) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func (s *SelfTLS) load(d map[string][]byte) error {
	prev := s.cert.Load()
	pair, err := tls.X509KeyPair(d[corev1.TLSCertKey], d[corev1.TLSPrivateKeyKey])
	if err != nil {
		err = fmt.Errorf("secret %s/%s: %w", s.Namespace, s.Secret, err)
		if prev != nil && s.OnReload != nil {
			s.OnReload(err)
		}
		return err
	}
	s.cert.Store(&pair)
	ca := bytes.Clone(d[keyCACert])
	s.ca.Store(&ca)
	if prev != nil && !bytes.Equal(prev.Certificate[0], pair.Certificate[0]) && s.OnReload != nil {
		s.OnReload(nil)
	}
	return nil
}

// Current returns the serving pair in use (nil before the first load).
func (s *SelfTLS) Current() *tls.Certificate { return s.cert.Load() }

// GetCertificate is tls.Config's: the current serving pair.
func (s *SelfTLS) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no serving certificate yet")
}

// Sync puts the CA into the caBundle of each webhook of WebhookConfig
// that calls Service, where it differs.
func (s *SelfTLS) Sync(ctx context.Context) error {
	caPtr := s.ca.Load()
	if caPtr == nil {
		return errors.New("no CA loaded")
	}
	ca := *caPtr
	path := "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/" + url.PathEscape(s.WebhookConfig)
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := s.Kube.Do(ctx, "GET", path, "", nil, &cfg); err != nil {
		return fmt.Errorf("read mutatingwebhookconfiguration %s: %w", s.WebhookConfig, err)
	}
	var patch []Patch
	for i, w := range cfg.Webhooks {
		svc := w.ClientConfig.Service
		if svc == nil || svc.Name != s.Service || svc.Namespace != s.Namespace || bytes.Equal(w.ClientConfig.CABundle, ca) {
			continue
		}
		patch = append(patch,
			Patch{Op: "test", Path: fmt.Sprintf("/webhooks/%d/name", i), Value: w.Name},
			Patch{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: ca})
	}
	if len(patch) == 0 {
		return nil
	}
	if err := s.Kube.Do(ctx, "PATCH", path, "application/json-patch+json", patch, nil); err != nil {
		return fmt.Errorf("set the caBundle of mutatingwebhookconfiguration %s: %w", s.WebhookConfig, err)
	}
	s.log().Info("caBundle set", "mutatingwebhookconfiguration", s.WebhookConfig, "webhooks", len(patch)/2)
	return nil
}

// Keep runs Ensure and Sync every interval until ctx ends, logging
// failures (a replica that cannot reach the API server keeps serving with
// the pair it has).
func (s *SelfTLS) Keep(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.Ensure(ctx); err != nil {
			s.log().Warn("webhook certificate", "err", err.Error())
			continue
		}
		if err := s.Sync(ctx); err != nil {
			s.log().Warn("webhook caBundle", "err", err.Error())
		}
	}
}

// FilePair serves a certificate and key from files that another tool
// (cert-manager, through a Secret volume) renews: it reads them again when
// either file changes.
type FilePair struct {
	CertFile, KeyFile string
	// OnReload, when set, is called each time the files change after the
	// first load: nil when the new pair is in use, the error when it
	// could not be read (the last pair stays in use).
	OnReload func(error)

	mu      sync.Mutex
	stamp   []time.Time
	failed  []time.Time // the files' times when they last failed to load
	current *tls.Certificate
}

// Load reads the pair if the files changed since the last read.
func (f *FilePair) Load() (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var stamp []time.Time
	for _, p := range []string{f.CertFile, f.KeyFile} {
		st, err := os.Stat(p)
		if err != nil {
			if f.current != nil {
				return f.current, nil // mid-rotation: keep the last pair
			}
			return nil, fmt.Errorf("tls: %w", err)
		}
		stamp = append(stamp, st.ModTime())
	}
	if f.current != nil && slices.Equal(stamp, f.stamp) {
		return f.current, nil
	}
	pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		err = fmt.Errorf("tls: load %s and %s: %w", f.CertFile, f.KeyFile, err)
		if f.current != nil {
			if f.OnReload != nil && !slices.Equal(stamp, f.failed) {
				f.OnReload(err)
			}
			f.failed = stamp
			return f.current, nil
		}
		return nil, err
	}
	if f.current != nil && f.OnReload != nil {
		f.OnReload(nil)
	}
	f.current, f.stamp, f.failed = &pair, stamp, nil
	return f.current, nil
}

// Current returns the pair in use (nil before the first load), without
// looking at the files.
func (f *FilePair) Current() *tls.Certificate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

// GetCertificate is tls.Config's.
func (f *FilePair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.Load()
}
