package doctor

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/kube/podspec"
	"github.com/gpurun/gpurun/kube/webhook"
	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/policy"
	"github.com/gpurun/gpurun/policy/remedy"
)

// How a pod got its /dev/shm, in fact.
const (
	// doorWebhook: the webhook's Memory emptyDir (gpurun-shm).
	doorWebhook = "webhook"
	// doorNode: a node door grew the pod's tmpfs (its ShmSized Event).
	doorNode = "node"
	// doorNodeFailed: a node door tried and could not (ShmNotSized).
	doorNodeFailed = "node-failed"
	// doorUser: a volume of the pod's own at /dev/shm.
	doorUser = "user"
	// doorHostIPC: the host's /dev/shm (hostIPC).
	doorHostIPC = "host-ipc"
	// doorRuntime: nothing: the runtime's 64 MiB.
	doorRuntime = "none"
)

// shmSource is where a pod's /dev/shm came from.
type shmSource struct {
	door string
	// volume is the volume at /dev/shm (webhook's or user's).
	volume string
	// size is its size in bytes, 0 when not known.
	size int64
	// words say what it is.
	words string
	// event is the node door's Event (ShmSized, ShmNotSized).
	event *corev1.Event
}

// sizedRE reads the size of a ShmSized Event's message ("sized /dev/shm
// to 11.77GiB (container trainer): …", observe/events).
var sizedRE = regexp.MustCompile(`^sized /dev/shm to (\S+)`)

// shmSourceOf tells where a pod's /dev/shm came from: its spec (hostIPC, a
// volume at /dev/shm), else a node door's Event, else the runtime.
func shmSourceOf(f *podFacts) shmSource {
	pod := f.pod
	if pod.Spec.HostIPC {
		return shmSource{door: doorHostIPC, words: "the host's /dev/shm (hostIPC: true), which gpurun never resizes"}
	}
	if vol := shmVolume(pod); vol != "" {
		s := shmSource{door: doorUser, volume: vol}
		if vol == webhook.VolumeName {
			s.door = doorWebhook
		}
		s.size, s.words = volumeSize(pod, vol, nodeAllocatable(f.node))
		return s
	}
	sized, notSized := latestEvent(f.events, events.ReasonSized), latestEvent(f.events, events.ReasonNotSized)
	switch {
	case sized != nil && (notSized == nil || !sized.LastTimestamp.Before(&notSized.LastTimestamp)):
		s := shmSource{door: doorNode, event: sized, words: "the pod's tmpfs, grown by gpurun on the node (ShmSized: " + sized.Message + ")"}
		if m := sizedRE.FindStringSubmatch(sized.Message); m != nil {
			s.size, _ = policy.ParseSize(m[1])
		}
		return s
	case notSized != nil:
		return shmSource{door: doorNodeFailed, event: notSized, size: policy.EngineDefaultShm,
			words: "the runtime's 64MiB: gpurun on the node did not size it (ShmNotSized: " + notSized.Message + ")"}
	}
	return shmSource{door: doorRuntime, size: policy.EngineDefaultShm,
		words: "the runtime's 64MiB (containerd and CRI-O give every pod that, and nothing in this pod's spec changes it)"}
}

// shmVolume is the volume mounted at /dev/shm in the pod's first
// container that mounts one, "" for none.
func shmVolume(pod *corev1.Pod) string {
	members, err := podspec.Translate(pod)
	if err != nil {
		return ""
	}
	for _, m := range members {
		if m.ShmVolume != "" {
			return m.ShmVolume
		}
	}
	return ""
}

// volumeSize is the size of the tmpfs the kubelet mounts for a Memory
// emptyDir: the smallest of its sizeLimit, the pod's memory limit and the
// node's allocatable memory (0 when none is known), and it in words.
func volumeSize(pod *corev1.Pod, name string, allocatable int64) (int64, string) {
	for _, v := range pod.Spec.Volumes {
		if v.Name != name {
			continue
		}
		ed := v.EmptyDir
		if ed == nil || ed.Medium != corev1.StorageMediumMemory {
			return 0, fmt.Sprintf("volume %s (%s), not a Memory emptyDir", name, volumeKindOf(v))
		}
		words := "volume " + name + " (emptyDir, medium Memory"
		var size int64
		if ed.SizeLimit != nil && ed.SizeLimit.Value() > 0 {
			size = ed.SizeLimit.Value()
			words += ", sizeLimit " + ed.SizeLimit.String()
		}
		limit, _ := podspec.MemoryLimit(pod)
		for _, cap := range []int64{limit, allocatable} {
			if cap > 0 && (size == 0 || cap < size) {
				size = cap
			}
		}
		if size > 0 {
			words += fmt.Sprintf("): a tmpfs of %s", formatSize(size))
		} else {
			words += "): a tmpfs as large as the node's allocatable memory"
		}
		return size, words
	}
	return 0, fmt.Sprintf("volume %s (not in the pod's volumes)", name)
}

func volumeKindOf(v corev1.Volume) string {
	switch {
	case v.EmptyDir != nil:
		return "emptyDir on the node's disk"
	case v.HostPath != nil:
		return "hostPath " + v.HostPath.Path
	case v.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim " + v.PersistentVolumeClaim.ClaimName
	}
	return "not an emptyDir"
}

// nodeAllocatable is a node's allocatable memory, 0 when not known.
func nodeAllocatable(n *corev1.Node) int64 {
	if n == nil {
		return 0
	}
	if q, ok := n.Status.Allocatable[corev1.ResourceMemory]; ok {
		return q.Value()
	}
	return 0
}

// latestEvent is the latest of the Events of a reason, nil for none.
func latestEvent(evs []corev1.Event, reason string) *corev1.Event {
	var out *corev1.Event
	for i := range evs {
		e := &evs[i]
		if e.Reason == reason && (out == nil || out.LastTimestamp.Before(&e.LastTimestamp)) {
			out = e
		}
	}
	return out
}

// doorCheck says how the pod got its /dev/shm and whether that is what
// the policy gives it; for a GPU pod at the runtime's 64 MiB, which of
// gpurun's doors is missing on its node or namespace, and what to run.
func (p *podDiag) doorCheck() Check {
	s := p.shm
	c := Check{Name: "shm.door", Status: OK, Data: map[string]any{"door": s.door}}
	if s.size > 0 {
		c.Data["size_bytes"] = s.size
	}
	if s.volume != "" {
		c.Data["volume"] = s.volume
	}
	want := p.wantSize()
	switch {
	case p.dErr != nil || !p.d.Applies:
		c.Detail = "/dev/shm: " + s.words
	case s.door == doorWebhook || s.door == doorNode:
		c.Detail = "/dev/shm: " + s.words
		if s.size > 0 && s.size < want {
			c.Status = Warn
			c.Detail += fmt.Sprintf("; the policy gives %s", formatSize(want))
		}
	case s.door == doorUser:
		p.userDoor(&c, want)
	case s.door == doorHostIPC:
		c.Detail = "/dev/shm: " + s.words
		if p.d.Action != podspec.ActionHostIPC {
			c.Status = Warn
			c.Detail += ": no isolation from the host's other processes, and its size is the node's"
		}
	case s.door == doorNodeFailed:
		c.Status = Problem
		c.Detail = fmt.Sprintf("/dev/shm: %s; the policy gives %s", s.words, formatSize(want))
		p.doorFix = p.notSizedFix(want)
		c.Fix = remedy.Text(p.doorFix)
	default:
		p.missingDoor(&c, want)
	}
	return c
}

// userDoor judges a /dev/shm of the pod's own against the policy.
func (p *podDiag) userDoor(c *Check, want int64) {
	s := p.shm
	c.Detail = fmt.Sprintf("/dev/shm: the pod's own %s; gpurun leaves it as it is", s.words)
	min := p.f.pol.Min
	switch {
	case s.size > 0 && s.size < min:
		c.Status = Problem
		c.Detail += fmt.Sprintf(", and it is below the policy minimum %s: DataLoader workers die with \"Bus error\", NCCL with \"No space left on device\"", formatSize(min))
	case s.size > 0 && s.size < want:
		c.Status = Warn
		c.Detail += fmt.Sprintf(", below the %s the policy gives", formatSize(want))
	default:
		return
	}
	p.doorFix = remedy.PodShm(p.target, want)
	c.Fix = remedy.Text(p.doorFix)
}

// notSizedFix is the fix for a pod a node door could not size: the one
// its Event names, and the pod spec that needs no node door.
func (p *podDiag) notSizedFix(want int64) []remedy.Step {
	var steps []remedy.Step
	if _, fix, ok := strings.Cut(p.shm.event.Message, "; fix: "); ok {
		steps = append(steps, remedy.Step{Where: "node", How: fix})
	}
	return append(steps, remedy.PodShm(p.target, want)...)
}
