//go:build linux

package shmprobe

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// noLimit is what cgroup v1 reports for an unlimited memory cgroup (the
// largest page-aligned int64); anything this large means no limit.
const noLimit = int64(1) << 62

// memoryHeadroom returns how much more memory the memory cgroup of this
// process (and every ancestor that the cgroup mount shows) lets it use:
// the limit less the working set (usage less inactive file cache, which the
// kernel can reclaim), the smallest over the levels. ok is false when no
// level has a limit, or the cgroup files cannot be read. procRoot and
// sysRoot are "/proc" and "/sys" except in tests.
func memoryHeadroom(procRoot, sysRoot string) (headroom int64, ok bool) {
	data, err := os.ReadFile(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return 0, false
	}
	headroom = -1
	consider := func(h int64) {
		if headroom < 0 || h < headroom {
			headroom = h
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		id, rest, _ := strings.Cut(sc.Text(), ":")
		controllers, path, _ := strings.Cut(rest, ":")
		switch {
		case id == "0" && controllers == "": // cgroup v2
			root := filepath.Join(sysRoot, "fs", "cgroup")
			for _, dir := range cgroupLevels(root, path) {
				limit, err := readCgroupInt(filepath.Join(dir, "memory.max"))
				if err != nil || limit >= noLimit {
					continue
				}
				usage, err := readCgroupInt(filepath.Join(dir, "memory.current"))
				if err != nil {
					continue
				}
				consider(limit - workingSet(usage, filepath.Join(dir, "memory.stat"), "inactive_file"))
			}
		case hasController(controllers, "memory"): // cgroup v1
			root := filepath.Join(sysRoot, "fs", "cgroup", "memory")
			for _, dir := range cgroupLevels(root, path) {
				limit, err := readCgroupInt(filepath.Join(dir, "memory.limit_in_bytes"))
				if err != nil || limit >= noLimit {
					continue
				}
				usage, err := readCgroupInt(filepath.Join(dir, "memory.usage_in_bytes"))
				if err != nil {
					continue
				}
				consider(limit - workingSet(usage, filepath.Join(dir, "memory.stat"), "total_inactive_file"))
			}
		}
	}
	if headroom < 0 {
		return 0, false
	}
	return headroom, true
}

// cgroupLevels returns the directories of cgroup path under root, from the
// cgroup itself up to root. Inside a container whose cgroup namespace is
// not private, /proc/self/cgroup names a host path that the container's
// mount does not show: then root (the container's own cgroup) is all there
// is.
func cgroupLevels(root, path string) []string {
	dir := filepath.Join(root, filepath.Clean("/"+path))
	if _, err := os.Stat(dir); err != nil {
		return []string{root}
	}
	var levels []string
	for {
		levels = append(levels, dir)
		if dir == root || len(dir) <= len(root) {
			return levels
		}
		dir = filepath.Dir(dir)
	}
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readCgroupInt reads a cgroup file holding one number ("max" is no limit).
func readCgroupInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return noLimit, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// workingSet is usage less the inactive file cache that memory.stat's key
// reports (0 when it cannot be read).
func workingSet(usage int64, statPath, key string) int64 {
	data, err := os.ReadFile(statPath)
	if err != nil {
		return usage
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err == nil && n <= usage {
			return usage - n
		}
	}
	return usage
}
