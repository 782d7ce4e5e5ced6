// Package nullwebhook is the webhook that does nothing, the floor under
// gpurun's admission webhook: it answers every AdmissionReview allowed
// with a one-operation patch, decoding nothing but the request's uid.
// What a review costs it (in CPU, in latency) is the least any webhook
// served the same way can cost; gpurun's webhook is measured against it
// side by side, in-process by kube/webhook's BenchmarkServeProcess and in
// a cluster by the integration floor test (integration/testdata/nullwebhook
// deploys it as gpurun's webhook is deployed).
package nullwebhook

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Annotation is the key of the annotation its patch adds, with the value
// "called".
const Annotation = "gpurun-test/null-webhook"

// patch is the answer's patch, base64-encoded as an AdmissionReview
// carries it.
var patch = base64.StdEncoding.EncodeToString([]byte(`[{"op":"add","path":"/metadata/annotations","value":{"` + Annotation + `":"called"}}]`))

// Review answers one AdmissionReview: allowed, with the patch.
func Review(w http.ResponseWriter, r *http.Request) {
	var review struct {
		Request struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
		http.Error(w, fmt.Sprintf("decode the review: %v", err), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":%q,"allowed":true,"patchType":"JSONPatch","patch":%q}}`,
		review.Request.UID, patch)
}

// Server is the do-nothing webhook's server on addr: Review at path,
// readiness ("ok") at /healthz, HTTP/1.1 only, as gpurun's review port.
func Server(addr, path string) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc(path, Review)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	var h1 http.Protocols
	h1.SetHTTP1(true)
	return &http.Server{Addr: addr, Handler: mux, Protocols: &h1, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
}
