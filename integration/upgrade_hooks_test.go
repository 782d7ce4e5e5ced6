//go:build integration

package integration

// The hooks.d entry across releases (docs/upgrading.md): the previous
// release's own binary (harness.RequirePrevious) and this checkout's
// installing and uninstalling `gpurun.json` after each other, both ways,
// and the previous release's entry run by this release's gpurun.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/engine/hooksd"
	"github.com/gpurun/gpurun/integration/harness"
)

// TestHooksAcrossReleases: in a hooks.d directory that holds another
// program's entry, the previous release's install and this one's take
// over each other's gpurun.json (the entry names each one's own program:
// gpurun for 460d3b5, gpurun-runtime's hook mode for this one), the
// previous release's uninstall removes this one's entry though it does
// not know its program's name, and every uninstall leaves the directory
// as it was. The last case is an upgrade by package, where the binary
// changes under an entry that stays: the previous release's entry running
// this release's gpurun sizes a Podman GPU container.
func TestHooksAcrossReleases(t *testing.T) {
	prev := harness.RequirePrevious(t)
	cur := bin(t, "gpurun")
	curRuntime := bin(t, "gpurun-runtime")
	prevGPURun := prev.Binary("gpurun")

	// setup is a hooks.d directory with NVIDIA's legacy entry in it, a
	// policy file and an install state outside it; common are the flags
	// of install and uninstall that name them, and --policy (install's).
	setup := func(t *testing.T) (hooksDir, config string, common []string, policy string) {
		dir := t.TempDir()
		hooksDir = filepath.Join(dir, "hooks.d")
		if err := os.MkdirAll(hooksDir, 0o755); err != nil {
			t.Fatal(err)
		}
		other := `{"version": "1.0.0", "hook": {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}, "when": {"always": true}, "stages": ["prestart"]}` + "\n"
		if err := os.WriteFile(filepath.Join(hooksDir, "oci-nvidia-hook.json"), []byte(other), 0o644); err != nil {
			t.Fatal(err)
		}
		config, _ = hookPolicy(t, dir)
		return hooksDir, config, []string{"--hooks-dir", hooksDir, "--state", filepath.Join(dir, "install-state.json")}, "--policy=" + config
	}
	run := func(t *testing.T, binary, cmd string, args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, append([]string{cmd, "podman"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s podman %s: %v\n%s", binary, cmd, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// runs is the program gpurun.json in hooksDir runs.
	runs := func(t *testing.T, hooksDir string) string {
		t.Helper()
		entry := filepath.Join(hooksDir, hooksd.HookFileName)
		data, err := os.ReadFile(entry)
		if err != nil {
			t.Fatal(err)
		}
		var h struct {
			Hook struct {
				Path string
				Args []string
			}
		}
		if err := hooksd.ValidateHookJSON(entry, data); err != nil || !hooksd.IsGPURunHook(data) || json.Unmarshal(data, &h) != nil {
			t.Fatalf("%s is not a valid gpurun entry (%v):\n%s", entry, err, data)
		}
		if len(h.Hook.Args) < 2 || h.Hook.Args[1] != "hook" {
			t.Fatalf("%s does not run a hook mode: %q", entry, h.Hook.Args)
		}
		return h.Hook.Path
	}
	same := func(t *testing.T, what string, before, after map[string]string) {
		t.Helper()
		for p, was := range before {
			if now, ok := after[p]; !ok || now != was {
				t.Errorf("%s: %s is gone or changed", what, p)
			}
		}
		for p := range after {
			if _, ok := before[p]; !ok {
				t.Errorf("%s: %s is left", what, p)
			}
		}
	}

	for _, seq := range []struct {
		name                   string
		first, then            string // install with first, then install (and uninstall) with then
		firstRuns, thenRuns    string // the program each one's entry runs
		uninstallWithFirstOnly bool   // then does not install: first's entry, then's uninstall
	}{
		{name: "upgrade", first: prevGPURun, then: cur, firstRuns: prevGPURun, thenRuns: curRuntime},
		{name: "downgrade", first: cur, then: prevGPURun, firstRuns: curRuntime, thenRuns: prevGPURun},
		{name: "this entry then the previous uninstall", first: cur, then: prevGPURun, firstRuns: curRuntime, uninstallWithFirstOnly: true},
	} {
		t.Run(seq.name, func(t *testing.T) {
			hooksDir, _, common, policy := setup(t)
			before := snapshotRoot(t, hooksDir)
			run(t, seq.first, "install", append(common, policy)...)
			if got := runs(t, hooksDir); got != seq.firstRuns {
				t.Errorf("%s's entry runs %s, want %s", seq.first, got, seq.firstRuns)
			}
			if !seq.uninstallWithFirstOnly {
				run(t, seq.then, "install", append(common, policy)...)
				if got := runs(t, hooksDir); got != seq.thenRuns {
					t.Errorf("after %s's install the entry runs %s, want %s", seq.then, got, seq.thenRuns)
				}
			}
			out := run(t, seq.then, "uninstall", common...)
			same(t, seq.then+"'s uninstall ("+strings.TrimSpace(out)+")", before, snapshotRoot(t, hooksDir))
		})
	}

	// No comma in a subtest's name: its TempDir is a --hooks-dir, which
	// Podman splits at commas.
	t.Run("the previous entry run by this gpurun", func(t *testing.T) {
		hooksDir, config, common, policy := setup(t)
		before := snapshotRoot(t, hooksDir)
		// What a package upgrade leaves: 460d3b5's entry, written for a
		// gpurun at the path where this release's binary now is.
		run(t, prevGPURun, "install", append(common, policy, "--hook-path", cur)...)
		if got := runs(t, hooksDir); got != cur {
			t.Fatalf("460d3b5's entry runs %s, want %s", got, cur)
		}
		p := harness.NewPodman(t)
		img := p.BusyboxImage()
		want := podmanGPUShmKiB(t, config)
		out, stderr, err := p.Run("--hooks-dir", hooksDir, "-e", "NVIDIA_VISIBLE_DEVICES=all", img, "df", "-k", "/dev/shm")
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
		if got := dfKiB(t, out); got != want {
			t.Errorf("/dev/shm %d KiB through 460d3b5's entry, want %d\ngpurun log:\n%s", got, want, readFile(filepath.Join(filepath.Dir(config), "gpurun.log")))
		}
		run(t, cur, "uninstall", common...)
		same(t, "this release's uninstall", before, snapshotRoot(t, hooksDir))
	})
}
