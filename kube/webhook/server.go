package webhook

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/policy"
)

// MutatePath is where the API server sends pods.
const MutatePath = "/mutate-pods"

// DefaultMaxReviewBytes bounds an AdmissionReview's body when
// Handler.MaxBody is not set: the API server's own limit on an object is
// 3 MiB, and a review carries it once (twice on UPDATE).
const DefaultMaxReviewBytes = 8 << 20

// Handler serves AdmissionReviews at MutatePath, liveness at /healthz and
// readiness at /readyz.
type Handler struct {
	// Policy returns the policy in force.
	Policy func() *policy.Policy
	Logger *slog.Logger
	// Metrics, when set, count every review and its duration.
	Metrics *Metrics
	// MaxBody bounds a review's body in bytes (0: DefaultMaxReviewBytes);
	// a larger one is refused with 413.
	MaxBody int64
	// Certificate, when set, returns the serving pair in use: the webhook
	// is ready only with one that is valid now.
	Certificate func() *tls.Certificate
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Claims, when set, resolves pods' DRA resource claims (a
	// ClaimCache); without, every claim is judged by the policy's
	// unresolved_claims. Where it has a Ready method the webhook is ready
	// only once that says nil.
	Claims podspec.Claims

	draining atomic.Bool
	drained  atomic.Int64 // reviews answered while draining
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		// Alive, draining or not: the kubelet must not restart a replica
		// that is shutting down on purpose.
		_, _ = io.WriteString(w, "ok\n")
	case "/readyz":
		if err := h.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	case MutatePath:
		h.mutate(w, r)
	default:
		http.NotFound(w, r)
	}
}

// ErrDraining is Ready's answer once Drain was called.
var ErrDraining = errors.New("draining: shutting down, reviews still answered until the endpoints drop this replica")

// Drain starts the shutdown: from now on the webhook is not ready (the
// endpoints drop it), and every HTTP/1 answer closes its connection, so
// that a client holding kept-alive connections (the API server does)
// dials again, to a replica that stays. Reviews are still answered.
func (h *Handler) Drain() {
	h.draining.Store(true)
	h.Metrics.setReady(false)
}

// Draining reports whether Drain was called.
func (h *Handler) Draining() bool { return h.draining.Load() }

// Ready says whether the webhook can admit, nil when it can: it is not
// draining, a policy is loaded, the serving certificate (when
// Certificate is set) is valid now, and a review of a GPU pod goes
// through the whole answer (decode, decide, patch, encode).
func (h *Handler) Ready() error {
	err := h.ready()
	h.Metrics.setReady(err == nil)
	return err
}

func (h *Handler) ready() error {
	if h.Draining() {
		return ErrDraining
	}
	if h.Policy == nil || h.Policy() == nil {
		return errors.New("no policy loaded")
	}
	if r, ok := h.Claims.(interface{ Ready() error }); ok {
		if err := r.Ready(); err != nil {
			return err
		}
	}
	if h.Certificate != nil {
		leaf := leafOf(h.Certificate())
		if leaf == nil {
			return errors.New("no serving certificate loaded")
		}
		if now := h.now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
			return fmt.Errorf("the serving certificate is valid from %s to %s, not now", leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
		}
	}
	a, status, err := h.answer(selfReview())
	if err != nil {
		return fmt.Errorf("self-review: %d %w", status, err)
	}
	out := a.out
	if out.Response == nil || !out.Response.Allowed || out.Response.UID != selfReviewUID {
		return fmt.Errorf("self-review: answer %+v: want the pod allowed, uid %s", out.Response, selfReviewUID)
	}
	if p := out.Response.Patch; len(p) > 0 {
		var patch []Patch
		if err := json.Unmarshal(p, &patch); err != nil {
			return fmt.Errorf("self-review: the patch: %w", err)
		}
	}
	if _, err := json.Marshal(out); err != nil {
		return fmt.Errorf("self-review: encode the answer: %w", err)
	}
	return nil
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// selfReviewUID is the uid of the readiness check's review.
const selfReviewUID = "gpurun-self-review"

// selfReview is the readiness check's AdmissionReview: a CREATE of a pod
// whose container has a GPU as NVIDIA's device plugin hands one out.
func selfReview() []byte {
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "self-review", Namespace: "gpurun-self-review"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "trainer",
			Image: "nvcr.io/nvidia/pytorch:24.05-py3",
			Env:   []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"nvidia.com/gpu":      resource.MustParse("1"),
				corev1.ResourceMemory: resource.MustParse("16Gi"),
			}},
		}}},
	}
	raw, err := json.Marshal(&pod)
	if err != nil {
		panic(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       selfReviewUID,
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: pod.Namespace, Name: pod.Name, Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: raw},
		},
	}
	b, err := json.Marshal(&review)
	if err != nil {
		panic(err)
	}
	return b
}

func (h *Handler) log() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Logger
}

func (h *Handler) maxBody() int64 {
	if h.MaxBody > 0 {
		return h.MaxBody
	}
	return DefaultMaxReviewBytes
}

// answered is a review and its answer.
type answered struct {
	req *admissionv1.AdmissionRequest
	out *admissionv1.AdmissionReview
	m   Mutation
}

// answer decodes a review and answers it; status and err say why a body
// is refused. A pod's CREATE, which is every review the
// MutatingWebhookConfiguration sends, is decoded in one pass (podReview);
// anything else, or a body that pass cannot read, as an AdmissionReview
// whose object is read apart (ReviewWith).
func (h *Handler) answer(body []byte) (answered, int, error) {
	var pr podReview
	if err := json.Unmarshal(body, &pr); err == nil && pr.Request != nil && pr.Request.Object != nil &&
		notSized(pr.Request.Operation, pr.Request.Kind.Kind, pr.Request.SubResource) == "" {
		r := pr.Request
		out := answerOf(pr.TypeMeta)
		out.Response = &admissionv1.AdmissionResponse{UID: r.UID, Allowed: true}
		m := reviewPod(out.Response, r.Object, r.Namespace, h.Policy(), h.Claims)
		req := &admissionv1.AdmissionRequest{UID: r.UID, Namespace: r.Namespace, Name: r.Name}
		return answered{req: req, out: out, m: m}, http.StatusOK, nil
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return answered{}, http.StatusBadRequest, fmt.Errorf("decode the AdmissionReview: %w", err)
	}
	if review.Request == nil {
		return answered{}, http.StatusBadRequest, errors.New("the AdmissionReview has no request")
	}
	out, m := ReviewWith(&review, h.Policy(), h.Claims)
	return answered{req: review.Request, out: out, m: m}, http.StatusOK, nil
}

// podReview is an AdmissionReview of a pod, its object decoded with it:
// one pass over the body, where AdmissionReview's RawExtension takes two
// more (a copy of the object, then the pod out of it).
type podReview struct {
	metav1.TypeMeta `json:",inline"`
	Request         *struct {
		UID         types.UID               `json:"uid"`
		Kind        metav1.GroupVersionKind `json:"kind"`
		SubResource string                  `json:"subResource,omitempty"`
		Name        string                  `json:"name,omitempty"`
		Namespace   string                  `json:"namespace,omitempty"`
		Operation   admissionv1.Operation   `json:"operation"`
		Object      *corev1.Pod             `json:"object,omitempty"`
	} `json:"request,omitempty"`
}

// classify names a review's decision and outcome for the metrics.
func classify(out *admissionv1.AdmissionReview, m Mutation) (decision, outcome string) {
	switch {
	case m.Skipped != "":
		decision = DecisionSkipped
	case !m.Decision.Applies:
		decision = DecisionNotGPU
	default:
		decision = string(m.Decision.Action)
	}
	switch {
	case out.Response != nil && len(out.Response.Patch) > 0:
		outcome = OutcomeMutated
	case out.Response != nil && len(out.Response.Warnings) > 0:
		outcome = OutcomeWarning
	default:
		outcome = OutcomeUnchanged
	}
	return decision, outcome
}

func (h *Handler) mutate(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h.Metrics.begin()
	decision, outcome := DecisionInvalid, OutcomeError
	defer func() {
		h.Metrics.end()
		h.Metrics.observe(decision, outcome, time.Since(start))
	}()
	if h.Draining() {
		h.drained.Add(1)
		if r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, fmt.Sprintf("Content-Type %q: want application/json", r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
		return
	}
	limit := h.maxBody()
	if r.ContentLength > limit {
		http.Error(w, fmt.Sprintf("review of %d bytes, larger than %d", r.ContentLength, limit), http.StatusRequestEntityTooLarge)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			http.Error(w, fmt.Sprintf("review larger than %d bytes", limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read the review: "+err.Error(), http.StatusBadRequest)
		return
	}
	a, status, err := h.answer(body)
	if err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	out, m, req := a.out, a.m, a.req
	decision, outcome = classify(out, m)
	// A line a review at debug level (--verbose) only: the pod carries
	// its decision (DecisionAnnotation) and the metrics count the reviews,
	// while a line each at info level costs every review a write and a
	// busy cluster's log pipeline a line per pod created.
	if log := h.log(); log.Enabled(r.Context(), slog.LevelDebug) {
		attrs := []any{"namespace", req.Namespace, "pod", req.Name, "uid", string(req.UID)}
		switch {
		case m.Skipped != "":
			log.Debug("pod left as it is", append(attrs, "why", m.Skipped)...)
		case len(m.Patches) > 0:
			d := m.Decision
			log.Debug("pod admitted", append(attrs, "action", string(d.Action), "size_bytes", d.Size, "gpu", d.GPU, "reason", d.Reason)...)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		h.log().Warn("write the review", "namespace", req.Namespace, "pod", req.Name, "uid", string(req.UID), "err", err.Error())
	}
}
