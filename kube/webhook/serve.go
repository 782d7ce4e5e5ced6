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
	"github.com/gpurun/gpurun/policy"
)

// ServeOptions are gpurun webhook's.
type ServeOptions struct {
	// Listen is the address to serve HTTPS on.
	Listen string
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
	// DryRun is gpurun's --dry-run, which the webhook refuses; Verbose
	// logs at debug level.
	DryRun, Verbose bool
	// LoadPolicy loads gpurun's policy.
	LoadPolicy func() (*policy.Policy, error)
	// Log gets the JSON log (stderr).
	Log io.Writer
}

// Serve is gpurun webhook: it serves the admission webhook (Handler) over
// TLS until SIGTERM or SIGINT, then shuts down. Its errors for bad options
// or a setup that fails carry exit status 2 (exitcode).
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
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tlsCfg, err := o.tlsConfig(ctx, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return exitcode.New(2, fmt.Errorf("webhook: %w", err))
	}
	srv := &http.Server{
		Handler:           &Handler{Policy: func() *policy.Policy { return pol }, Logger: log},
		TLSConfig:         tlsCfg,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	source := pol.Source
	if source == "" {
		source = "(defaults)"
	}
	log.Info("gpurun webhook serving", "version", version.String(), "listen", ln.Addr().String(), "policy", source, "self_signed", o.SelfSigned)
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("webhook: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("webhook: shut down: %w", err)
	}
	log.Info("gpurun webhook stopped")
	return nil
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
// (SelfTLS, in the background until ctx ends).
func (o ServeOptions) tlsConfig(ctx context.Context, log *slog.Logger) (*tls.Config, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if !o.SelfSigned {
		pair := &FilePair{CertFile: o.CertFile, KeyFile: o.KeyFile}
		if _, err := pair.Load(); err != nil {
			return nil, exitcode.New(2, fmt.Errorf("webhook: %w", err))
		}
		tlsCfg.GetCertificate = pair.GetCertificate
		return tlsCfg, nil
	}
	ns := o.Namespace
	if ns == "" {
		b, err := os.ReadFile(kube.ServiceAccountDir + "/namespace")
		if err != nil {
			return nil, exitcode.New(2, fmt.Errorf("webhook: --namespace not given, and not in a pod: %w", err))
		}
		ns = string(b)
	}
	k, err := kube.InCluster()
	if err != nil {
		return nil, exitcode.New(2, fmt.Errorf("webhook: --self-signed: %w", err))
	}
	self := &SelfTLS{Kube: k, Namespace: ns, Secret: o.Secret, Service: o.Service, WebhookConfig: o.WebhookConfig, Logger: log}
	if err := self.Ensure(ctx); err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	if err := self.Sync(ctx); err != nil {
		log.Warn("webhook caBundle", "err", err.Error())
	}
	go self.Keep(ctx, o.RenewEvery)
	tlsCfg.GetCertificate = self.GetCertificate
	return tlsCfg, nil
}
