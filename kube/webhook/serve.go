package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/policy"
)

// ServeOptions are gpurun webhook's.
type ServeOptions struct {
	// Listen is the address to serve HTTPS on.
	Listen string
	// MetricsListen, when set, is the address to serve the webhook's own
	// metrics on (plain HTTP: /metrics, and /healthz and /readyz as on
	// Listen).
	MetricsListen string
	// CertFile and KeyFile are the serving pair (PEM), re-read when they
	// change; or SelfSigned keeps a CA and serving pair of the webhook's
	// own in the Secret Secret of Namespace ("" the pod's own), for the
	// Service Service, and the CA in the caBundle of the
	// MutatingWebhookConfiguration WebhookConfig, checked every
	// RenewEvery.
	CertFile, KeyFile                         string
	SelfSigned                                bool
	Namespace, Service, Secret, WebhookConfig string
	RenewEvery                                time.Duration
	// ShutdownDelay is how long the webhook keeps answering reviews after
	// SIGTERM, not ready, before it stops taking them: long enough for
	// the endpoints to drop the replica and for the API server to stop
	// sending to it. ShutdownTimeout then bounds the wait for the reviews
	// in flight (0: DefaultShutdownTimeout). A second signal cuts the
	// delay short.
	ShutdownDelay, ShutdownTimeout time.Duration
	// MaxRequestBytes bounds a review's body (0: DefaultMaxReviewBytes).
	MaxRequestBytes int64
	// RequestTimeout bounds reading a request and writing its answer (0:
	// DefaultRequestTimeout).
	RequestTimeout time.Duration
	// ResolveClaims keeps a cache of the cluster's ResourceClaims,
	// ResourceClaimTemplates and DeviceClasses (ClaimCache, with the pod's
	// service account) to resolve pods' DRA resource claims; without it,
	// every claim is judged by the policy's unresolved_claims.
	ResolveClaims bool
	// DryRun is gpurun's --dry-run, which the webhook refuses; Verbose
	// logs at debug level.
	DryRun, Verbose bool
	// LoadPolicy loads gpurun's policy.
	LoadPolicy func() (*policy.Policy, error)
	// Log gets the JSON log (stderr).
	Log io.Writer
}

// Defaults of ServeOptions' zero values.
const (
	DefaultShutdownTimeout = 10 * time.Second
	DefaultRequestTimeout  = 10 * time.Second
)

// idleTimeout is how long a kept-alive connection may stay idle: longer
// than the API server's own 90 s (client-go's IdleConnTimeout), so that
// the API server, never the webhook, closes an idle connection — a server
// that closes one as the client sends a review on it loses that review.
const idleTimeout = 2 * time.Minute

// Serve is gpurun webhook: it serves the admission webhook (Handler) over
// TLS, and its metrics, until ctx ends or the process gets SIGTERM or
// SIGINT; then it drains (Handler.Drain) for ShutdownDelay and shuts down,
// waiting for the reviews in flight. Its errors for bad options or a setup
// that fails carry exit status 2 (exitcode).
func Serve(ctx context.Context, o ServeOptions) error {
	if err := o.check(); err != nil {
		return exitcode.New(2, err)
	}
	level := slog.LevelInfo
	if o.Verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(o.Log, &slog.HandlerOptions{Level: level}))
	pol, err := o.LoadPolicy()
	if err != nil {
		return exitcode.New(2, err)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	// The certificate keeper runs until Serve returns, draining included.
	keepCtx, stopKeeping := context.WithCancel(context.WithoutCancel(ctx))
	defer stopKeeping()

	var cert func() *tls.Certificate
	metrics := NewMetrics(func() *tls.Certificate { return cert() })
	tlsCfg, current, err := o.tlsConfig(keepCtx, log, metrics.TLSReloaded)
	if err != nil {
		return err
	}
	cert = current
	h := &Handler{Policy: func() *policy.Policy { return pol }, Logger: log, Metrics: metrics,
		MaxBody: o.MaxRequestBytes, Certificate: current}
	if h.Claims, err = o.claims(keepCtx, log, metrics); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return exitcode.New(2, fmt.Errorf("webhook: %w", err))
	}
	defer ln.Close()
	timeout := o.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsCfg,
		Protocols:         reviewProtocols(),
		ReadHeaderTimeout: min(timeout, 5*time.Second),
		ReadTimeout:       timeout,
		WriteTimeout:      timeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnState:         metrics.ConnState,
	}
	errc := make(chan error, 2)
	var msrv *http.Server
	metricsAddr := ""
	if o.MetricsListen != "" {
		mln, err := net.Listen("tcp", o.MetricsListen)
		if err != nil {
			return exitcode.New(2, fmt.Errorf("webhook: metrics: %w", err))
		}
		defer mln.Close()
		metricsAddr = mln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler())
		mux.Handle("/healthz", h)
		mux.Handle("/readyz", h)
		msrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() { errc <- fmt.Errorf("metrics: %w", msrv.Serve(mln)) }()
	}
	source := pol.Source
	if source == "" {
		source = "(defaults)"
	}
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	_ = h.Ready() // the ready gauge, from the start
	log.Info("gpurun webhook serving", "version", version.String(), "listen", ln.Addr().String(), "metrics", metricsAddr,
		"policy", source, "self_signed", o.SelfSigned, "resolve_claims", o.ResolveClaims, "shutdown_delay", o.ShutdownDelay.String())
	select {
	case err := <-errc:
		return fmt.Errorf("webhook: %w", err)
	case <-ctx.Done():
		log.Info("gpurun webhook draining", "why", context.Cause(ctx).Error(), "delay", o.ShutdownDelay.String())
	case s := <-sigs:
		log.Info("gpurun webhook draining", "why", s.String(), "delay", o.ShutdownDelay.String())
	}
	h.Drain()
	began := time.Now()
	if o.ShutdownDelay > 0 {
		t := time.NewTimer(o.ShutdownDelay)
		select {
		case <-t.C:
		case s := <-sigs:
			t.Stop()
			log.Info("gpurun webhook: a second signal: stopping now", "signal", s.String())
		case err := <-errc:
			t.Stop()
			return fmt.Errorf("webhook: %w", err)
		}
	}
	grace := o.ShutdownTimeout
	if grace <= 0 {
		grace = DefaultShutdownTimeout
	}
	shut, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	// Shutdown closes the listener (no new connections), lets the
	// reviews in flight finish, and closes each connection once idle.
	err = srv.Shutdown(shut)
	if msrv != nil {
		err = errors.Join(err, msrv.Shutdown(shut))
	}
	if err != nil {
		return fmt.Errorf("webhook: shut down: %w", err)
	}
	log.Info("gpurun webhook stopped", "drained_for", time.Since(began).Round(time.Millisecond).String(), "reviews_while_draining", h.drained.Load())
	return nil
}

// reviewProtocols are the review port's: HTTP/1.1 only, as
// controller-runtime's webhook server has by default. The API server then
// keeps a pool of kept-alive connections, spread over the replicas,
// instead of one HTTP/2 connection to one replica; a review costs the
// webhook less CPU (HTTP/2 runs each request on a goroutine of its own,
// whose stack grows anew through the JSON decoding, and frames it:
// docs/install-kubernetes.md#what-a-review-costs); Drain's
// Connection: close moves the API server off a replica that drains; and
// the port is out of reach of HTTP/2's stream-reset floods
// (CVE-2023-44487, CVE-2023-39325).
func reviewProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	return &p
}

// claims starts the claims cache (ClaimCache, until ctx ends) where
// ResolveClaims asks for it, with the pod's service account; nil where it
// does not.
func (o ServeOptions) claims(ctx context.Context, log *slog.Logger, m *Metrics) (podspec.Claims, error) {
	if !o.ResolveClaims {
		return nil, nil
	}
	k, err := kube.InCluster()
	if err != nil {
		return nil, exitcode.New(2, fmt.Errorf("webhook: --resolve-claims reads the cluster's claims with the pod's service account: %w", err))
	}
	cache := NewClaimCache(k, log, m)
	go cache.Run(ctx)
	return cache, nil
}

// check refuses options that do not go together.
func (o ServeOptions) check() error {
	if o.DryRun {
		return errors.New("webhook: --dry-run does not apply; use gpurun plan --pod to see decisions")
	}
	files := o.CertFile != "" || o.KeyFile != ""
	switch {
	case files && o.SelfSigned:
		return errors.New("webhook: --self-signed and --tls-cert-file/--tls-key-file exclude each other")
	case files && (o.CertFile == "" || o.KeyFile == ""):
		return errors.New("webhook: --tls-cert-file and --tls-key-file go together")
	case !files && !o.SelfSigned:
		return errors.New("webhook: give --tls-cert-file and --tls-key-file, or --self-signed")
	}
	return nil
}

// tlsConfig serves the pair in the files, or keeps the webhook's own
// (SelfTLS, in the background until ctx ends); current returns the pair
// in use, and reloaded is told of each load after the first.
func (o ServeOptions) tlsConfig(ctx context.Context, log *slog.Logger, reloaded func(error)) (cfg *tls.Config, current func() *tls.Certificate, err error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if !o.SelfSigned {
		pair := &FilePair{CertFile: o.CertFile, KeyFile: o.KeyFile, OnReload: func(err error) {
			reloaded(err)
			if err != nil {
				log.Warn("webhook certificate files changed but cannot be loaded; the previous pair stays in use", "err", err.Error())
			} else {
				log.Info("webhook certificate reloaded", "cert", o.CertFile)
			}
		}}
		if _, err := pair.Load(); err != nil {
			return nil, nil, exitcode.New(2, fmt.Errorf("webhook: %w", err))
		}
		tlsCfg.GetCertificate = pair.GetCertificate
		return tlsCfg, pair.Current, nil
	}
	ns := o.Namespace
	if ns == "" {
		b, err := os.ReadFile(kube.ServiceAccountDir + "/namespace")
		if err != nil {
			return nil, nil, exitcode.New(2, fmt.Errorf("webhook: --namespace not given, and not in a pod: %w", err))
		}
		ns = string(b)
	}
	k, err := kube.InCluster()
	if err != nil {
		return nil, nil, exitcode.New(2, fmt.Errorf("webhook: --self-signed: %w", err))
	}
	self := &SelfTLS{Kube: k, Namespace: ns, Secret: o.Secret, Service: o.Service, WebhookConfig: o.WebhookConfig, Logger: log, OnReload: reloaded}
	if err := self.Ensure(ctx); err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	if err := self.Sync(ctx); err != nil {
		log.Warn("webhook caBundle", "err", err.Error())
	}
	go self.Keep(ctx, o.RenewEvery)
	tlsCfg.GetCertificate = self.GetCertificate
	return tlsCfg, self.Current, nil
}
