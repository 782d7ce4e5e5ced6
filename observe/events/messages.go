package events

import (
	"fmt"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/policy"
)

// SweptMessage is the message of a record's ShmSwept Event: "removed
// 700MiB in 12 files that the earlier instance of container trainer left
// in /dev/shm: nccl-shm-a, torch_123, … (kept 3 files: held by a live
// process or a sibling's)"; ok is false when the sweep removed nothing.
func SweptMessage(r records.Record) (string, bool) {
	s := r.Sweep
	if !s.Swept() {
		return "", false
	}
	msg := fmt.Sprintf("removed %s in %s that the earlier instance of container %s left in /dev/shm", size(s.Bytes), files(s.Files), containerName(r.Pod.Container, r.Name))
	if len(s.Names) > 0 {
		names := make([]string, 0, len(s.Names)+1)
		for _, n := range s.Names {
			names = append(names, path.Base(n))
		}
		// The record's names may end in "…" themselves (node/enforce
		// writes eight and "…").
		if s.Files > len(s.Names) && names[len(names)-1] != "…" {
			names = append(names, "…")
		}
		msg += ": " + strings.Join(names, ", ")
	}
	if s.KeptFiles > 0 {
		msg += fmt.Sprintf(" (kept %s: held by a live process or a sibling's)", files(s.KeptFiles))
	}
	return msg, true
}

func files(n int) string {
	if n == 1 {
		return "1 file"
	}
	return fmt.Sprintf("%d files", n)
}

func containerName(inPod, name string) string {
	if inPod != "" {
		return inPod
	}
	if name != "" {
		return name
	}
	return "(unnamed)"
}

// podOf is the pod of a sampled container, zero outside one.
func podOf(c shmstats.Container) records.Pod {
	if c.Pod == nil {
		return records.Pod{}
	}
	return records.Pod{Namespace: c.Pod.Namespace, Name: c.Pod.Name, UID: c.Pod.UID, Container: containerName(c.Pod.Container, c.Name)}
}

// NearMemoryLimit is the ShmNearMemoryLimit Event of a container whose
// memory is near its limit while /dev/shm holds a large part of it
// (shmstats.Container.NearMemoryLimit): "/dev/shm holds 7.59GiB and
// container trainer uses 15.2GiB of its 16GiB memory limit: …; fix: …".
func NearMemoryLimit(c shmstats.Container) PodEvent {
	pod := podOf(c)
	msg := fmt.Sprintf("/dev/shm holds %s and container %s uses %s of %s: tmpfs pages count against the limit as long as their files exist, and the kernel OOM-kills the container when it reaches the limit; "+
		"fix: raise the memory limit by what /dev/shm needs, or have the job delete the files it no longer needs there (those a crashed rank left stay charged: gpurun stats names them); a smaller /dev/shm only turns the OOM kill into \"No space left on device\"",
		sizeOrZero(c.Shm.Used), containerName(pod.Container, c.Name), sizeOrZero(c.Memory.WorkingSet), c.Memory.LimitWords("its"))
	return PodEvent{Pod: pod, Reason: ReasonNearMemoryLimit, Type: corev1.EventTypeWarning, Message: msg}
}

// OOMKilled is the ShmOOMKilled Event of an OOM kill, with what /dev/shm
// held at c, the last sample before it, taken age before: "container
// trainer was OOM-killed with 7.59GiB of its 16GiB memory limit in
// /dev/shm (at the last sample, 12s before)". processes > 0 says that many
// processes of the container were killed and the container lives on.
func OOMKilled(c shmstats.Container, processes int, age time.Duration) PodEvent {
	pod := podOf(c)
	who := "container " + containerName(pod.Container, c.Name) + " was"
	switch {
	case processes == 1:
		who = "a process of " + who
	case processes > 1:
		who = fmt.Sprintf("%d processes of container %s were", processes, containerName(pod.Container, c.Name))
	}
	held := sizeOrZero(c.Shm.Used)
	if m := c.Memory; m != nil && m.Err == "" && m.Limit > 0 {
		held += " of " + m.LimitWords("its")
	}
	msg := fmt.Sprintf("%s OOM-killed with %s in /dev/shm (at the last sample, %s before)", who, held, age.Round(time.Second))
	return PodEvent{Pod: pod, Reason: ReasonOOMKilled, Type: corev1.EventTypeWarning, Message: msg}
}

// sizeOrZero writes a byte count, 0B for none.
func sizeOrZero(n int64) string {
	if n <= 0 {
		return "0B"
	}
	return policy.FormatSize(n)
}
