// Package events posts Kubernetes Events on the pods whose /dev/shm gpurun
// sized or could not size, so that `kubectl describe pod` shows it to a
// pod's user without node access:
//
//   - ReasonSized (Normal): gpurun grew the pod's /dev/shm or set a
//     container's tmpfs size ("sized /dev/shm to 4 GiB: <reason>");
//   - ReasonNotSized (Warning): the plan failed or was left undone: the
//     cause and the fix from the enforce record;
//   - ReasonSwept (Normal): at a container's restart, a front door removed
//     what its dead earlier instance left in the pod's /dev/shm (from the
//     record's sweep; a sweep that failed is logged and counted, not
//     posted);
//   - ReasonNearMemoryLimit (Warning): the container's memory is near its
//     limit while /dev/shm holds a large part of it (NearMemoryLimit, from
//     the node agent's samples, once per episode);
//   - ReasonOOMKilled (Warning): the container, or a process of it, was
//     OOM-killed, and what /dev/shm held at the last sample (OOMKilled).
//
// and on the node, when a node-side pod cannot do its part there
// (WarnNode):
//
//   - ReasonAgentFailed (Warning): the node agent cannot set gpurun up;
//   - ReasonNRIUnavailable (Warning): the NRI plugin cannot register with
//     the node's runtime.
//
// A container gpurun left alone (no GPU evidence, a user's own size large
// enough, hostIPC) gets no Event: nothing happened to it, and the node
// agent's metrics show its plan. Each pod gets one Event per reason: a
// repeat (another container of the pod, a restart, a second sweep) raises
// its count and last timestamp and sets its message, as the kubelet's own
// events do. The Event's name is
// derived from the pod's uid and the reason, so a restarted agent finds and
// counts on the same Event instead of posting another.
package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// The reasons of the Events on pods.
const (
	// ReasonSized (Normal): gpurun sized the pod's /dev/shm.
	ReasonSized = "ShmSized"
	// ReasonNotSized (Warning): gpurun could not, or left it undone.
	ReasonNotSized = "ShmNotSized"
	// ReasonSwept (Normal): at a container's restart, a front door removed
	// the files its dead earlier instance left in the pod's /dev/shm.
	ReasonSwept = "ShmSwept"
	// ReasonNearMemoryLimit (Warning): a container's memory is near its
	// limit while /dev/shm holds a large part of it (MemoryEvent).
	ReasonNearMemoryLimit = "ShmNearMemoryLimit"
	// ReasonOOMKilled (Warning): a container (or a process of it) was
	// OOM-killed, with what /dev/shm held then (MemoryEvent).
	ReasonOOMKilled = "ShmOOMKilled"
)

// podReasons are the reasons of the Events on pods.
var podReasons = []string{ReasonSized, ReasonNotSized, ReasonSwept, ReasonNearMemoryLimit, ReasonOOMKilled}

// PodEvent is one Event on a pod.
type PodEvent struct {
	// Pod is the pod, and the container it is about.
	Pod records.Pod
	// Reason, Type and Message are the Event's.
	Reason, Type, Message string
}

// Controller is the reportingController of gpurun's Events.
const Controller = "gpurun.io/node-agent"

// Poster posts Events through a Kubernetes API. Its methods are safe for
// concurrent use.
type Poster struct {
	// Kube is the API (kube.InCluster in the node agent's pod).
	Kube *kube.Kube
	// Node is the node's name (the Events' source host and reporting
	// instance).
	Node string
	// Log receives what could not be posted (nil: discard).
	Log *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu      sync.Mutex
	count   map[string]int32 // by Event name: the count posted
	once    sync.Once
	queue   chan PodEvent
	pending sync.WaitGroup
}

// maxRemembered bounds the Events a Poster remembers the count of; past
// it, it forgets them all and reads a count back from the API server at
// the next repeat (a conflict on POST), so a node that runs many pods
// over months does not grow the map.
const maxRemembered = 4096

// queueLen bounds the records waiting to be posted; more are dropped (and
// logged): a slow API server must not hold container starts or memory.
const queueLen = 256

// Events returns the Events a record calls for: the sizing's (Event), and
// ShmSwept when the front door removed what the container's earlier
// instance left in /dev/shm. A sweep that failed gets none: the exporter
// logs and counts it.
func Events(r records.Record) []PodEvent {
	var out []PodEvent
	if reason, typ, msg, ok := Event(r); ok {
		out = append(out, PodEvent{Pod: r.Pod, Reason: reason, Type: typ, Message: msg})
	}
	if msg, ok := SweptMessage(r); ok && inPod(r.Pod) {
		out = append(out, PodEvent{Pod: r.Pod, Reason: ReasonSwept, Type: corev1.EventTypeNormal, Message: msg})
	}
	return out
}

func inPod(p records.Pod) bool { return p.UID != "" && p.Name != "" && p.Namespace != "" }

// Event returns the reason, type and message of the sizing Event a record
// calls for; ok is false when it calls for none (no pod, nothing done).
func Event(r records.Record) (reason, typ, msg string, ok bool) {
	if !inPod(r.Pod) {
		return "", "", "", false
	}
	who := ""
	if r.Pod.Container != "" {
		who = " (container " + r.Pod.Container + ")"
	}
	switch {
	case r.Failed:
		msg := "could not size /dev/shm" + who + ": " + r.Err
		if r.Fix != "" {
			msg += "; fix: " + r.Fix
		}
		return ReasonNotSized, corev1.EventTypeWarning, msg, true
	case r.Skipped != "":
		return ReasonNotSized, corev1.EventTypeWarning, fmt.Sprintf("/dev/shm left at its size%s: gpurun planned %s to %s (%s) but %s", who, r.Action, size(r.Size), r.Reason, r.Skipped), true
	case r.Action == "" || r.Action == string(oci.ActionNone):
		return "", "", "", false
	}
	return ReasonSized, corev1.EventTypeNormal, fmt.Sprintf("sized /dev/shm to %s%s: %s", size(r.Size), who, r.Reason), true
}

func size(n int64) string {
	if n <= 0 {
		return "(unknown)"
	}
	return policy.FormatSize(n)
}

// Post posts or counts the Events a record calls for (Events); a record
// that calls for none is ignored.
func (p *Poster) Post(ctx context.Context, r records.Record) error {
	var errs []error
	for _, ev := range Events(r) {
		errs = append(errs, p.PostEvent(ctx, ev))
	}
	return errors.Join(errs...)
}

// PostEvent posts an Event on a pod, or counts it (raising its count and
// setting its message) when the pod has one of that reason already: one
// Event per pod and reason.
func (p *Poster) PostEvent(ctx context.Context, ev PodEvent) error {
	pod := ev.Pod
	if !inPod(pod) {
		return nil
	}
	obj := corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	if pod.Container != "" {
		obj.FieldPath = "spec.containers{" + pod.Container + "}"
	}
	if err := p.post(ctx, pod.Namespace, eventName(pod.Name, pod.UID, ev.Reason), obj, ev.Reason, ev.Type, ev.Message); err != nil {
		return fmt.Errorf("the %s event of pod %s/%s: %w", ev.Reason, pod.Namespace, pod.Name, err)
	}
	return nil
}

// The reasons of the Warning Events gpurun's node-side pods post on their
// Node when they cannot do their part there (WarnNode).
const (
	// ReasonAgentFailed: the node agent cannot set gpurun up on the node
	// (settings that cannot work there, a record of a later release, an
	// install that failed); its pod is not ready.
	ReasonAgentFailed = "GPURunAgentFailed"
	// ReasonNRIUnavailable: the NRI plugin cannot register with the
	// node's runtime (no NRI there); its pod is not ready.
	ReasonNRIUnavailable = "GPURunNRIUnavailable"
)

// WarnNode posts (or counts) a Warning Event on the Poster's Node, as the
// kubelet posts the node's own (in the default namespace, the node's name
// as its uid: `kubectl describe node` shows both), one per reason: a
// repeat raises its count and sets its message.
func (p *Poster) WarnNode(ctx context.Context, reason, msg string) error {
	obj := corev1.ObjectReference{Kind: "Node", Name: p.Node, UID: types.UID(p.Node)}
	if err := p.post(ctx, metav1.NamespaceDefault, eventName(p.Node, p.Node, reason), obj, reason, corev1.EventTypeWarning, msg); err != nil {
		return fmt.Errorf("the %s event of node %s: %w", reason, p.Node, err)
	}
	return nil
}

// post posts the Event name in namespace ns about obj, or raises its
// count when it exists (posted by this Poster, or before a restart).
func (p *Poster) post(ctx context.Context, ns, name string, obj corev1.ObjectReference, reason, typ, msg string) error {
	now := metav1.NewTime(p.now())
	path := "/api/v1/namespaces/" + url.PathEscape(ns) + "/events"
	p.mu.Lock()
	n, known := p.count[name]
	p.mu.Unlock()
	if !known {
		ev := &corev1.Event{
			TypeMeta:       metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: ns},
			InvolvedObject: obj,
			Reason:         reason, Message: trim(msg), Type: typ,
			Source:         corev1.EventSource{Component: "gpurun", Host: p.Node},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
			ReportingController: Controller, ReportingInstance: p.Node,
		}
		err := p.Kube.Do(ctx, "POST", path, "", ev, nil)
		if err == nil {
			p.remember(name, 1)
			return nil
		}
		if !errors.Is(err, kube.ErrConflict) {
			return fmt.Errorf("post: %w", err)
		}
		// Posted before (a restarted agent): count on from the API's.
		var old corev1.Event
		if err := p.Kube.Do(ctx, "GET", path+"/"+url.PathEscape(name), "", nil, &old); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		n = old.Count
	}
	patch := map[string]any{"count": n + 1, "lastTimestamp": now, "message": trim(msg)}
	if err := p.Kube.Do(ctx, "PATCH", path+"/"+url.PathEscape(name), "application/merge-patch+json", patch, nil); err != nil {
		if errors.Is(err, kube.ErrNotFound) { // expired (the API server's event TTL): post anew
			p.forget(name)
			return p.post(ctx, ns, name, obj, reason, typ, msg)
		}
		return fmt.Errorf("count: %w", err)
	}
	p.remember(name, n+1)
	return nil
}

// Observe queues what a record calls for (Events), to be posted in order
// by one background worker, which logs what fails: for an Enforcer's
// Observe and a log tail, which must not block.
func (p *Poster) Observe(r records.Record) {
	for _, ev := range Events(r) {
		p.Emit(ev)
	}
}

// Emit queues an Event on a pod, as Observe does; one not on a pod is
// ignored.
func (p *Poster) Emit(ev PodEvent) {
	if !inPod(ev.Pod) {
		return
	}
	p.once.Do(func() {
		p.queue = make(chan PodEvent, queueLen)
		go p.work()
	})
	p.pending.Add(1)
	select {
	case p.queue <- ev:
	default:
		p.pending.Done()
		p.log().Warn("too many Kubernetes events waiting; one dropped", "pod", ev.Pod.Namespace+"/"+ev.Pod.Name, "reason", ev.Reason)
	}
}

func (p *Poster) work() {
	for ev := range p.queue {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := p.PostEvent(ctx, ev); err != nil {
			p.log().Warn("cannot post a Kubernetes event", "err", err.Error())
		}
		cancel()
		p.pending.Done()
	}
}

// Flush waits until what Observe queued is posted (or failed).
func (p *Poster) Flush() { p.pending.Wait() }

func (p *Poster) remember(name string, n int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count == nil || len(p.count) >= maxRemembered {
		p.count = map[string]int32{}
	}
	p.count[name] = n
}

func (p *Poster) forget(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.count, name)
}

// Forget drops what the Poster remembers of a pod that is gone.
func (p *Poster) Forget(pod records.Pod) {
	for _, reason := range podReasons {
		p.forget(eventName(pod.Name, pod.UID, reason))
	}
}

func (p *Poster) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Poster) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.New(slog.DiscardHandler)
}

// eventName is the object's name and a digest of its uid and the reason,
// as the kubelet names events (<object>.<unique suffix>), within the 253
// characters of a name.
func eventName(object, uid, reason string) string {
	sum := sha256.Sum256([]byte(uid + "/" + reason))
	suffix := "." + strings.ToLower(reason) + "-" + hex.EncodeToString(sum[:5])
	name := object
	if len(name)+len(suffix) > 253 {
		name = name[:253-len(suffix)]
	}
	return name + suffix
}

// trim bounds a message to the API's 1 KiB note limit.
func trim(msg string) string {
	const max = 1024
	if len(msg) <= max {
		return msg
	}
	return msg[:max-3] + "..."
}
