package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/gpurun/gpurun/kube"
)

// KubeOptions say which cluster and namespace doctor --pod reads, as
// kubectl's flags of the same names do (kube.KubeconfigOptions: the
// kubeconfig files of $KUBECONFIG, else ~/.kube/config, else the pod's
// service account when doctor runs in one; --kubeconfig instead,
// --context, -n).
type KubeOptions = kube.KubeconfigOptions

// KubeClient reads objects and logs from an API server with the
// credentials a kubeconfig gives (client-go's: tokens, client
// certificates, exec plugins). It only reads.
type KubeClient struct {
	base string
	hc   *http.Client
}

// NewKubeClient loads the kubeconfig as kubectl does (kube.FromKubeconfig)
// and returns a client and the namespace -n or the context names.
func NewKubeClient(o KubeOptions) (*KubeClient, string, error) {
	if o.Timeout == 0 {
		o.Timeout = apiTimeout
	}
	k, ns, err := kube.FromKubeconfig(o)
	if err != nil {
		return nil, "", err
	}
	return NewKubeClientFor(k.Base, k.Client), ns, nil
}

// NewKubeClientFor is a client of the API server at base (its URL) over
// hc, which carries the credentials.
func NewKubeClientFor(base string, hc *http.Client) *KubeClient {
	return &KubeClient{base: kube.BaseURL(base), hc: hc}
}

// maxObjectBytes bounds one answer of the API server.
const maxObjectBytes = 16 << 20

// apiReq is one read of the API: a resource of a group (core: ""), in a
// namespace or not, one object (name) or a list, a subresource (log).
type apiReq struct {
	group, version, resource string
	namespace, name, sub     string
	query                    url.Values
}

// path is the request's URL path and query.
func (r apiReq) path() string {
	p := "/api/" + r.version
	if r.group != "" {
		p = "/apis/" + r.group + "/" + r.version
	}
	if r.namespace != "" {
		p += "/namespaces/" + url.PathEscape(r.namespace)
	}
	p += "/" + r.resource
	if r.name != "" {
		p += "/" + url.PathEscape(r.name)
	}
	if r.sub != "" {
		p += "/" + r.sub
	}
	if len(r.query) > 0 {
		p += "?" + r.query.Encode()
	}
	return p
}

// verb is RBAC's verb for the request.
func (r apiReq) verb() string {
	if r.name == "" {
		return "list"
	}
	return "get"
}

// resourceName is the resource as RBAC and kubectl auth can-i name it:
// "pods/log", "nodes", "mutatingwebhookconfigurations.admissionregistration.k8s.io".
func (r apiReq) resourceName() string {
	n := r.resource
	if r.sub != "" {
		n += "/" + r.sub
	}
	if r.group != "" {
		n += "." + r.group
	}
	return n
}

// permission says what the request needs, in RBAC's words.
func (r apiReq) permission() string {
	if r.namespace == "" {
		return fmt.Sprintf("%s on %s (cluster-scoped: a ClusterRole)", r.verb(), r.resourceName())
	}
	return fmt.Sprintf("%s on %s in namespace %s", r.verb(), r.resourceName(), r.namespace)
}

// canI is the kubectl command that tells whether the user may make the
// request.
func (r apiReq) canI() string {
	cmd := "kubectl auth can-i " + r.verb() + " " + r.resourceName()
	if r.namespace != "" {
		cmd += " -n " + r.namespace
	}
	return cmd
}

// apiError is an answer of the API server other than 2xx, or no answer.
type apiError struct {
	req apiReq
	// code is the HTTP status (0: no answer).
	code    int
	message string
	err     error
}

func (e *apiError) Error() string {
	switch {
	case e.code == http.StatusForbidden:
		who := ""
		if m := userRE.FindStringSubmatch(e.message); m != nil {
			who = " for " + m[1]
		}
		return fmt.Sprintf("forbidden%s: needs %s (%s)", who, e.req.permission(), e.req.canI())
	case e.code == http.StatusUnauthorized:
		return fmt.Sprintf("unauthorized: the API server refused the kubeconfig's credentials (an expired token? kubectl auth whoami says): %s", e.message)
	case e.code == http.StatusNotFound:
		return fmt.Sprintf("not found: %s", e.message)
	case e.code != 0:
		return fmt.Sprintf("%s %s: %d: %s", strings.ToUpper(e.req.verb()), e.req.path(), e.code, e.message)
	}
	return fmt.Sprintf("%s %s: %v", strings.ToUpper(e.req.verb()), e.req.path(), e.err)
}

func (e *apiError) Unwrap() error { return e.err }

// userRE reads who the API server refused from its message: `... is
// forbidden: User "system:serviceaccount:ml:reader" cannot get ...`.
var userRE = regexp.MustCompile(`User ("[^"]+")`)

// isNotFound says a read found nothing there.
func isNotFound(err error) bool { return apiCode(err) == http.StatusNotFound }

func apiCode(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.code
	}
	return 0
}

// raw reads the body of a request.
func (k *KubeClient) raw(ctx context.Context, r apiReq) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.base+r.path(), nil)
	if err != nil {
		return nil, &apiError{req: r, err: err}
	}
	req.Header.Set("Accept", "application/json, */*")
	resp, err := k.hc.Do(req)
	if err != nil {
		return nil, &apiError{req: r, err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxObjectBytes))
	if err != nil {
		return nil, &apiError{req: r, err: err}
	}
	if resp.StatusCode/100 != 2 {
		var st struct {
			Message string `json:"message"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		return nil, &apiError{req: r, code: resp.StatusCode, message: msg, err: errors.New(resp.Status)}
	}
	return data, nil
}

// get decodes the JSON answer of a request into out.
func (k *KubeClient) get(ctx context.Context, r apiReq, out any) error {
	data, err := k.raw(ctx, r)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &apiError{req: r, err: fmt.Errorf("decode: %w", err)}
	}
	return nil
}
