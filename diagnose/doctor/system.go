package doctor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/diagnose/shmprobe"
	"github.com/gpurun/gpurun/engine/sysinfo"
)

// System is the machine doctor looks at. Its fields are doctor's only ways
// to learn about it, so tests can point them at a fake tree of files.
type System struct {
	// Root prefixes every file path doctor reads ("" or "/": this machine).
	Root string
	// Getenv and Environ are the environment of the process looked at.
	Getenv  func(string) string
	Environ func() []string
	// Statfs returns what statfs(2) says about the filesystem at path
	// (a path already under Root).
	Statfs func(path string) (FS, error)
	// MemTotal is the machine's memory in bytes (sysinfo.MemTotal).
	MemTotal func() (int64, error)
	// NumCPU is the number of CPUs this process may run on.
	NumCPU func() int
	// LookPath finds a program on PATH.
	LookPath func(string) (string, error)
	// Output runs a program and returns its stdout.
	Output func(ctx context.Context, name string, args ...string) ([]byte, error)
	// Probe allocates size bytes in dir and frees them (shmprobe.Check).
	Probe func(dir string, size int64) shmprobe.Result
}

// FS is what statfs(2) says about a filesystem.
type FS struct {
	Tmpfs bool
	// Type is the filesystem's magic number.
	Type int64
	// Size, Used and Free are in bytes.
	Size, Used, Free int64
}

// Local returns the System of this process on this machine.
func Local() *System {
	return &System{
		Root:     "/",
		Getenv:   os.Getenv,
		Environ:  os.Environ,
		Statfs:   statfs,
		MemTotal: sysinfo.MemTotal,
		NumCPU:   runtime.NumCPU,
		LookPath: exec.LookPath,
		Output: func(ctx context.Context, name string, args ...string) ([]byte, error) {
			ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			return exec.CommandContext(ctx, name, args...).Output()
		},
		Probe: shmprobe.Check,
	}
}

func statfs(path string) (FS, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FS{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := int64(st.Bsize)
	return FS{
		Tmpfs: st.Type == unix.TMPFS_MAGIC,
		Type:  int64(st.Type),
		Size:  int64(st.Blocks) * bs,
		Used:  int64(st.Blocks-st.Bfree) * bs,
		Free:  int64(st.Bavail) * bs,
	}, nil
}

// path returns p (an absolute path on the machine looked at) under Root.
func (s *System) path(p string) string {
	if s.Root == "" || s.Root == "/" {
		return p
	}
	return filepath.Join(s.Root, p)
}

// readFile reads a file of the machine looked at.
func (s *System) readFile(p string) ([]byte, error) {
	return os.ReadFile(s.path(p))
}

// exists reports whether a path exists on the machine looked at (a
// dangling symbolic link counts).
func (s *System) exists(p string) bool {
	_, err := os.Lstat(s.path(p))
	return err == nil
}

func (s *System) getenv(k string) string {
	if s.Getenv == nil {
		return ""
	}
	return s.Getenv(k)
}

func (s *System) environ() []string {
	if s.Environ == nil {
		return nil
	}
	return s.Environ()
}
