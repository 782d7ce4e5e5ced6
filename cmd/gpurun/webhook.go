//go:build !gpurun_lean

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/policy"
)

// webhookFlags are `gpurun webhook`'s own options.
type webhookFlags struct {
	listen, certFile, keyFile          string
	selfSigned                         bool
	namespace, service, secret, config string
	renewEvery                         time.Duration
}

func newWebhookCmd(g *globals) *cobra.Command {
	f := webhookFlags{}
	cmd := &cobra.Command{
		Use:   "webhook [--tls-cert-file F --tls-key-file F | --self-signed]",
		Short: webhookShort,
		Long: `webhook serves a Kubernetes mutating admission webhook (AdmissionReview v1,
over TLS, at ` + webhook.MutatePath + `). For each pod created, it asks the
policy about every container, as the node modes do, and a GPU pod that
has no /dev/shm of its own and is not hostIPC gets one volume,
emptyDir {medium: Memory, sizeLimit: SIZE}, mounted at /dev/shm in every
container — the containers share the one tmpfs — and the annotation
` + webhook.DecisionAnnotation + ` with the decision and why. The annotation
` + policy.OptOutAnnotation + `: "true" leaves a pod alone; an allowed size
annotation (gpurun.io/shm-size) asks for a size, capped by max. A pod is
never denied: one the webhook cannot read is admitted as it is.

TLS: --tls-cert-file and --tls-key-file (cert-manager's Secret, mounted;
re-read when it changes), or --self-signed: the webhook keeps its own CA
and serving pair in the Secret --secret (the first replica makes it) and
the CA in the caBundle of the MutatingWebhookConfiguration --webhook-config,
checked every --renew-every. The policy is --config (else $GPURUN_CONFIG,
else /etc/gpurun/config.toml).`,
		Example: `  gpurun webhook --self-signed --namespace gpurun-system --service gpurun-webhook
  gpurun webhook --tls-cert-file /tls/tls.crt --tls-key-file /tls/tls.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWebhook(cmd, g, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", ":8443", "address to serve HTTPS on")
	fl.StringVar(&f.certFile, "tls-cert-file", "", "the serving certificate (PEM), e.g. from cert-manager")
	fl.StringVar(&f.keyFile, "tls-key-file", "", "the serving certificate's key (PEM)")
	fl.BoolVar(&f.selfSigned, "self-signed", false, "keep a CA and serving certificate of the webhook's own in --secret, and the CA in --webhook-config's caBundle")
	fl.StringVar(&f.namespace, "namespace", "", "the webhook's namespace (default: the pod's own)")
	fl.StringVar(&f.service, "service", "gpurun-webhook", "the Service the API server calls the webhook through")
	fl.StringVar(&f.secret, "secret", "gpurun-webhook-tls", "the Secret holding the webhook's CA and serving pair (--self-signed)")
	fl.StringVar(&f.config, "webhook-config", "gpurun", "the MutatingWebhookConfiguration whose caBundle gets the CA (--self-signed)")
	fl.DurationVar(&f.renewEvery, "renew-every", time.Minute, "how often --self-signed checks the certificate and the caBundle")
	return cmd
}

func runWebhook(cmd *cobra.Command, g *globals, f webhookFlags) error {
	if g.dryRun {
		return &exitError{2, errors.New("webhook: --dry-run does not apply; use gpurun plan --pod to see decisions")}
	}
	files := f.certFile != "" || f.keyFile != ""
	switch {
	case files && f.selfSigned:
		return &exitError{2, errors.New("webhook: --self-signed and --tls-cert-file/--tls-key-file exclude each other")}
	case files && (f.certFile == "" || f.keyFile == ""):
		return &exitError{2, errors.New("webhook: --tls-cert-file and --tls-key-file go together")}
	case !files && !f.selfSigned:
		return &exitError{2, errors.New("webhook: give --tls-cert-file and --tls-key-file, or --self-signed")}
	}
	level := slog.LevelInfo
	if g.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	pol, err := g.loadPolicy()
	if err != nil {
		return &exitError{2, err}
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if files {
		pair := &webhook.FilePair{CertFile: f.certFile, KeyFile: f.keyFile}
		if _, err := pair.Load(); err != nil {
			return &exitError{2, fmt.Errorf("webhook: %w", err)}
		}
		tlsCfg.GetCertificate = pair.GetCertificate
	} else {
		ns := f.namespace
		if ns == "" {
			b, err := os.ReadFile(kube.ServiceAccountDir + "/namespace")
			if err != nil {
				return &exitError{2, fmt.Errorf("webhook: --namespace not given, and not in a pod: %w", err)}
			}
			ns = string(b)
		}
		kube, err := kube.InCluster()
		if err != nil {
			return &exitError{2, fmt.Errorf("webhook: --self-signed: %w", err)}
		}
		self := &webhook.SelfTLS{Kube: kube, Namespace: ns, Secret: f.secret, Service: f.service, WebhookConfig: f.config, Logger: log}
		if err := self.Ensure(ctx); err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
		if err := self.Sync(ctx); err != nil {
			log.Warn("webhook caBundle", "err", err.Error())
		}
		go self.Keep(ctx, f.renewEvery)
		tlsCfg.GetCertificate = self.GetCertificate
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return &exitError{2, fmt.Errorf("webhook: %w", err)}
	}
	srv := &http.Server{
		Handler:           &webhook.Handler{Policy: func() *policy.Policy { return pol }, Logger: log},
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
	log.Info("gpurun webhook serving", "version", version.String(), "listen", ln.Addr().String(), "policy", source, "self_signed", f.selfSigned)
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
