package doctor

import (
	"fmt"
	"strings"

	"github.com/gpurun/gpurun/observe/shmstats"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// shmLimitWarnPercent is the share of a container's (or its pod's) memory
// limit that /dev/shm may hold before doctor warns: gpurun's default
// /dev/shm is half the limit, and from 40 % a /dev/shm that fills up
// leaves the processes little more than half of the limit for everything
// else — an OOM kill, not ENOSPC, is then what ends the job.
const shmLimitWarnPercent = 40

// cgroupMemory reads the memory cgroup of a container's init process pid
// on the machine looked at, and /dev/shm's share of it; inPod says its
// parent cgroup is its pod's.
func (s *System) cgroupMemory(pid int, inPod bool, hostMem int64, sh shmState) *shmstats.Memory {
	g := &shmstats.Cgroups{Proc: s.path("/proc"), Root: s.path("/sys/fs/cgroup"), HostMemory: hostMem}
	m := g.Read(pid, inPod)
	m.Share(sh.fs.Used, ownShm(sh))
	return &m
}

// ownShm says /dev/shm is a tmpfs of the container's own or its pod's,
// read: its pages count against the memory of the container or its pod.
func ownShm(sh shmState) bool {
	return sh.known && sh.fs.Tmpfs && sh.kind != oci.ShmHost && sh.kind != oci.ShmNone
}

// shmMemoryCheck says what /dev/shm holds against the container's memory
// limit and use (from the host: docker and CRI containers), and warns when
// /dev/shm holds much of the limit, or the container is near it with
// /dev/shm a large part.
func shmMemoryCheck(sub subject) (Check, bool) {
	m := sub.cgroupMemory
	if m == nil || m.Err != "" {
		return Check{}, false
	}
	c := Check{Name: "shm.memory", Status: OK, Data: map[string]any{
		"cgroup": m.Cgroup, "limit_bytes": m.Limit, "limit_of": m.LimitOf, "usage_bytes": m.Usage, "working_set_bytes": m.WorkingSet,
		"shmem_bytes": m.Shmem, "oom_kills": m.OOMKills, "shm_used_bytes": sub.shm.fs.Used,
		"shm_percent_of_limit": m.ShmPercentOfLimit, "shm_percent_of_working_set": m.ShmPercentOfWorkingSet,
	}}
	own := ownShm(sub.shm)
	parts := []string{memoryWords(m, sub.shm, own)}
	if m.OOMKills > 0 {
		parts = append(parts, fmt.Sprintf("the kernel has OOM-killed %d process(es) in its cgroup", m.OOMKills))
	}
	if own && m.Limited() {
		switch {
		case m.NearLimitWith(sub.shm.fs.Used):
			c.Status = Warn
			parts = append(parts, fmt.Sprintf("it is near the limit (%.0f %%), and /dev/shm's pages are not reclaimed while their files exist: the next allocation may OOM-kill it", float64(m.WorkingSet)*100/float64(m.Limit)))
		case m.ShmPercentOfLimit >= shmLimitWarnPercent:
			c.Status = Warn
			parts = append(parts, fmt.Sprintf("from %d %% of the limit, what /dev/shm holds leaves the processes little of it: a full /dev/shm OOM-kills the container rather than failing with \"No space left on device\"", shmLimitWarnPercent))
		case m.OOMKills > 0 && m.ShmPercentOfLimit >= shmstats.ShmShareOfLimit*100:
			c.Status = Warn
		}
	}
	c.Detail = strings.Join(parts, "; ")
	if c.Status == Warn {
		c.Fix = "raise the memory limit by what /dev/shm needs, or have the job delete the files it no longer needs in /dev/shm (those a crashed rank left stay charged: gpurun stats names them); a smaller /dev/shm only turns the OOM kill into \"No space left on device\""
	}
	return c, true
}

// memoryWords is the check's first sentence: "/dev/shm holds 7.59GiB: 48 %
// of the 16GiB memory limit, 51 % of what the container uses now
// (15.2GiB)".
func memoryWords(m *shmstats.Memory, sh shmState, own bool) string {
	limit := m.LimitWords("the")
	if m.LimitOf == shmstats.LimitHost {
		limit += " (no memory limit)"
	}
	if !own {
		return fmt.Sprintf("the container uses %s of %s; /dev/shm is not a tmpfs of its own or its pod's, so its share is not counted", sizeWord(m.WorkingSet), limit)
	}
	return fmt.Sprintf("/dev/shm holds %s: %.0f %% of %s, %.0f %% of what the container uses now (%s)",
		sizeWord(sh.fs.Used), m.ShmPercentOfLimit, limit, m.ShmPercentOfWorkingSet, sizeWord(m.WorkingSet))
}

// sizeWord writes a byte count, 0B for none.
func sizeWord(n int64) string {
	if n <= 0 {
		return "0B"
	}
	return policy.FormatSize(n)
}
