// Package hostpath reads a node's paths, and runs its programs, from a
// process that may see the node's root filesystem under a directory of its
// own (a pod's hostPath volume of /, mounted at /host): symbolic links are
// followed as the node follows them, an absolute target taken under that
// directory, never in this process's root, and a program runs chrooted
// there.
package hostpath

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks is how many symbolic links Resolve follows before it gives up,
// as Linux does (MAXSYMLINKS).
const maxLinks = 40

// Join returns the node path p as a path here: p under hostRoot ("" or
// "/": this host).
func Join(hostRoot, p string) string {
	if hostRoot == "" || hostRoot == "/" {
		return p
	}
	return filepath.Join(hostRoot, p)
}

// Resolve resolves the symbolic links of a node path under hostRoot ("" or
// "/": this host) as the node would, absolute targets taken under
// hostRoot, and returns the node path they lead to. Every component must
// exist.
func Resolve(hostRoot, nodePath string) (string, error) {
	if hostRoot == "" || hostRoot == "/" {
		return filepath.EvalSymlinks(nodePath)
	}
	todo := strings.Split(strings.TrimPrefix(filepath.Clean("/"+nodePath), "/"), "/")
	done := "/"
	for links := 0; len(todo) > 0; {
		name := todo[0]
		todo = todo[1:]
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, name)
		fi, err := os.Lstat(filepath.Join(hostRoot, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links under %s", nodePath, hostRoot)
		}
		target, err := os.Readlink(filepath.Join(hostRoot, next))
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			done = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return done, nil
}

// Stat stats a node path under hostRoot, following symbolic links as the
// node would (Resolve).
func Stat(hostRoot, nodePath string) (os.FileInfo, error) {
	if hostRoot == "" || hostRoot == "/" {
		return os.Stat(nodePath)
	}
	p, err := Resolve(hostRoot, nodePath)
	if err != nil {
		return nil, err
	}
	return os.Lstat(filepath.Join(hostRoot, p))
}

// ReadFile reads a node file under hostRoot, following symbolic links as
// the node would (Resolve).
func ReadFile(hostRoot, nodePath string) ([]byte, error) {
	if hostRoot == "" || hostRoot == "/" {
		return os.ReadFile(nodePath)
	}
	p, err := Resolve(hostRoot, nodePath)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(hostRoot, p))
}

// nodePATH is the PATH a program of the node runs with when it runs
// chrooted into the host root: this process's would name its own image's
// directories.
const nodePATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Command returns the command that runs the node's program (a node path)
// with args as the node runs it: in /, as under systemd, and chrooted into
// hostRoot when it is not "" or "/", so that the node's paths mean to the
// program what they mean on the node (chroot needs CAP_SYS_CHROOT).
func Command(ctx context.Context, hostRoot, program string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Dir = "/"
	if hostRoot != "" && hostRoot != "/" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: hostRoot}
		cmd.Env = []string{nodePATH}
	}
	return cmd
}
