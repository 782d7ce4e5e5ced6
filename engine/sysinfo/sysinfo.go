// Package sysinfo reads the few facts about the host that the planner needs:
// its total memory, its GPU count and the size of a tmpfs. Facts is the one
// provider every front door that runs on the host uses, so that none of
// them plans with a fact left out.
package sysinfo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/oci"
)

// Facts returns this host's facts for oci.Decide: its memory, its GPU
// count from the device nodes under /dev, and the tmpfs size reader. What
// it cannot learn stays unknown (0), and the error says why; the facts it
// did learn are returned either way.
func Facts() (oci.Facts, error) {
	f := oci.Facts{TmpfsSize: TmpfsSize}
	var errs []error
	var err error
	if f.HostMemory, err = MemTotal(); err != nil {
		errs = append(errs, err)
	}
	if f.HostGPUs, err = GPUCount("/dev"); err != nil {
		errs = append(errs, err)
	}
	return f, errors.Join(errs...)
}

// GPUCount returns how many GPUs the device nodes under dev (normally
// /dev) show, counted as oci.ClassifyDevice counts a container's: per
// family (NVIDIA nodes, render nodes, accel nodes), the largest. A missing
// directory counts nothing; another read error is returned.
func GPUCount(dev string) (int, error) {
	counts := map[string]int{}
	buf := make([]byte, 8<<10)
	for _, dir := range oci.DeviceDirs() {
		sub, _ := filepath.Rel("/dev", dir)
		names, err := deviceNodes(filepath.Join(dev, sub), buf)
		if err != nil {
			return 0, fmt.Errorf("count GPUs: %w", err)
		}
		for _, name := range names {
			// Classify by the path the node has in a container's /dev.
			if d := oci.ClassifyDevice(filepath.Join(dir, name)); d.GPU {
				counts[d.Family] += d.Count
			}
		}
	}
	n := 0
	for _, c := range counts {
		n = max(n, c)
	}
	return n, nil
}

// deviceNodes returns the names in dir that oci.MayBeDeviceNode lets through and
// that are device nodes, in the order the kernel lists them; a missing dir
// lists none. It reads the
// directory with getdents(2) into buf and stats only those names: os.ReadDir
// made an entry of each of /dev's hundred-odd names, and its file the
// poller's set-up, on the path of every container start.
func deviceNodes(dir string, buf []byte) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "getdents", Path: dir, Err: err}
		}
		if n == 0 {
			return names, nil
		}
		var found []string
		_, _, found = unix.ParseDirent(buf[:n], -1, nil)
		for _, name := range found {
			if !oci.MayBeDeviceNode(name) {
				continue
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue // gone since the listing
			}
			if t := st.Mode & unix.S_IFMT; t == unix.S_IFCHR || t == unix.S_IFBLK {
				names = append(names, name)
			}
		}
	}
}

// MemTotal returns the host's total memory in bytes: the kernel's
// totalram from sysinfo(2), the number /proc/meminfo prints as MemTotal,
// read with one system call instead of rendering and parsing that file (a
// cold gpurun-runtime spent ~50 µs on it). Unlike /proc/meminfo, which
// LXCFS rewrites inside a container, it is the machine's.
func MemTotal() (int64, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0, fmt.Errorf("read host memory: sysinfo: %w", err)
	}
	return int64(si.Totalram) * int64(si.Unit), nil
}

// TmpfsSize returns the size of the tmpfs mounted at path, or an error when
// path is not on a tmpfs.
func TmpfsSize(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		return 0, fmt.Errorf("statfs %s: not a tmpfs (type %#x)", path, st.Type)
	}
	return int64(st.Blocks) * int64(st.Bsize), nil
}
