package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/internal/version"
	"github.com/gpurun/gpurun/runtime/install"
)

// pluginEnv isolates the variables docker-gpurun reads and sets; t.Setenv
// puts them back when the test ends.
func pluginEnv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range []string{DockerEnv, "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND", "DOCKER_CLI_PLUGIN_SOCKET",
		"DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "GPURUN_CONFIG", "GPURUN_DRY_RUN", "GPURUN_VERBOSE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

func TestDockerCLIPluginMetadata(t *testing.T) {
	pluginEnv(t)
	var out, errOut bytes.Buffer
	_, code, done := fromDockerCLI(&globals{}, []string{install.CLIPluginMetadataCommand}, &out, &errOut)
	if !done || code != 0 {
		t.Fatalf("done %v code %d: %s", done, code, errOut.String())
	}
	var meta map[string]string
	dec := json.NewDecoder(&out)
	if err := dec.Decode(&meta); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if dec.More() {
		t.Error("more than one JSON value")
	}
	want := map[string]string{
		"SchemaVersion":    "0.1.0",
		"Vendor":           "gpurun",
		"Version":          version.String(),
		"ShortDescription": newRootCmd(&globals{}).Short,
		"URL":              install.CLIPluginURL,
	}
	if len(meta) != len(want) {
		t.Errorf("metadata %v, want %v", meta, want)
	}
	for k, v := range want {
		if meta[k] != v {
			t.Errorf("%s = %q, want %q", k, meta[k], v)
		}
	}
}

// TestDockerCLIPluginRun: `docker -H X gpurun --dry-run run ...` runs the
// docker that ran the plugin, with docker's -H again before run, and the
// same decision as `gpurun --dry-run run ...` with DOCKER_HOST=X.
func TestDockerCLIPluginRun(t *testing.T) {
	const host = "unix:///nonexistent/docker.sock"
	runArgs := []string{"--dry-run", "run", "--rm", "-e", "NVIDIA_VISIBLE_DEVICES=all", "busybox", "true"}

	dispatch := func(g *globals, args []string) string {
		t.Helper()
		rest, err := splitGlobals(args, g)
		if err != nil {
			t.Fatal(err)
		}
		command, dockerArgs, ok, err := isRunInvocation(newRootCmd(&globals{}), rest, g)
		if !ok || err != nil {
			t.Fatalf("%q is not a docker run", rest)
		}
		var out, errOut bytes.Buffer
		if err := runDocker(g, command, dockerArgs, &out, &errOut); err != nil {
			t.Fatalf("%v: %s", err, errOut.String())
		}
		return out.String()
	}

	pluginEnv(t, DockerEnv, "/usr/local/bin/docker", "DOCKER_HOST", host)
	plain := dispatch(&globals{}, runArgs)

	pluginEnv(t, "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND", "/usr/local/bin/docker", "DOCKER_CLI_PLUGIN_SOCKET", "@x")
	g := &globals{}
	var errOut bytes.Buffer
	rest, code, done := fromDockerCLI(g, append([]string{"-H", host, "gpurun"}, runArgs...), &bytes.Buffer{}, &errOut)
	if done {
		t.Fatalf("done early, exit %d: %s", code, errOut.String())
	}
	viaPlugin := dispatch(g, rest)

	want := strings.Replace(plain, "/usr/local/bin/docker run ", "/usr/local/bin/docker -H "+host+" run ", 1)
	if !strings.Contains(plain, "--shm-size=") || viaPlugin != want {
		t.Errorf("via the plugin:\n%s\nwant:\n%s", viaPlugin, want)
	}
	if v, ok := os.LookupEnv("DOCKER_CLI_PLUGIN_SOCKET"); ok {
		t.Errorf("DOCKER_CLI_PLUGIN_SOCKET=%q left for the docker run", v)
	}
}

func TestDockerCLIPluginBadArgs(t *testing.T) {
	pluginEnv(t, "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND", "docker")
	var errOut bytes.Buffer
	_, code, done := fromDockerCLI(&globals{}, []string{"-H"}, &bytes.Buffer{}, &errOut)
	if !done || code != 2 || !strings.Contains(errOut.String(), "-H needs a value") {
		t.Errorf("done %v code %d stderr %q", done, code, errOut.String())
	}
}

func TestInstallDockerCLIPluginCmd(t *testing.T) {
	pluginEnv(t)
	dir := filepath.Join(t.TempDir(), "plugins")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, install.CLIPluginFile)

	stdout, stderr, code := execute(t, "install", "docker-cli-plugin", "--dir", dir, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "would link "+link) {
		t.Fatalf("dry run: %d %q %q", code, stdout, stderr)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("dry run made %s", link)
	}
	if _, stderr, code := execute(t, "install", "docker-cli-plugin", "--dir", dir); code != 0 {
		t.Fatalf("install: %d %s", code, stderr)
	}
	if got, err := os.Readlink(link); err != nil || got != self {
		t.Fatalf("link -> %q %v, want %q", got, err, self)
	}
	if _, stderr, code := execute(t, "uninstall", "docker-cli-plugin", "--dir", dir); code != 0 {
		t.Fatalf("uninstall: %d %s", code, stderr)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("uninstall left %s", link)
	}

	// DOCKER_CONFIG decides the directory, as it does for the docker CLI.
	cfg := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfg)
	if _, stderr, code := execute(t, "install", "docker-cli-plugin"); code != 0 {
		t.Fatalf("install: %d %s", code, stderr)
	}
	if _, err := os.Readlink(filepath.Join(cfg, "cli-plugins", install.CLIPluginFile)); err != nil {
		t.Error(err)
	}

	if _, stderr, code := execute(t, "install", "docker-cli-plugin", "--dir", dir, "--system"); code != 2 || !strings.Contains(stderr, "choose one") {
		t.Errorf("--dir with --system: %d %q", code, stderr)
	}
}
