// Package sysinfo reads the few facts about the host that the planner needs:
// its total memory and the size of a tmpfs.
package sysinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MemTotal returns the host's total memory in bytes from /proc/meminfo.
func MemTotal() (int64, error) {
	return memTotal("/proc/meminfo")
}

func memTotal(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read host memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			break
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read host memory: %s: MemTotal %q: %w", path, f[0], err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("read host memory: %s has no MemTotal line", path)
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
