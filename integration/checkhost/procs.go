package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Process is a running process the check watches.
type Process struct {
	PID int `json:"pid"`
	// Start is its start time in clock ticks after boot (/proc/PID/stat
	// field 22): with PID, it tells a process from a later one that reuses
	// the pid.
	Start uint64 `json:"start"`
	// Name is the base name of argv[0], or the kernel's comm where the
	// command line is empty.
	Name string `json:"name"`
	// Cmdline is the command line, arguments separated by spaces.
	Cmdline string `json:"cmdline"`
}

// procStat is what the check needs from /proc/PID/stat.
type procStat struct {
	comm  string
	state byte
	ppid  int
	start uint64
}

// parseStat parses the contents of /proc/PID/stat (proc(5)). comm, in
// parentheses, may itself hold spaces and parentheses: it ends at the last
// ')'.
func parseStat(data []byte) (procStat, error) {
	s := string(data)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("no (comm) in %q", s)
	}
	rest := strings.Fields(s[end+1:])
	// rest[0] is field 3 (state); field N is rest[N-3].
	if len(rest) < 22-3+1 || len(rest[0]) != 1 {
		return procStat{}, fmt.Errorf("too few fields in %q", s)
	}
	ppid, err := strconv.Atoi(rest[4-3])
	if err != nil {
		return procStat{}, fmt.Errorf("ppid in %q: %w", s, err)
	}
	start, err := strconv.ParseUint(rest[22-3], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("starttime in %q: %w", s, err)
	}
	return procStat{comm: s[open+1 : end], state: rest[0][0], ppid: ppid, start: start}, nil
}

// processName is the base name of argv[0], else comm.
func processName(comm string, argv []string) string {
	if len(argv) > 0 && argv[0] != "" {
		return filepath.Base(argv[0])
	}
	return comm
}

// watched reports whether a process with this name (see processName) and
// command line is one the tests may have started and must have stopped:
// container engines and their helpers, Kubernetes, gpurun, or anything
// whose command line names a directory of the harness.
func watched(name string, argv []string) bool {
	switch name {
	case "dockerd", "docker-proxy", "containerd", "runc", "crun", "podman", "conmon", "crio", "kubelet", "etcd":
		return true
	}
	if strings.HasPrefix(name, "containerd-shim") || strings.HasPrefix(name, "kube-") || strings.Contains(name, "gpurun") {
		return true
	}
	for _, a := range argv {
		if strings.Contains(a, "/tmp/"+HarnessPrefix) {
			return true
		}
	}
	return false
}

// daemon reports whether a watched process is a long-running daemon of the
// machine: one that was running before the tests must still run after
// them. Others (runc, shims, conmon) come and go with containers, and so
// do the daemons' binaries run as commands (`containerd config dump`,
// `dockerd --version`).
func daemon(name string, argv []string) bool {
	switch {
	case name == "dockerd", name == "containerd", name == "crio", name == "kubelet", name == "etcd", strings.HasPrefix(name, "kube-"):
	default:
		return false
	}
	for _, a := range argv[min(1, len(argv)):] {
		switch a {
		case "--version", "-v", "--help", "-h", "help", "config", "publish", "oci-hook", "version":
			return false
		}
	}
	return true
}

// readProcesses returns the watched processes in proc, by pid, leaving out
// zombies, self and self's ancestors (the make and go run that started the
// check).
func readProcesses(proc string, self int) ([]Process, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("processes: %w", err)
	}
	type entry struct {
		Process
		ppid int
	}
	all := map[int]entry{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(proc, e.Name(), "stat"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, os.ErrPermission) {
				continue // exited meanwhile
			}
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
		st, err := parseStat(data)
		if err != nil {
			return nil, fmt.Errorf("process %d: %w", pid, err)
		}
		if st.state == 'Z' || st.state == 'X' {
			continue
		}
		raw, _ := os.ReadFile(filepath.Join(proc, e.Name(), "cmdline"))
		argv := strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
		if len(raw) == 0 {
			argv = nil
		}
		all[pid] = entry{Process{PID: pid, Start: st.start, Name: processName(st.comm, argv), Cmdline: strings.Join(argv, " ")}, st.ppid}
		if !watched(all[pid].Name, argv) {
			all[pid] = entry{Process{PID: pid}, st.ppid} // kept for the ancestry only
		}
	}
	skip := map[int]bool{}
	for pid := self; pid > 0 && !skip[pid]; pid = all[pid].ppid {
		skip[pid] = true
	}
	var out []Process
	for pid, e := range all {
		if e.Name == "" || skip[pid] {
			continue
		}
		out = append(out, e.Process)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}
