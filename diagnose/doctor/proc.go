package doctor

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// The inode numbers of the initial (host) namespaces are fixed by the
// kernel (include/linux/proc_ns.h): a process whose PID or IPC namespace
// has another one is in a namespace of its own.
const (
	initialIPCNamespace = 0xEFFFFFFF
	initialPIDNamespace = 0xEFFFFFFC
)

// namespaceInode reads /proc/<pid>/ns/<kind> ("ipc:[4026531839]").
func (s *System) namespaceInode(pid, kind string) (uint64, error) {
	link, err := os.Readlink(s.path("/proc/" + pid + "/ns/" + kind))
	if err != nil {
		return 0, err
	}
	inner, ok := strings.CutPrefix(link, kind+":[")
	if !ok || !strings.HasSuffix(inner, "]") {
		return 0, fmt.Errorf("namespace link %q: unexpected form", link)
	}
	return strconv.ParseUint(strings.TrimSuffix(inner, "]"), 10, 64)
}

// mounts reads /proc/self/mountinfo.
func (s *System) mounts() ([]*mountinfo.Info, error) {
	p := s.path("/proc/self/mountinfo")
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	ms, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		return nil, fmt.Errorf("read mount table %s: %w", p, err)
	}
	return ms, nil
}

// lastMountAt returns the mount that is visible at mountpoint (the last one
// stacked there), or nil.
func lastMountAt(ms []*mountinfo.Info, mountpoint string) *mountinfo.Info {
	var found *mountinfo.Info
	for _, m := range ms {
		if m.Mountpoint == mountpoint {
			found = m
		}
	}
	return found
}

// hasOption reports whether a comma-separated option list holds opt.
func hasOption(list, opt string) bool {
	return slices.Contains(strings.Split(list, ","), opt)
}

// cgroupLine is one line of /proc/self/cgroup.
type cgroupLine struct {
	controllers []string // empty for the cgroup v2 line
	path        string
}

func (s *System) cgroupLines() ([]cgroupLine, error) {
	data, err := s.readFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read cgroup: %w", err)
	}
	var out []cgroupLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		var ctrls []string
		if f[1] != "" {
			ctrls = strings.Split(f[1], ",")
		}
		out = append(out, cgroupLine{controllers: ctrls, path: f[2]})
	}
	return out, nil
}

// cgroupDirs returns the directories of the cgroup of this process for a
// v1 controller (or, with controller "", the v2 hierarchy), from the leaf up
// to the top of the visible hierarchy: an effective limit is the smallest
// along that chain. Inside a container the hierarchy is usually mounted
// at the container's own cgroup, so the chain is that one directory.
func cgroupDirs(lines []cgroupLine, ms []*mountinfo.Info, controller string) []string {
	var cgPath string
	found := false
	for _, l := range lines {
		if controller == "" && len(l.controllers) == 0 || controller != "" && slices.Contains(l.controllers, controller) {
			cgPath, found = l.path, true
			break
		}
	}
	if !found {
		return nil
	}
	var mnt *mountinfo.Info
	for _, m := range ms {
		switch {
		case controller == "" && m.FSType == "cgroup2":
			mnt = m
		case controller != "" && m.FSType == "cgroup" && hasOption(m.VFSOptions, controller):
			mnt = m
		}
	}
	if mnt == nil {
		return nil
	}
	rel := "/"
	if r, ok := strings.CutPrefix(cgPath, mnt.Root); ok && (mnt.Root == "/" || r == "" || strings.HasPrefix(r, "/")) {
		rel = path.Clean("/" + r)
	}
	var dirs []string
	for {
		dirs = append(dirs, path.Join(mnt.Mountpoint, rel))
		if rel == "/" {
			break
		}
		rel = path.Dir(rel)
	}
	return dirs
}

// noLimit is the smallest value taken as "no limit" in a cgroup v1 file
// (the kernel writes PAGE_COUNTER_MAX pages, just under 2^63 bytes).
const noLimit = int64(1) << 62

// Cgroup is what this process's cgroups say about its resources.
type Cgroup struct {
	// Version is 1 or 2: the hierarchy the memory controller is in; 0 when
	// none was found.
	Version int
	// MemoryLimit is the smallest memory limit along the cgroup's visible
	// chain, in bytes; 0 for none.
	MemoryLimit int64
	// LimitFile is the file MemoryLimit came from.
	LimitFile string
	// CPUQuota is the CPU quota in CPUs (1.5 = 150 ms per 100 ms); 0 for none.
	CPUQuota float64
}

// cgroup reads the memory limit and the CPU quota of this process.
func (s *System) cgroup(ms []*mountinfo.Info) (Cgroup, error) {
	lines, err := s.cgroupLines()
	if err != nil {
		return Cgroup{}, err
	}
	var cg Cgroup
	readLimit := func(dirs []string, file string) {
		for _, d := range dirs {
			data, err := s.readFile(path.Join(d, file))
			if err != nil {
				continue
			}
			v := strings.TrimSpace(string(data))
			if v == "max" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 || n >= noLimit {
				continue
			}
			if cg.MemoryLimit == 0 || n < cg.MemoryLimit {
				cg.MemoryLimit, cg.LimitFile = n, path.Join(d, file)
			}
		}
	}
	if dirs := cgroupDirs(lines, ms, "memory"); len(dirs) > 0 {
		cg.Version = 1
		readLimit(dirs, "memory.limit_in_bytes")
	} else if dirs := cgroupDirs(lines, ms, ""); len(dirs) > 0 {
		cg.Version = 2
		readLimit(dirs, "memory.max")
	}
	if dirs := cgroupDirs(lines, ms, "cpu"); len(dirs) > 0 {
		q, err1 := s.readFile(path.Join(dirs[0], "cpu.cfs_quota_us"))
		p, err2 := s.readFile(path.Join(dirs[0], "cpu.cfs_period_us"))
		if err1 == nil && err2 == nil {
			cg.CPUQuota = quota(strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
		}
	} else if dirs := cgroupDirs(lines, ms, ""); len(dirs) > 0 {
		if data, err := s.readFile(path.Join(dirs[0], "cpu.max")); err == nil {
			if f := strings.Fields(string(data)); len(f) == 2 {
				cg.CPUQuota = quota(f[0], f[1])
			}
		}
	}
	return cg, nil
}

// quota turns a CFS quota and period (microseconds; quota "-1" or "max"
// for none) into CPUs.
func quota(q, p string) float64 {
	qn, err1 := strconv.ParseFloat(q, 64)
	pn, err2 := strconv.ParseFloat(p, 64)
	if err1 != nil || err2 != nil || qn <= 0 || pn <= 0 {
		return 0
	}
	return math.Round(qn/pn*100) / 100
}
