package doctor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/diagnose/shmprobe"
	"github.com/gpurun/gpurun/policy"
)

// fakeHostMemory is the memory the fake machines have: big enough that the
// policy's target differs from its minimum and from 64 MiB.
const fakeHostMemory = 64 * policy.GiB

// The namespace links of the fake trees.
const (
	hostPIDNS      = "pid:[4026531836]"
	containerPIDNS = "pid:[4026532301]"
	hostIPCNS      = "ipc:[4026531839]"
	containerIPCNS = "ipc:[4026532300]"
)

// fakeSystem is a System over a directory tree, with statfs answers and an
// environment given by the test.
type fakeSystem struct {
	t    *testing.T
	root string
	fs   map[string]FS // node path -> statfs answer
	env  map[string]string
	// probed records Probe calls.
	probed []int64
	probe  shmprobe.Result
	// outputs answer Output: a command line (the program's path in the
	// fake tree, as the system runs it, and its arguments, joined by
	// spaces) and its stdout; any other command fails.
	outputs map[string]string
}

func newFake(t *testing.T) *fakeSystem {
	t.Helper()
	return &fakeSystem{t: t, root: t.TempDir(), fs: map[string]FS{}, env: map[string]string{}}
}

// write creates a file of the fake tree.
func (f *fakeSystem) write(p, content string) {
	f.t.Helper()
	full := filepath.Join(f.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// executable creates an executable file of the fake tree.
func (f *fakeSystem) executable(p string) {
	f.t.Helper()
	f.write(p, "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(f.root, p), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// link creates a symbolic link (possibly dangling, as /proc/self/ns/* are).
func (f *fakeSystem) link(p, target string) {
	f.t.Helper()
	full := filepath.Join(f.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(target, full); err != nil {
		f.t.Fatal(err)
	}
}

// copyFile copies a file of the test's testdata into the fake tree.
func (f *fakeSystem) copyFile(from, to string) {
	f.t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		f.t.Fatal(err)
	}
	f.write(to, string(data))
}

// namespaces sets the process's PID and IPC namespace links.
func (f *fakeSystem) namespaces(pid, ipc string) {
	f.link("/proc/self/ns/pid", pid)
	f.link("/proc/self/ns/ipc", ipc)
}

func (f *fakeSystem) system() *System {
	return &System{
		Root:   f.root,
		Getenv: func(k string) string { return f.env[k] },
		Environ: func() []string {
			var out []string
			for k, v := range f.env {
				out = append(out, k+"="+v)
			}
			return out
		},
		Statfs: func(p string) (FS, error) {
			rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, f.root), "/")
			if fs, ok := f.fs[rel]; ok {
				return fs, nil
			}
			return FS{}, fmt.Errorf("statfs %s: %w", rel, fs.ErrNotExist)
		},
		MemTotal: func() (int64, error) { return fakeHostMemory, nil },
		NumCPU:   func() int { return 8 },
		LookPath: func(string) (string, error) { return "", errors.New("not found") },
		Output: func(_ context.Context, name string, args ...string) ([]byte, error) {
			rel := "/" + strings.TrimPrefix(strings.TrimPrefix(name, f.root), "/")
			if out, ok := f.outputs[strings.Join(append([]string{rel}, args...), " ")]; ok {
				return []byte(out), nil
			}
			return nil, errors.New("not expected")
		},
		Probe: func(dir string, size int64) shmprobe.Result {
			f.probed = append(f.probed, size)
			r := f.probe
			r.Dir, r.Requested = dir, size
			if r.OK() {
				r.Allocated = size
			}
			return r
		},
	}
}

// loadCapture lays a captured container (testdata/containers/NAME) into
// the fake tree: its mountinfo, cgroup and cgroup files, /.dockerenv, and
// the statfs answer for /dev/shm from its df output.
func (f *fakeSystem) loadCapture(name string) {
	f.t.Helper()
	dir := filepath.Join("testdata", "containers", name)
	f.copyFile(filepath.Join(dir, "mountinfo"), "/proc/self/mountinfo")
	f.copyFile(filepath.Join(dir, "cgroup"), "/proc/self/cgroup")
	f.copyFile(filepath.Join(dir, "cgroup"), "/proc/1/cgroup")
	if _, err := os.Stat(filepath.Join(dir, "dockerenv")); err == nil {
		f.write("/.dockerenv", "")
	}
	files := filepath.Join(dir, "files")
	err := filepath.WalkDir(files, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f.copyFile(p, strings.TrimPrefix(p, files))
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if size, used, ok := dfShm(f.t, filepath.Join(dir, "df")); ok {
		f.fs["/dev/shm"] = FS{Tmpfs: true, Size: size, Used: used, Free: size - used}
	}
}

// dfShm reads `df -k /dev/shm` output: size and used in bytes.
func dfShm(t *testing.T, path string) (size, used int64, ok bool) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 6 && fields[5] == "/dev/shm" {
			s, err1 := strconv.ParseInt(fields[1], 10, 64)
			u, err2 := strconv.ParseInt(fields[2], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %q", path, sc.Text())
			}
			return s * 1024, u * 1024, true
		}
	}
	return 0, 0, false
}

// check returns the named check of a report, failing the test without it.
func check(t *testing.T, r *Report, name string) Check {
	t.Helper()
	c, ok := r.Find(name)
	if !ok {
		t.Fatalf("no check %q in %+v", name, r.Checks)
	}
	return c
}
