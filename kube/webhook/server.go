package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gpurun/gpurun/policy"
)

// MutatePath is where the API server sends pods.
const MutatePath = "/mutate-pods"

// maxReview bounds an AdmissionReview's body (the API server's own limit
// on an object is 3 MiB; a review carries it once, or twice on UPDATE).
const maxReview = 8 << 20

// Handler serves AdmissionReviews at MutatePath and a health check at
// /healthz.
type Handler struct {
	// Policy returns the policy in force.
	Policy func() *policy.Policy
	Logger *slog.Logger
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz", "/readyz":
		_, _ = io.WriteString(w, "ok\n")
	case MutatePath:
		h.mutate(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (h *Handler) log() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Logger
}

func (h *Handler) mutate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, fmt.Sprintf("Content-Type %q: want application/json", r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReview+1))
	if err != nil {
		http.Error(w, "read the review: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxReview {
		http.Error(w, fmt.Sprintf("review larger than %d bytes", maxReview), http.StatusRequestEntityTooLarge)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		http.Error(w, "decode the AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	if review.Request == nil {
		http.Error(w, "the AdmissionReview has no request", http.StatusBadRequest)
		return
	}
	out, m := Review(&review, h.Policy())
	req := review.Request
	attrs := []any{"namespace", req.Namespace, "pod", req.Name, "uid", string(req.UID)}
	switch {
	case m.Skipped != "":
		h.log().Debug("pod left as it is", append(attrs, "why", m.Skipped)...)
	case len(m.Patches) > 0:
		d := m.Decision
		h.log().Info("pod admitted", append(attrs, "action", string(d.Action), "size_bytes", d.Size, "gpu", d.GPU, "reason", d.Reason)...)
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		h.log().Warn("write the review", append(attrs, "err", err.Error())...)
	}
}
