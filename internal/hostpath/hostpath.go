// Package hostpath reads a node's paths from a process that may see the
// node's root filesystem under a directory of its own (a pod's hostPath
// volume of /, mounted at /host): symbolic links are followed as the node
// follows them, an absolute target taken under that directory, never in
// this process's root.
package hostpath

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
