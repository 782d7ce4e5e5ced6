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
never denied: one the webhook cannot read is admitted as it is.

TLS: --tls-cert-file and --tls-key-file (cert-manager's Secret, mounted;
re-read when it changes), or --self-signed: the webhook keeps its own CA
and serving pair in the Secret --secret (the first replica makes it) and
the CA in the caBundle of the MutatingWebhookConfiguration --webhook-config,
checked every --renew-every. The policy is --config (else $GPURUN_CONFIG,
else /etc/gpurun/config.toml).`

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
	fl.StringVar(&o.CertFile, "tls-cert-file", "", "the serving certificate (PEM), e.g. from cert-manager")
	fl.StringVar(&o.KeyFile, "tls-key-file", "", "the serving certificate's key (PEM)")
	fl.BoolVar(&o.SelfSigned, "self-signed", false, "keep a CA and serving certificate of the webhook's own in --secret, and the CA in --webhook-config's caBundle")
	fl.StringVar(&o.Namespace, "namespace", "", "the webhook's namespace (default: the pod's own)")
	fl.StringVar(&o.Service, "service", "gpurun-webhook", "the Service the API server calls the webhook through")
	fl.StringVar(&o.Secret, "secret", "gpurun-webhook-tls", "the Secret holding the webhook's CA and serving pair (--self-signed)")
	fl.StringVar(&o.WebhookConfig, "webhook-config", "gpurun", "the MutatingWebhookConfiguration whose caBundle gets the CA (--self-signed)")
	fl.DurationVar(&o.RenewEvery, "renew-every", time.Minute, "how often --self-signed checks the certificate and the caBundle")
	return cmd
}
