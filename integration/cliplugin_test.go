//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDockerCLIPlugin: `gpurun install docker-cli-plugin` makes the real
// docker CLIs of this machine (Debian's 20.10 and a newer one in
// /usr/local/bin, where there is one) run gpurun as `docker gpurun`, with
// DOCKER_CONFIG pointing at a test directory; uninstall takes it away.
func TestDockerCLIPlugin(t *testing.T) {
	gpurun := bin(t, "gpurun")
	dockerConfig := t.TempDir()
	// No daemon is needed for help, version and --dry-run.
	env := append(os.Environ(), "DOCKER_CONFIG="+dockerConfig, "DOCKER_HOST=unix:///nonexistent/docker.sock",
		"GPURUN_CONFIG=", "GPURUN_DOCKER=", "GPURUN_DRY_RUN=", "GPURUN_VERBOSE=")

	out := mustRun(t, env, gpurun, "install", "docker-cli-plugin")
	link := filepath.Join(dockerConfig, "cli-plugins", "docker-gpurun")
	if target, err := os.Readlink(link); err != nil || target != gpurun {
		t.Fatalf("install said %q; %s -> %q (%v), want -> %s", out, link, target, err, gpurun)
	}

	// The link answers the docker CLI's metadata request.
	var meta struct{ SchemaVersion, Vendor, Version, ShortDescription, URL string }
	if err := json.Unmarshal([]byte(mustRun(t, env, link, "docker-cli-plugin-metadata")), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.SchemaVersion != "0.1.0" || meta.Vendor == "" || meta.ShortDescription == "" {
		t.Errorf("metadata %+v", meta)
	}
	wantHelp := mustRun(t, env, gpurun, "--help")
	wantVersion := mustRun(t, env, gpurun, "version")
	dryRun := []string{"--dry-run", "run", "--rm", "-e", "NVIDIA_VISIBLE_DEVICES=all", "busybox", "true"}

	for _, docker := range dockerCLIs(t) {
		t.Run(docker, func(t *testing.T) {
			if got := mustRun(t, env, docker, "gpurun", "--help"); got != wantHelp {
				t.Errorf("docker gpurun --help:\n%s\nwant gpurun --help:\n%s", got, wantHelp)
			}
			if got := mustRun(t, env, docker, "help", "gpurun"); got != wantHelp {
				t.Errorf("docker help gpurun:\n%s\nwant gpurun --help:\n%s", got, wantHelp)
			}
			if got := mustRun(t, env, docker, "gpurun", "version"); got != wantVersion {
				t.Errorf("docker gpurun version: %q, want %q", got, wantVersion)
			}
			// docker --help lists the plugin with its metadata.
			help, _, _ := cmdResult(t, env, docker, "--help")
			if !strings.Contains(help, "gpurun*") || !strings.Contains(help, meta.ShortDescription) {
				t.Errorf("docker --help does not list gpurun* with %q:\n%s", meta.ShortDescription, help)
			}

			// The docker that ran the plugin runs the container, with
			// docker's global options again before run; the decision is
			// the one gpurun makes alone for that daemon.
			plain := mustRun(t, append(env, "GPURUN_DOCKER="+docker), gpurun, dryRun...)
			want := strings.Replace(plain, docker+" run ", docker+" -H unix:///nonexistent/docker.sock run ", 1)
			got := mustRun(t, env, docker, append([]string{"-H", "unix:///nonexistent/docker.sock", "gpurun"}, dryRun...)...)
			if !strings.Contains(plain, "--shm-size=") || got != want {
				t.Errorf("docker -H … gpurun --dry-run run …:\n%s\nwant:\n%s", got, want)
			}
		})
	}

	out = mustRun(t, env, gpurun, "uninstall", "docker-cli-plugin")
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("uninstall said %q; %s: %v", out, link, err)
	}
	for _, docker := range dockerCLIs(t) {
		if _, errOut, code := cmdResult(t, env, docker, "gpurun", "version"); code == 0 {
			t.Errorf("%s gpurun version still works after uninstall", docker)
		} else if !strings.Contains(errOut, "gpurun") {
			t.Errorf("%s: %q", docker, errOut)
		}
	}
}

// TestDockerCLIPluginRun: `docker gpurun run` against a real daemon gives
// a GPU container the policy's /dev/shm and passes the exit status back
// through both docker processes.
func TestDockerCLIPluginRun(t *testing.T) {
	e := newRunEnv(t)
	dockerConfig := t.TempDir()
	env := append(e.d.Env(), "DOCKER_CONFIG="+dockerConfig, "GPURUN_CONFIG="+e.config, "GPURUN_DOCKER=")
	mustRun(t, env, e.bin(), "install", "docker-cli-plugin")
	for _, docker := range dockerCLIs(t) {
		t.Run(docker, func(t *testing.T) {
			out := mustRun(t, env, docker, "gpurun", "run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "df", "-k", "/dev/shm")
			if got, want := dfKiB(t, out), e.target(0)/1024; got != want {
				t.Errorf("/dev/shm %d KiB, want %d KiB", got, want)
			}
			out = mustRun(t, env, docker, "gpurun", "run", "--rm", "--network", "none", e.img, "df", "-k", "/dev/shm")
			if got := dfKiB(t, out); got != 65536 {
				t.Errorf("non-GPU container: /dev/shm %d KiB, want docker's 65536", got)
			}
			if _, _, code := cmdResult(t, env, docker, "gpurun", "run", "--rm", "--network", "none", e.img, "sh", "-c", "exit 7"); code != 7 {
				t.Errorf("exit status %d, want 7", code)
			}
		})
	}
}
