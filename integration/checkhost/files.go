package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/internal/filesum"
)

// readTrees records every entry at or below each of roots (glob patterns
// are expanded first); a root that does not exist records nothing.
func readTrees(roots []string) (map[string]string, error) {
	out := map[string]string{}
	var errs []error
	for _, pattern := range roots {
		paths := []string{pattern}
		if strings.ContainsAny(pattern, "*?[") {
			var err error
			if paths, err = filepath.Glob(pattern); err != nil {
				errs = append(errs, fmt.Errorf("watched path %s: %w", pattern, err))
				continue
			}
		}
		for _, root := range paths {
			err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					if errors.Is(err, fs.ErrNotExist) {
						return nil // gone while we looked, or never there
					}
					return err
				}
				desc, err := describeEntry(p, d)
				if err != nil {
					if errors.Is(err, fs.ErrNotExist) {
						return nil
					}
					return err
				}
				out[p] = desc
				return nil
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("watched path %s: %w", root, err))
			}
		}
	}
	return out, errors.Join(errs...)
}

// describeEntry says what an entry is, in a form two snapshots compare:
// "dir 0755", "file 0644 sha256:…", "symlink -> target", "socket",
// "fifo", "device", or "other".
func describeEntry(path string, d fs.DirEntry) (string, error) {
	info, err := d.Info()
	if err != nil {
		return "", err
	}
	mode := info.Mode()
	perm := octalMode(mode)
	switch {
	case mode.IsDir():
		return "dir " + perm, nil
	case mode.IsRegular():
		sum, err := filesum.SHA256(path)
		if err != nil {
			return "", err
		}
		return "file " + perm + " sha256:" + sum, nil
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		return "symlink -> " + target, nil
	case mode&fs.ModeSocket != 0:
		return "socket", nil
	case mode&fs.ModeNamedPipe != 0:
		return "fifo", nil
	case mode&fs.ModeDevice != 0:
		return "device", nil
	}
	return "other", nil
}

// octalMode is the permission bits of mode as chmod writes them ("4755").
func octalMode(mode fs.FileMode) string {
	p := uint32(mode.Perm())
	for bit, v := range map[fs.FileMode]uint32{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
		if mode&bit != 0 {
			p |= v
		}
	}
	return fmt.Sprintf("%04o", p)
}

// readTmp returns the paths of the entries of dir whose names start with
// one of prefixes, sorted.
func readTmp(dir string, prefixes []string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	var out []string
	for _, e := range ents {
		for _, p := range prefixes {
			if strings.HasPrefix(e.Name(), p) {
				out = append(out, filepath.Join(dir, e.Name()))
				break
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// OwnerFile, in a harness directory, holds the pid of the test process that
// made it (integration/harness writes it for its clusters).
const OwnerFile = "owner"

// staleDirs returns the directories of dirs whose owner file names a pid
// that no longer runs. A directory without one, or whose owner runs, is
// not stale.
func staleDirs(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, OwnerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		out = append(out, d)
	}
	return out
}
