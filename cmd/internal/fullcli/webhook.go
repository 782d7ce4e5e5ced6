package fullcli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/gpurun/gpurun/cmd/internal/cli"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/policy"
)

const webhookLong = `webhook serves a Kubernetes mutating admission webhook (AdmissionReview v1,
over TLS, at ` + webhook.MutatePath + `). For each pod created, it asks the
policy about every container, as the node modes do, and a GPU pod that
has no /dev/shm of its own and is not hostIPC gets one volume,
emptyDir {medium: Memory, sizeLimit: SIZE}, mounted at /dev/shm in every
container — the containers share the one tmpfs — and the annotation
` + webhook.DecisionAnnotation + ` with the decision and why. The annotation
` + policy.OptOutAnnotation + `: "true" leaves a pod alone; an allowed size
annotation (gpurun.io/shm-size) asks for a size, capped by max. A pod is
never denied: one the webhook cannot read is admitted as it is. It acts on
CREATE only: a sizeLimit changed later (by a user, or in place through
the pod's resize subresource, KEP-6030) is never undone.

DRA: a pod's resource claims (spec.resourceClaims, used by its containers'
resources.claims) are resolved from a cache of the cluster's
ResourceClaims, ResourceClaimTemplates and DeviceClasses, listed and
watched with the pod's service account (--resolve-claims; read access in
the manifests): a claim for a device of a GPU DeviceClass (the policy's
gpu_device_classes and gpu_dra_drivers add more) makes its containers GPU
containers. A claim whose object is not there yet (kubectl apply of a
directory creates in any order) is judged by the policy's
unresolved_claims, with a warning in kubectl's output.

TLS: --tls-cert-file and --tls-key-file (cert-manager's Secret, mounted;
re-read when it changes), or --self-signed: the webhook keeps its own CA
and serving pair in the Secret --secret (the first replica makes it) and
the CA in the caBundle of the MutatingWebhookConfiguration --webhook-config,
checked every --renew-every. The policy is --config (else $GPURUN_CONFIG,
else /etc/gpurun/config.toml).

Availability: /readyz answers 200 only when the webhook can admit (a
policy and a serving certificate valid now loaded, a review of a GPU pod
answered in-process); /healthz while the process runs. On SIGTERM it
turns not ready at once and keeps answering reviews for --shutdown-delay,
closing each HTTP/1 connection after its answer, so that the endpoints
drop the replica and the API server moves to another before it stops
taking reviews; then it waits up to --shutdown-timeout for the reviews in
flight. A second signal cuts the delay short. Give the pod a
terminationGracePeriodSeconds above both together.

Metrics (Prometheus, plain HTTP at --metrics-listen, /metrics):
gpurun_webhook_admission_duration_seconds, gpurun_webhook_reviews_total by
decision and outcome, gpurun_webhook_reviews_in_flight,
gpurun_webhook_ready, gpurun_webhook_tls_reloads_total, the serving
certificate's expiry, and gpurun_webhook_connections_total and
gpurun_webhook_connections_open (the review port's connections).

Log: JSON on stderr. Each review's decision is on its pod (the annotation)
and in the metrics; --verbose adds a line per review.

The review port speaks HTTP/1.1 only, as controller-runtime's webhook
server does by default: the API server keeps a pool of connections, spread
over the replicas, and each review costs the webhook less CPU.`

func newWebhookCmd(g *cli.Globals) *cobra.Command {
	var o webhook.ServeOptions
	cmd := &cobra.Command{
		Use:   "webhook [--tls-cert-file F --tls-key-file F | --self-signed]",
		Short: cli.WebhookShort,
		Long:  webhookLong,
		Example: `  gpurun webhook --self-signed --namespace gpurun-system --service gpurun-webhook
  gpurun webhook --tls-cert-file /tls/tls.crt --tls-key-file /tls/tls.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.DryRun, o.Verbose, o.LoadPolicy, o.Log = g.DryRun, g.Verbose, g.Policy, cmd.ErrOrStderr()
			return webhook.Serve(cmd.Context(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Listen, "listen", ":8443", "address to serve HTTPS on")
	fl.StringVar(&o.MetricsListen, "metrics-listen", ":9469", `address to serve the webhook's metrics on (plain HTTP; "" for none)`)
	fl.DurationVar(&o.ShutdownDelay, "shutdown-delay", 5*time.Second, "after SIGTERM, how long to keep answering reviews, not ready, before no longer taking them")
	fl.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", webhook.DefaultShutdownTimeout, "then, how long to wait for the reviews in flight")
	fl.Int64Var(&o.MaxRequestBytes, "max-request-bytes", webhook.DefaultMaxReviewBytes, "refuse a review larger than this (413)")
	fl.DurationVar(&o.RequestTimeout, "request-timeout", webhook.DefaultRequestTimeout, "bound on reading a review and writing its answer")
	fl.StringVar(&o.CertFile, "tls-cert-file", "", "the serving certificate (PEM), e.g. from cert-manager")
	fl.StringVar(&o.KeyFile, "tls-key-file", "", "the serving certificate's key (PEM)")
	fl.BoolVar(&o.SelfSigned, "self-signed", false, "keep a CA and serving certificate of the webhook's own in --secret, and the CA in --webhook-config's caBundle")
	fl.StringVar(&o.Namespace, "namespace", "", "the webhook's namespace (default: the pod's own)")
	fl.StringVar(&o.Service, "service", "gpurun-webhook", "the Service the API server calls the webhook through")
	fl.StringVar(&o.Secret, "secret", "gpurun-webhook-tls", "the Secret holding the webhook's CA and serving pair (--self-signed)")
	fl.StringVar(&o.WebhookConfig, "webhook-config", "gpurun", "the MutatingWebhookConfiguration whose caBundle gets the CA (--self-signed)")
	fl.DurationVar(&o.RenewEvery, "renew-every", time.Minute, "how often --self-signed checks the certificate and the caBundle")
	fl.BoolVar(&o.ResolveClaims, "resolve-claims", true, "resolve pods' DRA resource claims from a cache of the cluster's ResourceClaims, ResourceClaimTemplates and DeviceClasses (list and watch, with the pod's service account); false: the policy's unresolved_claims judges every claim")
	return cmd
}
