//go:build integration

package integration

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/integration/harness"
)

// installCrashCase is one engine configuration that gpurun install and
// uninstall change, under a node root of its own (--host-root).
type installCrashCase struct {
	name string
	// files are the node's files before install: path on the node ->
	// fixture (a file under the repository) or, for a leading "=", the
	// content itself.
	files map[string]string
	// args are install's and uninstall's arguments after the engine
	// (--host-root is added).
	install, uninstall []string
}

func installCrashCases() []installCrashCase {
	return []installCrashCase{{
		name: "docker: set as default over nvidia",
		files: map[string]string{
			"/etc/docker/daemon.json":       "engine/docker/testdata/nvidia-ctk-set-as-default.json",
			"/usr/local/bin/gpurun-runtime": "=#!/bin/sh\n",
		},
		install:   []string{"docker", "--set-as-default", "--data-root", "/var/lib/docker"},
		uninstall: []string{"docker"},
	}, {
		name: "containerd 1.6: set as default, chaining nvidia",
		files: map[string]string{
			"/etc/containerd/config.toml":   "engine/containerd/testdata/nvidia-ctk-containerd-1.6.20-set-as-default.toml",
			"/usr/local/bin/gpurun-runtime": "=#!/bin/sh\n",
		},
		install:   []string{"containerd", "--set-as-default"},
		uninstall: []string{"containerd"},
	}, {
		name: "containerd 2.x: a drop-in",
		files: map[string]string{
			"/etc/containerd/config.toml":   "engine/containerd/testdata/containerd-2.4.2-config-default.toml",
			"/usr/local/bin/gpurun-runtime": "=#!/bin/sh\n",
		},
		install:   []string{"containerd", "--drop-in", "/etc/containerd/conf.d"},
		uninstall: []string{"containerd"},
	}, {
		name: "podman: a hook",
		files: map[string]string{
			"/usr/local/bin/gpurun": "=#!/bin/sh\n",
		},
		install:   []string{"podman", "--hook-path", "/usr/local/bin/gpurun"},
		uninstall: []string{"podman"},
	}, {
		name: "cri-o: a hook and the shm annotation",
		files: map[string]string{
			"/usr/local/bin/gpurun":           "=#!/bin/sh\n",
			"/etc/crio/crio.conf.d/10-a.conf": "=[crio.runtime]\nlog_level = \"info\"\n",
		},
		install:   []string{"crio", "--hook-path", "/usr/local/bin/gpurun", "--allow-shm-annotation"},
		uninstall: []string{"crio"},
	}}
}

// TestInstallKilledAtEveryStep kills gpurun install, and then uninstall,
// with SIGKILL as it enters each of its write steps in turn (every write,
// fsync, rename, unlink, mkdir, chmod and open for writing; see
// harness.RunKilledAt), on a node root of its own. After each kill every
// file the engine reads is byte for byte as before the command or as
// after an uninterrupted run, never partial; a rerun then completes and
// leaves exactly what an uninterrupted run leaves; and an uninstall after
// it restores the node byte for byte.
func TestInstallKilledAtEveryStep(t *testing.T) {
	gpurun := bin(t, "gpurun")
	env := append(os.Environ(), "DOCKER_HOST=unix:///nonexistent/docker.sock", "GPURUN_CONFIG=/nonexistent/config.toml")
	total := 0
	for _, tc := range installCrashCases() {
		t.Run(tc.name, func(t *testing.T) {
			run := func(t *testing.T, root string, k int, args ...string) harness.CrashRun {
				t.Helper()
				argv := append([]string{gpurun}, args...)
				argv = append(argv, "--host-root", root)
				res, err := harness.RunKilledAt(argv, env, k)
				if err != nil {
					t.Fatalf("%v: %v", args, err)
				}
				return res
			}
			ok := func(t *testing.T, res harness.CrashRun, what string) {
				t.Helper()
				if res.Killed || res.ExitCode != 0 {
					t.Fatalf("%s: exit %d (killed %v)\nstdout: %s\nstderr: %s", what, res.ExitCode, res.Killed, res.Stdout, res.Stderr)
				}
			}
			install := append([]string{"install"}, tc.install...)
			uninstall := append([]string{"uninstall"}, tc.uninstall...)

			// Uninterrupted: what install leaves, and how many steps.
			ref := newCrashRoot(t, tc)
			before := engineFiles(t, ref)
			first := run(t, ref, 0, install...)
			ok(t, first, "install")
			after := engineFiles(t, ref)
			if maps.Equal(before, after) {
				t.Fatalf("install changed no engine file under %s", ref)
			}
			undo := run(t, ref, 0, uninstall...)
			ok(t, undo, "uninstall")
			if got := engineFiles(t, ref); !maps.Equal(got, before) {
				t.Fatalf("uninstall did not restore the node:\n%s", diffFiles(before, got))
			}

			// install killed at step k, for every k.
			for k := 1; k <= first.Steps; k++ {
				root := newCrashRoot(t, tc)
				res := run(t, root, k, install...)
				if !res.Killed {
					t.Fatalf("install: not killed at step %d of %d (it took %d steps this time)", k, first.Steps, res.Steps)
				}
				checkBeforeOrAfter(t, "install", k, res.At, root, before, after)
				ok(t, run(t, root, 0, install...), "install after the kill")
				if got := engineFiles(t, root); !maps.Equal(got, after) {
					t.Errorf("install killed at step %d (%s), then rerun, differs from an uninterrupted install:\n%s", k, res.At, diffFiles(after, got))
				}
				ok(t, run(t, root, 0, uninstall...), "uninstall after the rerun")
				if got := engineFiles(t, root); !maps.Equal(got, before) {
					t.Errorf("install killed at step %d (%s), rerun, uninstall: not as before:\n%s", k, res.At, diffFiles(before, got))
				}
				checkNoStrayFiles(t, root)
			}

			// uninstall killed at step k, for every k, after a whole install.
			for k := 1; k <= undo.Steps; k++ {
				root := newCrashRoot(t, tc)
				ok(t, run(t, root, 0, install...), "install")
				res := run(t, root, k, uninstall...)
				if !res.Killed {
					t.Fatalf("uninstall: not killed at step %d of %d (it took %d steps this time)", k, undo.Steps, res.Steps)
				}
				checkBeforeOrAfter(t, "uninstall", k, res.At, root, after, before)
				ok(t, run(t, root, 0, uninstall...), "uninstall after the kill")
				if got := engineFiles(t, root); !maps.Equal(got, before) {
					t.Errorf("uninstall killed at step %d (%s), then rerun: not as before install:\n%s", k, res.At, diffFiles(before, got))
				}
				checkNoStrayFiles(t, root)
			}
			if t.Failed() {
				return
			}
			t.Logf("%s: install killed at each of its %d write steps, uninstall at each of its %d; every engine file before or after, every rerun complete",
				tc.name, first.Steps, undo.Steps)
			total += first.Steps + undo.Steps
		})
	}
	t.Logf("install/uninstall: %d kill points across %d engine setups", total, len(installCrashCases()))
}

// newCrashRoot makes a node root with tc's files.
func newCrashRoot(t *testing.T, tc installCrashCase) string {
	t.Helper()
	root := t.TempDir()
	for p, src := range tc.files {
		var data []byte
		if content, ok := strings.CutPrefix(src, "="); ok {
			data = []byte(content)
		} else {
			var err error
			if data, err = os.ReadFile(filepath.Join("..", src)); err != nil {
				t.Fatal(err)
			}
		}
		dst := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.Contains(p, "/bin/") {
			mode = 0o755
		}
		if err := os.WriteFile(dst, data, mode); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// engineFiles reads what an engine reads under root: every file below etc/
// and usr/share/ (configs, drop-ins, hooks.d, gpurun's policy) except
// gpurun's backups and the temporary files of its atomic writes, which no
// engine reads (checkNoStrayFiles checks their names).
func engineFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, top := range []string{"etc", "usr/share"} {
		dir := filepath.Join(root, top)
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) && p == dir {
					return nil
				}
				return err
			}
			if d.IsDir() || gpurunScratch(d.Name()) {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			files[rel] = string(data)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// gpurunScratch says whether name is a backup install made or a temporary
// file of an atomic write (".<name>.gpurun-<random>").
func gpurunScratch(name string) bool {
	return strings.HasSuffix(name, ".bak") && strings.Contains(name, ".gpurun-") ||
		strings.HasPrefix(name, ".") && strings.Contains(name, ".gpurun-")
}

// checkBeforeOrAfter fails unless every engine file under root is as in a
// or as in b (absent in one of them counting as a state).
func checkBeforeOrAfter(t *testing.T, cmd string, k int, at, root string, a, b map[string]string) {
	t.Helper()
	got := engineFiles(t, root)
	for _, p := range unionKeys(a, b, got) {
		g, gok := got[p]
		x, xok := a[p]
		y, yok := b[p]
		if (gok == xok && g == x) || (gok == yok && g == y) {
			continue
		}
		t.Errorf("%s killed at step %d (%s): %s is neither as before nor as after (%d bytes; before %d, after %d)",
			cmd, k, at, p, len(g), len(x), len(y))
	}
}

// checkNoStrayFiles fails if a temporary file left by a killed write has a
// name an engine would load (*.toml, *.json, *.conf).
func checkNoStrayFiles(t *testing.T, root string) {
	t.Helper()
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".gpurun-") {
			for _, ext := range []string{".toml", ".json", ".conf"} {
				if strings.HasSuffix(name, ext) {
					t.Errorf("a killed write left %s, which an engine would load", p)
				}
			}
		}
		return nil
	})
}

func unionKeys(ms ...map[string]string) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// diffFiles names the files that differ between want and got.
func diffFiles(want, got map[string]string) string {
	var b bytes.Buffer
	for _, p := range unionKeys(want, got) {
		w, wok := want[p]
		g, gok := got[p]
		switch {
		case !gok:
			b.WriteString("  missing " + p + "\n")
		case !wok:
			b.WriteString("  extra " + p + "\n")
		case w != g:
			b.WriteString("  changed " + p + ":\n--- want\n" + w + "\n--- got\n" + g + "\n")
		}
	}
	return b.String()
}
