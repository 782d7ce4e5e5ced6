package shmstats

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/engine/shmsweep"
)

// maxOrphanNames is how many orphaned files a container lists by name.
const maxOrphanNames = 8

// fileID is a file's identity: its device and inode.
type fileID struct{ dev, ino uint64 }

// orphans fills Shm.Orphaned (and OrphanedFiles) for every container on a
// tmpfs of its own or of its group (not the host's): the allocated bytes of
// the regular files in it that no process has open or mapped. The files
// and their holders are engine/shmsweep's (Walk, Held): the restart sweep
// asks the same question of a pod's /dev/shm.
func (c *collector) orphans(out []Container) {
	// One walk per tmpfs, through one of its containers.
	files := map[uint64]map[uint64]shmsweep.File{}
	for _, ct := range out {
		if ct.Shm.Device == "" || ct.Shm.HostIPC || !ct.Shm.Tmpfs {
			continue
		}
		dev, ok := parseDevice(ct.Shm.Device)
		if !ok {
			continue
		}
		if _, done := files[dev]; done {
			continue
		}
		walked, m, err := shmsweep.Walk(filepath.Join(c.proc, strconv.Itoa(ct.PID), "root", "dev", "shm"))
		if err != nil || walked != dev {
			continue // the container went away meanwhile: not computed
		}
		files[dev] = m
	}
	if len(files) == 0 {
		return
	}
	// A process that cannot be read holds nothing this can tell: what
	// the others hold is counted (an estimate, as stats says).
	used, _ := shmsweep.Held(c.proc, files)
	for i := range out {
		dev, ok := parseDevice(out[i].Shm.Device)
		m, walked := files[dev]
		if !ok || !walked || out[i].Shm.HostIPC {
			continue
		}
		var n int64
		var names []string
		for ino, f := range m {
			if used[shmsweep.ID{Dev: dev, Ino: ino}] {
				continue
			}
			n += f.Bytes
			names = append(names, f.Name)
		}
		slices.Sort(names)
		if len(names) > maxOrphanNames {
			names = append(names[:maxOrphanNames], "…")
		}
		out[i].Shm.Orphaned, out[i].Shm.OrphanedFiles = n, names
	}
}

// parseDevice parses Shm.Device ("major:minor", decimal).
func parseDevice(s string) (uint64, bool) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return 0, false
	}
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return unix.Mkdev(uint32(a), uint32(b)), true
}
