package shmstats

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The values of Memory.LimitOf: whose limit bounds the container.
const (
	// LimitContainer: the container's own cgroup's limit.
	LimitContainer = "container"
	// LimitPod: its parent cgroup's, the pod's (a Kubernetes container).
	LimitPod = "pod"
	// LimitParent: its parent cgroup's, outside a pod (docker
	// --cgroup-parent, a systemd slice).
	LimitParent = "parent"
	// LimitAncestor: a cgroup higher up (Kubernetes' kubepods, which the
	// kubelet limits to the node's allocatable memory).
	LimitAncestor = "ancestor"
	// LimitHost: no cgroup on the way limits it: the host's memory.
	LimitHost = "host"
)

// The thresholds of memory pressure with /dev/shm in it, shared by the
// node agent's Events (ShmNearMemoryLimit) and doctor; docs/observe.md says
// why these.
const (
	// NearMemoryLimit is the fraction of its limit the container's working
	// set reaches for it to count as near the limit.
	NearMemoryLimit = 0.90
	// MemoryRearm is the fraction it must fall below again before another
	// approach counts (hysteresis: a working set that hovers at the
	// threshold is one episode, not one a sample).
	MemoryRearm = 0.80
	// ShmShareOfLimit is the fraction of the limit /dev/shm must hold for
	// it to count in the pressure: a quarter, half of what gpurun's
	// default /dev/shm (half the limit) can hold.
	ShmShareOfLimit = 0.25
)

// Memory is the memory cgroup of a container, read from the host beside its
// /dev/shm: tmpfs pages are charged to the memory cgroup of the process
// that first touched them and stay charged while the file exists, so a full
// /dev/shm spends the container's memory limit. Its JSON form is part of
// `gpurun stats --json`; the field names are stable.
type Memory struct {
	// Cgroup is the container's memory cgroup, a path in the node's cgroup
	// hierarchy ("/kubepods/burstable/pod…/…").
	Cgroup string `json:"cgroup"`
	// Version is the cgroup version: 1 or 2.
	Version int `json:"cgroup_version"`
	// Limit is the memory limit that bounds the container, in bytes: the
	// smallest along its cgroup and the cgroups above it, else the host's
	// memory; LimitOf says whose (LimitContainer, LimitPod, LimitParent,
	// LimitAncestor, LimitHost) and LimitCgroup which cgroup ("" for the
	// host's). 0 when not known.
	Limit       int64  `json:"limit_bytes"`
	LimitOf     string `json:"limit_of"`
	LimitCgroup string `json:"limit_cgroup,omitempty"`
	// Usage is the cgroup's usage (v1 memory.usage_in_bytes, v2
	// memory.current), page cache included.
	Usage int64 `json:"usage_bytes"`
	// WorkingSet is Usage less the inactive file cache (memory.stat
	// inactive_file), which the kernel reclaims before it OOM-kills: what
	// kubectl top shows and the kubelet evicts by.
	WorkingSet int64 `json:"working_set_bytes"`
	// Shmem is the shared memory charged to the cgroup (memory.stat
	// shmem): tmpfs pages, /dev/shm's and others', that its processes
	// touched first.
	Shmem int64 `json:"shmem_bytes"`
	// OOMKills counts the processes the kernel OOM-killed in the cgroup
	// (v1 memory.oom_control, kernel ≥ 4.13; v2 memory.events oom_kill);
	// -1 when not known.
	OOMKills int64 `json:"oom_kills"`
	// ShmPercentOfLimit and ShmPercentOfWorkingSet are /dev/shm's used
	// bytes as a share of Limit and of WorkingSet, in percent; 0 where
	// /dev/shm is not a tmpfs of the container or its pod (the host's
	// /dev/shm, none).
	ShmPercentOfLimit      float64 `json:"shm_percent_of_limit"`
	ShmPercentOfWorkingSet float64 `json:"shm_percent_of_working_set"`
	// Err says what could not be read; the fields before it are as far as
	// known.
	Err string `json:"error,omitempty"`
}

// Cgroups reads the memory cgroups of a host's processes. One Cgroups
// keeps what it read of the cgroups above the containers (a pod's, the
// kubepods'), shared by many: use one per sample.
type Cgroups struct {
	// Proc is this process's procfs ("/proc"): /proc/<pid>/cgroup names a
	// process's cgroups relative to the reader's cgroup namespace, so
	// gpurun must run in the host's (a privileged pod does).
	Proc string
	// Root is the node's cgroup filesystem as this process reaches it
	// ("/sys/fs/cgroup", "/host/sys/fs/cgroup").
	Root string
	// HostMemory is the host's memory, the limit of a container no cgroup
	// limits; 0 unknown.
	HostMemory int64

	limits map[string]limitAt // by base and cgroup: the smallest limit at it and above
	buf    []byte             // read's
}

// limitAt is the smallest limit along a cgroup and the ones above it.
type limitAt struct {
	bytes  int64 // 0: none
	cgroup string
}

// cgroupInfo says where a process's memory cgroup is.
type cgroupInfo struct {
	version int
	path    string // in the hierarchy, cleaned ("/kubepods/…")
	base    string // the hierarchy's root as this process reaches it
}

// dir is the cgroup's directory as this process reaches it.
func (ci cgroupInfo) dir() string { return filepath.Join(ci.base, ci.path) }

// Read reads the memory cgroup of the process pid, a container's init;
// inPod says the container is a Kubernetes pod's (its parent cgroup is the
// pod's). Shares are left to Memory.Share.
func (g *Cgroups) Read(pid int, inPod bool) Memory {
	m := Memory{OOMKills: -1}
	ci, err := g.locate(pid)
	if err != nil {
		m.Err = err.Error()
		return m
	}
	m.Cgroup, m.Version = ci.path, ci.version
	if err := g.usage(ci, &m); err != nil {
		m.Err = err.Error()
		return m
	}
	g.limit(ci, inPod, &m)
	return m
}

// locate finds the memory cgroup of pid in /proc/<pid>/cgroup: the line
// of the v1 memory controller, else the v2 line.
func (g *Cgroups) locate(pid int) (cgroupInfo, error) {
	p := filepath.Join(g.Proc, strconv.Itoa(pid), "cgroup")
	data, err := g.read(p)
	if err != nil {
		return cgroupInfo{}, fmt.Errorf("memory cgroup: %w", err)
	}
	var v1, v2 []byte
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		hier, rest, ok1 := bytes.Cut(line, []byte{':'})
		ctrls, cg, ok2 := bytes.Cut(rest, []byte{':'})
		switch {
		case !ok1 || !ok2:
		case string(hier) == "0" && len(ctrls) == 0:
			v2 = cg
		case hasController(ctrls, "memory"):
			v1 = cg
		}
	}
	var ci cgroupInfo
	switch {
	case v1 != nil:
		ci = cgroupInfo{version: 1, path: string(v1), base: filepath.Join(g.Root, "memory")}
	case v2 != nil:
		ci = cgroupInfo{version: 2, path: string(v2), base: g.Root}
	default:
		return cgroupInfo{}, fmt.Errorf("memory cgroup: %s names no memory controller", p)
	}
	if ci.path == "/.." || strings.HasPrefix(ci.path, "/../") {
		return cgroupInfo{}, fmt.Errorf("memory cgroup: %s says %q: gpurun runs in a cgroup namespace of its own, from which the container's cgroup cannot be placed (run it in the host's: a privileged pod, docker run --cgroupns host)", p, ci.path)
	}
	ci.path = path.Clean("/" + ci.path)
	return ci, nil
}

func hasController(list []byte, name string) bool {
	for len(list) > 0 {
		var c []byte
		c, list, _ = bytes.Cut(list, []byte{','})
		if string(c) == name {
			return true
		}
	}
	return false
}

// cgroupFiles are the files of a memory cgroup read, of one version.
type cgroupFiles struct {
	limit, usage, oom, oomKey string
	// stat are the memory.stat keys read: first those of the inactive file
	// cache (v1's hierarchical total_* before the local one), then those
	// of shmem, nInactive of them.
	stat      []string
	nInactive int
}

// The files of each version (never changed).
var (
	filesV1 = cgroupFiles{limit: "memory.limit_in_bytes", usage: "memory.usage_in_bytes", oom: "memory.oom_control", oomKey: "oom_kill",
		stat: []string{"total_inactive_file", "inactive_file", "total_shmem", "shmem"}, nInactive: 2}
	filesV2 = cgroupFiles{limit: "memory.max", usage: "memory.current", oom: "memory.events", oomKey: "oom_kill",
		stat: []string{"inactive_file", "shmem"}, nInactive: 1}
)

func filesOf(version int) cgroupFiles {
	if version == 1 {
		return filesV1
	}
	return filesV2
}

// usage reads the cgroup's usage, memory.stat and OOM kill count.
func (g *Cgroups) usage(ci cgroupInfo, m *Memory) error {
	f := filesOf(ci.version)
	u, err := g.readInt(filepath.Join(ci.dir(), f.usage))
	if err != nil {
		return fmt.Errorf("memory cgroup %s: %w", ci.path, err)
	}
	m.Usage, m.WorkingSet = u, u
	vals, err := g.readKeyed(filepath.Join(ci.dir(), "memory.stat"), f.stat...)
	if err != nil {
		return fmt.Errorf("memory cgroup %s: %w", ci.path, err)
	}
	if v, ok := first(vals[:f.nInactive]); ok {
		m.WorkingSet = max(0, u-v)
	}
	m.Shmem, _ = first(vals[f.nInactive:])
	if oc, err := g.readKeyed(filepath.Join(ci.dir(), f.oom), f.oomKey); err == nil && oc[0] >= 0 {
		m.OOMKills = oc[0]
	}
	return nil
}

// limit finds the smallest limit along the cgroup and the ones above it,
// else the host's memory.
func (g *Cgroups) limit(ci cgroupInfo, inPod bool, m *Memory) {
	at := g.limitFrom(ci.base, ci.path, ci.version)
	if at.bytes <= 0 || g.HostMemory > 0 && at.bytes >= g.HostMemory {
		m.Limit, m.LimitOf = g.HostMemory, LimitHost
		return
	}
	m.Limit, m.LimitCgroup = at.bytes, at.cgroup
	switch parent := path.Dir(ci.path); at.cgroup {
	case ci.path:
		m.LimitOf = LimitContainer
	case parent:
		m.LimitOf = LimitParent
		if inPod {
			m.LimitOf = LimitPod
		}
	default:
		m.LimitOf = LimitAncestor
	}
}

// limitFrom returns the smallest limit of the cgroup cg (a hierarchy path,
// under base) and the ones above it, short of the root, which has none.
func (g *Cgroups) limitFrom(base, cg string, version int) limitAt {
	if cg == "/" || cg == "." {
		return limitAt{}
	}
	key := base + "\x00" + cg
	if at, ok := g.limits[key]; ok {
		return at
	}
	at := g.limitFrom(base, path.Dir(cg), version)
	// The nearest cgroup of the smallest limit names it: a container whose
	// limit is its pod's (a pod of one container) is limited by its own.
	if n, ok := g.readLimit(filepath.Join(base, cg, filesOf(version).limit)); ok && (at.bytes <= 0 || n <= at.bytes) {
		at = limitAt{bytes: n, cgroup: cg}
	}
	if g.limits == nil {
		g.limits = map[string]limitAt{}
	}
	g.limits[key] = at
	return at
}

// unlimited is where a v1 limit stops meaning one: the kernel writes
// PAGE_COUNTER_MAX pages (9223372036854771712 with 4 KiB pages) for none.
const unlimited = int64(1) << 62

// readLimit reads a memory limit file; ok is false for none ("max", the
// v1 maximum, a file that is not there).
func (g *Cgroups) readLimit(p string) (int64, bool) {
	data, err := g.read(p)
	if err != nil {
		return 0, false
	}
	n := parseUint(data)
	return n, n > 0 && n < unlimited
}

func (g *Cgroups) readInt(p string) (int64, error) {
	data, err := g.read(p)
	if err != nil {
		return 0, err
	}
	n := parseUint(data)
	if n < 0 {
		return 0, fmt.Errorf("%s: not a count: %q", p, bytes.TrimSpace(data))
	}
	return n, nil
}

// read reads a small file of the kernel's into g's buffer, valid until the
// next read: a sampler reads several for every container, so with as few
// system calls and allocations as it can.
func (g *Cgroups) read(p string) ([]byte, error) {
	if g.buf == nil {
		g.buf = make([]byte, 16<<10)
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(g.buf) {
			g.buf = append(g.buf, make([]byte, len(g.buf))...)
		}
		m, err := unix.Read(fd, g.buf[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: p, Err: err}
		case m == 0:
			return g.buf[:n], nil
		}
		n += m
	}
}

// readKeyed reads the values of keys from a file of "key value" lines
// (memory.stat, memory.events, memory.oom_control), -1 for a key not
// there. It allocates little: a sampler reads it for every container.
func (g *Cgroups) readKeyed(p string, keys ...string) ([]int64, error) {
	data, err := g.read(p)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(keys))
	for i := range out {
		out[i] = -1
	}
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			continue
		}
		for i, key := range keys {
			if string(k) == key {
				out[i] = parseUint(v)
			}
		}
	}
	return out, nil
}

// parseUint reads a decimal count, -1 when it is not one (or does not fit
// an int64).
func parseUint(b []byte) int64 {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return -1
	}
	var n int64
	for _, c := range b {
		d := int64(c - '0')
		if c < '0' || c > '9' || n > (math.MaxInt64-d)/10 {
			return -1
		}
		n = n*10 + d
	}
	return n
}

// first returns the first value that is there (not -1).
func first(vals []int64) (int64, bool) {
	for _, v := range vals {
		if v >= 0 {
			return v, true
		}
	}
	return 0, false
}

// Share sets the shares of the limit and of the working set that
// /dev/shm's used bytes are, for a container whose /dev/shm is a tmpfs of
// its own or its pod's (shmKnown); the host's /dev/shm is not the
// container's to count.
func (m *Memory) Share(shmUsed int64, shmKnown bool) {
	m.ShmPercentOfLimit, m.ShmPercentOfWorkingSet = 0, 0
	if !shmKnown || m.Err != "" {
		return
	}
	if m.Limit > 0 {
		m.ShmPercentOfLimit = float64(shmUsed) * 100 / float64(m.Limit)
	}
	if m.WorkingSet > 0 {
		m.ShmPercentOfWorkingSet = float64(shmUsed) * 100 / float64(m.WorkingSet)
	}
}

// Limited says the limit is a cgroup's that OOM-kills the container when
// reached: its own or its pod's.
func (m *Memory) Limited() bool {
	return m != nil && m.Err == "" && m.Limit > 0 && (m.LimitOf == LimitContainer || m.LimitOf == LimitPod)
}

// LimitWords says whose limit it is, for people, whose being "its" or
// "the": "its 16GiB memory limit", "the pod's 16GiB memory limit", "the
// 16GiB memory limit of cgroup /kubepods", "the host's 64GiB of memory".
func (m *Memory) LimitWords(whose string) string {
	size := human(m.Limit)
	switch m.LimitOf {
	case LimitContainer:
		return whose + " " + size + " memory limit"
	case LimitPod:
		return whose + " pod's " + size + " memory limit"
	case LimitParent, LimitAncestor:
		return "the " + size + " memory limit of cgroup " + m.LimitCgroup
	}
	return "the host's " + size + " of memory"
}

// ownShm says the container's /dev/shm is a tmpfs of its own or its pod's
// (or IPC group's), read: its pages count against the memory of the
// cgroups that wrote them, the container's or its pod's.
func (c *Container) ownShm() bool {
	return c.Shm.Tmpfs && !c.Shm.HostIPC && c.Shm.Device != ""
}

// NearMemoryLimit says the container's working set is at least
// NearMemoryLimit of its own or its pod's limit while its /dev/shm holds at
// least ShmShareOfLimit of that limit: the memory pressure that /dev/shm
// is a large part of.
func (c *Container) NearMemoryLimit() bool {
	return c.ownShm() && c.Memory.NearLimitWith(c.Shm.Used)
}

// NearLimitWith says the working set is at least NearMemoryLimit of the
// container's own or its pod's limit while shmUsed, the bytes in its
// /dev/shm, are at least ShmShareOfLimit of it.
func (m *Memory) NearLimitWith(shmUsed int64) bool {
	if !m.Limited() {
		return false
	}
	lim := float64(m.Limit)
	return float64(m.WorkingSet) >= NearMemoryLimit*lim && float64(shmUsed) >= ShmShareOfLimit*lim
}

// BelowMemoryRearm says the container's working set is below MemoryRearm
// of its limit: a near-limit episode is over. False where not known.
func (c *Container) BelowMemoryRearm() bool {
	m := c.Memory
	return m.Limited() && float64(m.WorkingSet) < MemoryRearm*float64(m.Limit)
}

// ShmOverQuarter says /dev/shm holds at least ShmShareOfLimit of the
// container's limit.
func (c *Container) ShmOverQuarter() bool {
	m := c.Memory
	return m != nil && m.Err == "" && m.Limit > 0 && c.ownShm() && float64(c.Shm.Used) >= ShmShareOfLimit*float64(m.Limit)
}
