package shmstats

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxOrphanNames is how many orphaned files a container lists by name.
const maxOrphanNames = 8

// fileID is a file's identity: its device and inode.
type fileID struct{ dev, ino uint64 }

// shmFile is a regular file in a tmpfs.
type shmFile struct {
	name  string // its path inside /dev/shm
	bytes int64  // allocated: st_blocks × 512
}

// orphans fills Shm.Orphaned (and OrphanedFiles) for every container on a
// tmpfs of its own or of its group (not the host's): the allocated bytes of
// the regular files in it that no process has open (/proc/*/fd) or mapped
// (/proc/*/maps, which name the device and inode of every mapped file).
func (c *collector) orphans(out []Container) {
	// One walk per tmpfs, through one of its containers.
	files := map[uint64]map[uint64]shmFile{}
	via := map[uint64]int{}
	for i, ct := range out {
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
		m, err := walkShm(filepath.Join(c.proc, strconv.Itoa(ct.PID), "root", "dev", "shm"), dev)
		if err != nil {
			continue // the container went away meanwhile: not computed
		}
		files[dev] = m
		via[dev] = i
	}
	if len(files) == 0 {
		return
	}
	used := openFiles(c.proc, files)
	for i := range out {
		dev, ok := parseDevice(out[i].Shm.Device)
		m, walked := files[dev]
		if !ok || !walked || out[i].Shm.HostIPC {
			continue
		}
		var n int64
		var names []string
		for ino, f := range m {
			if used[fileID{dev, ino}] {
				continue
			}
			n += f.bytes
			names = append(names, f.name)
		}
		slices.Sort(names)
		if len(names) > maxOrphanNames {
			names = append(names[:maxOrphanNames], "…")
		}
		out[i].Shm.Orphaned, out[i].Shm.OrphanedFiles = n, names
	}
}

// walkShm returns the regular files of the tmpfs at dir (device dev) by
// inode, not descending into other filesystems mounted below it.
func walkShm(dir string, dev uint64) (map[uint64]shmFile, error) {
	m := map[uint64]shmFile{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // gone meanwhile
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		if st.Dev != dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			rel, _ := filepath.Rel(dir, p)
			m[st.Ino] = shmFile{name: "/dev/shm/" + rel, bytes: st.Blocks * 512}
		}
		return nil
	})
	return m, err
}

// openFiles returns which of the files (by device, then inode) some
// process under proc has open or mapped.
func openFiles(proc string, files map[uint64]map[uint64]shmFile) map[fileID]bool {
	used := map[fileID]bool{}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return used
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		pdir := filepath.Join(proc, e.Name())
		if fds, err := os.ReadDir(filepath.Join(pdir, "fd")); err == nil {
			for _, fd := range fds {
				var st unix.Stat_t
				if unix.Stat(filepath.Join(pdir, "fd", fd.Name()), &st) != nil {
					continue
				}
				if m, ok := files[st.Dev]; ok {
					if _, ok := m[st.Ino]; ok {
						used[fileID{st.Dev, st.Ino}] = true
					}
				}
			}
		}
		mapped(filepath.Join(pdir, "maps"), files, used)
	}
	return used
}

// mapped marks the files of a /proc/<pid>/maps ("addr perms offset
// maj:min inode path", the device in hexadecimal) that are among files.
func mapped(path string, files map[uint64]map[uint64]shmFile, used map[fileID]bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[4] == "0" {
			continue
		}
		maj, min, ok := strings.Cut(fields[3], ":")
		if !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(maj, 16, 32)
		mi, err2 := strconv.ParseUint(min, 16, 32)
		ino, err3 := strconv.ParseUint(fields[4], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		dev := unix.Mkdev(uint32(ma), uint32(mi))
		if m, ok := files[dev]; ok {
			if _, ok := m[ino]; ok {
				used[fileID{dev, ino}] = true
			}
		}
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
