package shmstats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/engine/dirs"
	"github.com/gpurun/gpurun/engine/shmsweep"
	"github.com/gpurun/gpurun/engine/sysinfo"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// DefaultContainerdStates are the containerd state dirs looked at when
// Options.Containerd is nil: containerd's own (Kubernetes nodes, and
// dockerd ≥ 23 or a dockerd told --containerd), k3s' and RKE2's, and the
// one dockerd starts for itself under its exec-root.
var DefaultContainerdStates = []string{
	"/run/containerd",
	"/run/k3s/containerd",
	"/var/run/docker/containerd/daemon",
}

// DefaultPodmanRoots are Podman's storage roots looked at when
// Options.Podman is nil: root's graph root and run root.
var DefaultPodmanRoots = []string{
	"/var/lib/containers/storage",
	"/run/containers/storage",
}

// The CRI annotations containerd writes into a container's spec that name
// its pod (those that say where it sits are oci.CRIPod's).
const (
	annotationSandboxName      = "io.kubernetes.cri.sandbox-name"
	annotationSandboxNamespace = "io.kubernetes.cri.sandbox-namespace"
	annotationSandboxUID       = "io.kubernetes.cri.sandbox-uid"
	annotationContainerName    = "io.kubernetes.cri.container-name"
)

// tmpfsMagic is statfs's f_type of a tmpfs.
const tmpfsMagic = 0x01021994

// collector holds one Collect's inputs.
type collector struct {
	o     Options
	proc  string // procfs, "/proc"
	pol   *policy.Policy
	facts oci.Facts
	// hostShm is the device number of the host's own /dev/shm, 0 unknown.
	hostShm uint64
	// specsUsed are the config.json paths this Collect read (Options.Specs
	// keeps only those).
	specsUsed map[string]bool
	// cgroups reads the containers' memory cgroups.
	cgroups *Cgroups
}

// found is a container as an engine's files describe it, before its
// /dev/shm is read.
type found struct {
	c    Container
	spec *specs.Spec
	// owner is the id of the tmpfs's owner for PeakKey ("" = the container).
	owner string
	// made is the size the engine made the container's /dev/shm at, as the
	// engine records it (Docker's HostConfig.ShmSize, of the IPC donor for
	// a peer); 0 when the engine records none (see engineMade).
	made int64
}

func newCollector(o Options) *collector {
	return &collector{o: o, proc: cmp.Or(o.Proc, "/proc"), specsUsed: map[string]bool{}}
}

// loadSpec returns the spec in the config.json at path, through
// Options.Specs.
func (c *collector) loadSpec(path string) (*specs.Spec, error) {
	c.specsUsed[path] = true
	return c.o.Specs.load(path)
}

// host returns a node path as this process reaches it.
func (c *collector) host(p string) string {
	if c.o.HostRoot == "" || c.o.HostRoot == "/" {
		return p
	}
	return filepath.Join(c.o.HostRoot, p)
}

func (c *collector) collect(ctx context.Context) ([]Container, error) {
	var errs []error
	c.pol = c.o.Policy
	if c.pol == nil {
		p, err := policy.Load(c.host(policy.DefaultConfigPath), false)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy: %w (using the defaults)", err))
			p = policy.Default()
		}
		c.pol = p
	}
	facts, err := sysinfo.Facts()
	if err != nil {
		errs = append(errs, fmt.Errorf("host facts: %w", err))
	}
	facts.TmpfsSize = func(p string) (int64, error) { return sysinfo.TmpfsSize(c.host(p)) }
	c.facts = facts
	c.cgroups = &Cgroups{Proc: c.proc, Root: cmp.Or(c.o.Cgroup, c.host("/sys/fs/cgroup")), HostMemory: facts.HostMemory}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(c.proc, "1", "root", "dev", "shm"), &st); err == nil {
		c.hostShm = st.Dev
	} else if err := unix.Stat(c.host("/dev/shm"), &st); err == nil {
		c.hostShm = st.Dev
	}

	states := c.o.Containerd
	if states == nil {
		states = DefaultContainerdStates
	}
	var all []found
	for _, s := range states {
		fs, err := c.containerd(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("containerd %s: %w", s, err))
		}
		all = append(all, fs...)
	}
	all, err = c.docker(ctx, all)
	if err != nil {
		errs = append(errs, fmt.Errorf("docker: %w", err))
	}
	roots := c.o.Podman
	if roots == nil {
		roots = DefaultPodmanRoots
	}
	pm, err := c.podman(roots)
	if err != nil {
		errs = append(errs, fmt.Errorf("podman: %w", err))
	}
	all = append(all, pm...)

	out := c.measure(all)
	c.o.Specs.keep(c.specsUsed)
	return out, errors.Join(errs...)
}

// measured is a container whose /dev/shm was read, and the owner of its
// tmpfs for PeakKey ("" = the container).
type measured struct {
	c     Container
	owner string
}

// measure reads each container's /dev/shm, groups them by tmpfs, decides,
// records peaks, finds orphans and suggests.
func (c *collector) measure(all []found) []Container {
	ms := make([]measured, 0, len(all))
	for _, f := range all {
		ct := f.c
		c.decide(&ct, f)
		c.readShm(&ct)
		c.readMemory(&ct)
		ct.Decision.InEffect = inEffect(ct)
		ms = append(ms, measured{c: ct, owner: f.owner})
	}
	out := c.group(ms)
	if c.o.Orphans {
		c.orphans(out)
	}
	c.swept(out)
	for i := range out {
		out[i].Suggestion = Suggest(&out[i], c.pol)
	}
	slices.SortFunc(out, func(a, b Container) int {
		return cmp.Or(cmp.Compare(a.Engine, b.Engine), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// group fills SharedWith (the containers on the same tmpfs: one device
// number) and Peak (one peak a tmpfs, keyed by the owner the engine names
// for it — the pod's sandbox, the IPC donor — else the smallest id of the
// group).
func (c *collector) group(ms []measured) []Container {
	out := make([]Container, len(ms))
	byDev := map[string][]int{}
	for i, m := range ms {
		out[i] = m.c
		if m.c.Shm.Device != "" && !m.c.Shm.HostIPC {
			byDev[m.c.Shm.Device] = append(byDev[m.c.Shm.Device], i)
		}
	}
	for dev, idx := range byDev {
		owner := ""
		for _, i := range idx {
			for _, j := range idx {
				if i != j {
					out[i].SharedWith = append(out[i].SharedWith, out[j].ID)
				}
			}
			slices.Sort(out[i].SharedWith)
			if o := ms[i].owner; o != "" && o != out[i].ID {
				owner = o
			}
		}
		if owner == "" {
			owner = out[idx[0]].ID
			for _, i := range idx {
				owner = min(owner, out[i].ID)
			}
		}
		peak := out[idx[0]].Shm.Used
		if c.o.Peaks != nil {
			peak = c.o.Peaks.Observe(PeakKey(owner, dev), peak)
		}
		for _, i := range idx {
			out[i].Shm.Peak = max(peak, out[i].Shm.Used)
		}
	}
	for i := range out {
		out[i].Shm.Peak = max(out[i].Shm.Peak, out[i].Shm.Used)
	}
	return out
}

// decide fills the decision, GPU and the spec's view of /dev/shm. It
// decides for the container as its engine made it (asMade), not as gpurun
// left it: a tmpfs gpurun grew is not taken for a user's explicit size.
func (c *collector) decide(ct *Container, f found) {
	if f.spec == nil {
		return
	}
	s, facts := asMade(f.spec, f.made, c.facts)
	pl := oci.Decide(oci.Input{Container: oci.FromSpec(s), Policy: c.pol, Facts: facts})
	ct.GPU = pl.GPU
	ct.Decision = Decision{Action: string(pl.Action), Applies: pl.Applies, Size: pl.Size, Target: pl.Target, Why: pl.Why, Reason: pl.Reason, GPUs: pl.GPUs}
	ct.Shm.Kind = string(pl.Shm.Kind)
	if pl.Shm.Kind == oci.ShmEngine {
		ct.Shm.Source = pl.Shm.Source
	}
}

// asMade returns the spec and facts to decide a container as its engine
// made it, before any gpurun front door acted on it: gpurun-runtime
// rewrites a private tmpfs's size in the bundle's config.json, and
// gpurun-runtime, the hook and the NRI plugin grow an engine-made host tmpfs
// in place, so the size found now may be gpurun's own. The size the engine
// made is made when the engine records it (Docker), else the one the engine
// always uses: containerd's CRI makes every pod sandbox's /dev/shm 64 MiB.
// Elsewhere (a private tmpfs of nerdctl, ctr or Podman, Podman's and
// CRI-O's pod shm) the size found now is taken as made.
func asMade(s *specs.Spec, made int64, facts oci.Facts) (*specs.Spec, oci.Facts) {
	sh := oci.ClassifyShm(s, 0)
	if made <= 0 && sh.Kind == oci.ShmEngine && sh.Engine == oci.EngineContainerdCRI {
		made = policy.EngineDefaultShm
	}
	if made <= 0 {
		return s, facts
	}
	switch sh.Kind {
	case oci.ShmEngine:
		facts.TmpfsSize = func(string) (int64, error) { return made, nil }
	case oci.ShmPrivate:
		if sh.Size != made {
			c := *s
			c.Mounts = slices.Clone(s.Mounts)
			c.Mounts[sh.Index].Options = oci.WithSizeOption(s.Mounts[sh.Index].Options, made, sh.SizeInKiB)
			s = &c
		}
	}
	return s, facts
}

// inEffect reports whether a container's /dev/shm, as read, is what its
// plan gives: at least the plan's size, or the host's for ipc-host.
func inEffect(ct Container) bool {
	d := ct.Decision
	switch {
	case d.Action == "":
		return false
	case d.Action == string(oci.ActionIPCHost):
		return ct.Shm.HostIPC
	case ct.Shm.Device == "":
		return false // not read
	case d.Size <= 0:
		return true // none on a size not known (the host's)
	}
	return ct.Shm.Size >= d.Size
}

// readShm reads the container's /dev/shm through its init process's root.
func (c *collector) readShm(ct *Container) {
	ct.Shm.Orphaned = -1
	if ct.PID <= 0 {
		ct.Err = cmp.Or(ct.Err, "no process")
		return
	}
	p := filepath.Join(c.proc, strconv.Itoa(ct.PID), "root", "dev", "shm")
	var fs unix.Statfs_t
	if err := unix.Statfs(p, &fs); err != nil {
		ct.Err = cmp.Or(ct.Err, fmt.Sprintf("statfs %s: %v", p, err))
		return
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		ct.Err = cmp.Or(ct.Err, fmt.Sprintf("stat %s: %v", p, err))
		return
	}
	bs := int64(fs.Bsize)
	ct.Shm.Tmpfs = int64(fs.Type) == tmpfsMagic
	ct.Shm.Size = int64(fs.Blocks) * bs
	ct.Shm.Used = int64(fs.Blocks-fs.Bfree) * bs
	ct.Shm.Device = fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	if c.hostShm != 0 && st.Dev == c.hostShm {
		ct.Shm.HostIPC = true
		ct.Shm.Kind = KindHost
	}
	if ct.Shm.Size > 0 {
		ct.Shm.Percent = float64(ct.Shm.Used) * 100 / float64(ct.Shm.Size)
	}
}

// readMemory reads the container's memory cgroup through its init
// process, and /dev/shm's share of it.
func (c *collector) readMemory(ct *Container) {
	if ct.PID <= 0 {
		return
	}
	m := c.cgroups.Read(ct.PID, ct.Pod != nil)
	m.Share(ct.Shm.Used, ct.ownShm())
	ct.Memory = &m
}

// containerd finds the running tasks under one containerd state dir.
func (c *collector) containerd(state string) ([]found, error) {
	dir := c.host(filepath.Join(state, dirs.ContainerdTaskDir))
	nss, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []found
	var errs []error
	for _, ns := range nss {
		ids, err := os.ReadDir(filepath.Join(dir, ns.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range ids {
			bundle := filepath.Join(dir, ns.Name(), id.Name())
			pid, ok := c.livePID(filepath.Join(bundle, "init.pid"))
			if !ok {
				continue // created, stopped or gone
			}
			spec, err := c.loadSpec(filepath.Join(bundle, "config.json"))
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // gone meanwhile
				}
				errs = append(errs, err)
				continue
			}
			if oci.CRIPod(spec).Sandbox {
				continue // a pod's sandbox (pause): its pod's containers show its tmpfs
			}
			f := fromSpec(spec)
			f.c.Engine, f.c.Namespace, f.c.ID, f.c.PID = EngineContainerd, ns.Name(), id.Name(), pid
			out = append(out, f)
		}
	}
	return out, errors.Join(errs...)
}

// fromSpec reads what a runtime spec says about its container: its pod and
// the owner of its tmpfs.
func fromSpec(s *specs.Spec) found {
	f := found{spec: s}
	pod := oci.CRIPod(s)
	a := s.Annotations
	if pod.Engine != "" && a[annotationSandboxName] != "" {
		f.c.Pod = &Pod{Namespace: a[annotationSandboxNamespace], Name: a[annotationSandboxName], UID: a[annotationSandboxUID],
			Container: a[annotationContainerName], SandboxID: pod.SandboxID}
		f.c.Name = a[annotationContainerName]
		f.owner = pod.SandboxID
	}
	if sh := oci.ClassifyShm(s, 0); sh.Kind == oci.ShmEngine && sh.OwnerID != "" {
		f.owner = sh.OwnerID
	}
	return f
}

// livePID reads a pid file and reports whether that process lives.
func (c *collector) livePID(path string) (int, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if _, err := os.Stat(filepath.Join(c.proc, strconv.Itoa(pid))); err != nil {
		return 0, false
	}
	return pid, true
}

// swept fills Shm.SweptBytes and SweptFiles of each container in a pod
// from the restart sweep's records of its sandbox (one read per pod).
func (c *collector) swept(out []Container) {
	o := shmsweep.Options{StateDir: c.host(cmp.Or(c.o.SweepState, shmsweep.DefaultStateDir))}
	bySandbox := map[string]shmsweep.Totals{}
	for i := range out {
		p := out[i].Pod
		if p == nil || p.SandboxID == "" {
			continue
		}
		t, ok := bySandbox[p.SandboxID]
		if !ok {
			t, _ = shmsweep.Swept(o, p.SandboxID) // a record not read: counted as none
			bySandbox[p.SandboxID] = t
		}
		out[i].Shm.SweptBytes, out[i].Shm.SweptFiles = t.Bytes, t.Files
	}
}
