//go:build integration

package integration

// The node's records across releases (docs/upgrading.md): the previous
// release's own binary (harness.RequirePrevious) and this checkout's
// installing and uninstalling after each other on one node, both ways.

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/internal/k3stest"
	"github.com/gpurun/gpurun/node/install"
)

// recordsNode is a node's root on this machine (no containerd runs on
// it: the agent installs and leaves the restart to containerd's start),
// and the files that hold gpurun's tables.
type recordsNode struct {
	root string
	// tables are the node paths an install writes gpurun's tables into.
	tables []string
}

// TestRecordsAcrossReleases: on a node with containerd 1.6's or 2.x's
// default config, or k3s's layout (v1.34.6, containerd 2.x, no template
// of the administrator's), the previous release installs and this one
// takes over (an upgrade) and uninstalls; this one installs and the
// previous one takes over (a downgrade: it reads this release's records)
// and uninstalls. Each release's install writes the same bytes into the
// config (or template) as the other's — so an upgrade needs no containerd
// restart there — and each uninstall leaves the node as it was before
// the first install, file for file.
func TestRecordsAcrossReleases(t *testing.T) {
	prev := harness.RequirePrevious(t)
	cur := bin(t, "gpurun-full")
	for _, kind := range []struct {
		name string
		make func(t *testing.T) recordsNode
	}{
		{"containerd 1.6", containerdNode("containerd-1.6.20-config-default.toml")},
		{"containerd 2.x", containerdNode("containerd-2.4.2-config-default.toml")},
		{"k3s", k3sRecordsNode},
	} {
		for _, seq := range []struct {
			name        string
			first, then string // binaries: install with first, then install and uninstall with then
		}{
			{"upgrade", prev.Binary("gpurun-full"), cur},
			{"downgrade", cur, prev.Binary("gpurun-full")},
		} {
			t.Run(kind.name+"/"+seq.name, func(t *testing.T) {
				n := kind.make(t)
				image, source := recordsImage(t)
				before := snapshotRoot(t, n.root)
				agent := func(bin, cmd string) {
					t.Helper()
					args := []string{"node", cmd, "--host-root", n.root}
					if cmd == "install" {
						args = append(args, "--from", image, "--policy-source", source)
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
					if err != nil {
						t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
					}
				}
				agent(seq.first, "install")
				first := snapshotRoot(t, n.root)
				for _, p := range n.tables {
					if bytes.Equal([]byte(first[p]), []byte(before[p])) {
						t.Fatalf("%s: the first install wrote nothing into %s", seq.first, p)
					}
				}
				agent(seq.then, "install")
				then := snapshotRoot(t, n.root)
				for _, p := range n.tables {
					if then[p] != first[p] {
						t.Errorf("%s's install changed %s from what %s's wrote:\n%s\nwas\n%s", seq.then, p, seq.first, then[p], first[p])
					}
				}
				agent(seq.then, "uninstall")
				after := snapshotRoot(t, n.root)
				var diffs []string
				for p, was := range before {
					if now, ok := after[p]; !ok {
						diffs = append(diffs, "gone: "+p)
					} else if now != was {
						diffs = append(diffs, "changed: "+p)
					}
				}
				for p := range after {
					if _, ok := before[p]; !ok {
						diffs = append(diffs, "left: "+p)
					}
				}
				sort.Strings(diffs)
				if len(diffs) > 0 {
					t.Errorf("after %s's uninstall the node is not as before the first install:\n%s", seq.then, strings.Join(diffs, "\n"))
				}
			})
		}
	}
}

// containerdNode is a node whose containerd reads
// /etc/containerd/config.toml, the engine testdata file.
func containerdNode(file string) func(t *testing.T) recordsNode {
	return func(t *testing.T) recordsNode {
		root := recordsRoot(t)
		writeFile(t, filepath.Join(root, install.DefaultContainerdConfig), readTestdata(t, "../engine/containerd/testdata/"+file))
		return recordsNode{root: root, tables: []string{install.DefaultContainerdConfig}}
	}
}

// k3sRecordsNode is a node laid out as k3s v1.34.6 lays out its
// containerd, its config.toml rendered from k3s's own template; gpurun
// writes config-v3.toml.tmpl.
func k3sRecordsNode(t *testing.T) recordsNode {
	root := recordsRoot(t)
	rel := k3stest.V3Imports()
	k := harness.K3sNode{HostRoot: root, DataDir: "/var/lib/rancher/k3s", Program: "k3s", Release: rel, Base: string(readTestdata(t, k3sTestdata+rel.Base))}
	if _, err := k.Render(); err != nil {
		t.Fatal(err)
	}
	return recordsNode{root: root, tables: []string{filepath.Join(k.ContainerdDir(), "config-v3.toml.tmpl")}}
}

// recordsRoot is an empty node root with a /proc that shows no
// containerd (the node's processes are what its /proc lists).
func recordsRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/uptime", filepath.Join(root, "proc", "uptime")); err != nil {
		t.Fatal(err)
	}
	return root
}

// recordsImage is a stand-in for the image's binaries (the agent copies
// whatever is there) and a policy source.
func recordsImage(t *testing.T) (image, source string) {
	t.Helper()
	image = t.TempDir()
	for _, b := range []string{"gpurun", "gpurun-full", "gpurun-runtime"} {
		writeFile(t, filepath.Join(image, b), []byte("#!/bin/true "+b+"\n"))
	}
	source = filepath.Join(t.TempDir(), "config.toml")
	writeFile(t, source, []byte("# the DaemonSet's policy\nsize = \"40%\"\n"))
	return image, source
}

// snapshotRoot maps each node path below root to its mode and, for a
// file, its content; the directories skip (relative to root) are left
// out, and so is proc.
func snapshotRoot(t *testing.T, root string, skip ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "proc" || slices.Contains(skip, rel) {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if d.Type().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += "\n" + string(data)
		}
		out["/"+strings.TrimPrefix(rel, ".")] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
