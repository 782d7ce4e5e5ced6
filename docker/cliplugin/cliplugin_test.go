package cliplugin

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCLIPluginMetadataJSON(t *testing.T) {
	data, err := json.Marshal(NewCLIPluginMetadata("v1.2.3", "Give GPU containers a /dev/shm"))
	if err != nil {
		t.Fatal(err)
	}
	// The docker CLI decodes these exact keys (cli-plugins/manager.Metadata);
	// SchemaVersion "0.1.0" and a Vendor are mandatory.
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"SchemaVersion":    "0.1.0",
		"Vendor":           "gpurun",
		"Version":          "v1.2.3",
		"ShortDescription": "Give GPU containers a /dev/shm",
		"URL":              CLIPluginURL,
	}
	if len(got) != len(want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

func TestIsCLIPlugin(t *testing.T) {
	for argv0, want := range map[string]bool{
		"/root/.docker/cli-plugins/docker-gpurun": true,
		"docker-gpurun":   true,
		"/usr/bin/gpurun": false,
		"gpurun":          false,
		"/usr/libexec/docker/cli-plugins/docker-x": false,
	} {
		if got := IsCLIPlugin(argv0); got != want {
			t.Errorf("IsCLIPlugin(%q) = %v", argv0, got)
		}
	}
}

func TestParseCLIPluginArgs(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		fromDocker bool
		meta       bool
		globals    []string
		env        []string
		rest       []string
		err        string
	}{
		{name: "metadata", args: []string{"docker-cli-plugin-metadata"}, fromDocker: true, meta: true},
		{name: "metadata by hand", args: []string{"docker-cli-plugin-metadata"}, meta: true},
		{name: "docker gpurun run", args: []string{"gpurun", "run", "--rm", "img"}, fromDocker: true,
			rest: []string{"run", "--rm", "img"}},
		{name: "gpurun's own options stay gpurun's", args: []string{"gpurun", "--dry-run", "-v", "img"}, fromDocker: true,
			rest: []string{"--dry-run", "-v", "img"}},
		{name: "-H value", args: []string{"-H", "unix:///x.sock", "gpurun", "run", "img"}, fromDocker: true,
			globals: []string{"-H", "unix:///x.sock"}, env: []string{"DOCKER_HOST=unix:///x.sock"}, rest: []string{"run", "img"}},
		{name: "--host=value and -Hvalue", args: []string{"--host=tcp://a:2375", "-Htcp://b:2375", "gpurun", "version"}, fromDocker: true,
			globals: []string{"--host=tcp://a:2375", "-Htcp://b:2375"}, env: []string{"DOCKER_HOST=tcp://a:2375", "DOCKER_HOST=tcp://b:2375"},
			rest: []string{"version"}},
		{name: "--context unsets DOCKER_HOST", args: []string{"--context", "gpu1", "gpurun", "run", "img"}, fromDocker: true,
			globals: []string{"--context", "gpu1"}, env: []string{"DOCKER_HOST", "DOCKER_CONTEXT=gpu1"}, rest: []string{"run", "img"}},
		{name: "-c -D --config --tlsverify -l", args: []string{"-c", "x", "-D", "--config", "/cfg", "--tlsverify", "-l", "debug", "--tlscacert=/ca.pem", "gpurun", "run"},
			fromDocker: true,
			globals:    []string{"-c", "x", "-D", "--config", "/cfg", "--tlsverify", "-l", "debug", "--tlscacert=/ca.pem"},
			env:        []string{"DOCKER_HOST", "DOCKER_CONTEXT=x", "DOCKER_CONFIG=/cfg", "DOCKER_TLS_VERIFY=1"}, rest: []string{"run"}},
		{name: "--tlsverify=false", args: []string{"--tlsverify=false", "gpurun"}, fromDocker: true,
			globals: []string{"--tlsverify=false"}, env: []string{"DOCKER_TLS_VERIFY"}, rest: []string{}},
		{name: "an image named gpurun", args: []string{"gpurun", "run", "gpurun"}, fromDocker: true,
			rest: []string{"run", "gpurun"}},
		{name: "a context named like a flag value", args: []string{"--context", "gpurun", "gpurun", "version"}, fromDocker: true,
			globals: []string{"--context", "gpurun"}, env: []string{"DOCKER_HOST", "DOCKER_CONTEXT=gpurun"}, rest: []string{"version"}},
		{name: "a newer docker's option goes back to docker", args: []string{"--new-opt", "v", "gpurun", "version"}, fromDocker: true,
			globals: []string{"--new-opt", "v"}, rest: []string{"version"}},
		{name: "docker help gpurun", args: []string{"help", "gpurun"}, fromDocker: true, rest: []string{"help"}},
		{name: "docker help gpurun run", args: []string{"help", "gpurun", "run"}, fromDocker: true, rest: []string{"help", "run"}},
		{name: "completion", args: []string{"__complete", "gpurun", "inst"}, fromDocker: true, rest: []string{"__complete", "inst"}},
		{name: "by hand: plain gpurun", args: []string{"--dry-run", "run", "gpurun"}, rest: []string{"--dry-run", "run", "gpurun"}},
		{name: "by hand, no args", args: nil, rest: nil},
		{name: "docker option without its value", args: []string{"-H"}, fromDocker: true, err: "docker option -H needs a value"},
		{name: "no plugin name", args: []string{"-D", "run"}, fromDocker: true, err: `do not name the plugin "gpurun"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			call, err := ParseCLIPluginArgs(tt.args, tt.fromDocker)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if call.Metadata != tt.meta {
				t.Errorf("Metadata = %v", call.Metadata)
			}
			if !slices.Equal(call.DockerGlobals, tt.globals) || !slices.Equal(call.Env, tt.env) || !slices.Equal(call.Args, tt.rest) {
				t.Errorf("got globals %q env %q args %q\nwant globals %q env %q args %q",
					call.DockerGlobals, call.Env, call.Args, tt.globals, tt.env, tt.rest)
			}
			// Nothing is lost: docker's options + gpurun's arguments are the
			// command line, less the plugin's name.
			if !tt.meta && tt.fromDocker && !strings.HasPrefix(tt.name, "docker help") && tt.name != "completion" {
				if got := len(call.DockerGlobals) + len(call.Args) + 1; got != len(tt.args) {
					t.Errorf("%d arguments of %d accounted for", got, len(tt.args))
				}
			}
		})
	}
}

func TestApplyCLIPluginEnv(t *testing.T) {
	for _, k := range []string{"GPURUN_TEST_DOCKER", cliPluginOrigCommandEnv, cliPluginSocketEnv, "DOCKER_HOST", "DOCKER_CONTEXT"} {
		t.Setenv(k, "")
	}
	t.Setenv(cliPluginOrigCommandEnv, "/usr/local/bin/docker")
	t.Setenv(cliPluginSocketEnv, "@docker_cli_123")
	t.Setenv("DOCKER_HOST", "unix:///old.sock")
	call := CLIPluginCall{Env: []string{"DOCKER_HOST", "DOCKER_CONTEXT=gpu1"}}
	if err := ApplyCLIPluginEnv(call, "GPURUN_TEST_DOCKER"); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"GPURUN_TEST_DOCKER": "/usr/local/bin/docker", // the docker that ran the plugin runs the container
		"DOCKER_CONTEXT":     "gpu1",
	} {
		if got := os.Getenv(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"DOCKER_HOST", cliPluginOrigCommandEnv, cliPluginSocketEnv} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s = %q, want unset", k, v)
		}
	}

	// GPURUN_DOCKER set by the user wins over the docker that ran us.
	t.Setenv(cliPluginOrigCommandEnv, "/usr/local/bin/docker")
	t.Setenv("GPURUN_TEST_DOCKER", "/opt/docker")
	if err := ApplyCLIPluginEnv(CLIPluginCall{}, "GPURUN_TEST_DOCKER"); err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv("GPURUN_TEST_DOCKER"); got != "/opt/docker" {
		t.Errorf("GPURUN_TEST_DOCKER = %q", got)
	}
}

func TestCLIPluginDir(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	abs, err := filepath.Abs("rel/dir")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		dir    string
		system bool
		getenv func(string) string
		want   string
		err    string
	}{
		{"DOCKER_CONFIG", "", false, env("DOCKER_CONFIG", "/cfg", "HOME", "/home/u"), "/cfg/cli-plugins", ""},
		{"HOME", "", false, env("HOME", "/home/u"), "/home/u/.docker/cli-plugins", ""},
		{"--dir wins", "/x", false, env("DOCKER_CONFIG", "/cfg"), "/x", ""},
		{"--dir relative", "rel/dir", false, env(), abs, ""},
		{"--system", "", true, env("DOCKER_CONFIG", "/cfg"), SystemCLIPluginDir, ""},
		{"both", "/x", true, env(), "", "choose one"},
		{"nothing to go by", "", false, env(), "", "use --dir"},
	}
	for _, tt := range tests {
		got, err := CLIPluginDir(tt.dir, tt.system, tt.getenv)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: err %v, want %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: %q %v, want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestCLIPluginInstallUninstall(t *testing.T) {
	tmp := t.TempDir()
	target := filepath.Join(tmp, "bin", "gpurun")
	other := filepath.Join(tmp, "old", "gpurun")
	for _, p := range []string{target, other} {
		write(t, p, "#!/bin/sh\n")
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(tmp, "docker", "cli-plugins")
	var out bytes.Buffer
	p := CLIPlugin{Dir: dir, Target: target, Out: &out}
	link := filepath.Join(dir, CLIPluginFile)
	linksTo := func() string {
		t.Helper()
		got, err := os.Readlink(link)
		if err != nil {
			return ""
		}
		return got
	}

	dry := p
	dry.DryRun = true
	if err := dry.Install(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("dry run created %s", dir)
	}
	if !strings.Contains(out.String(), "would link "+link+" -> "+target) {
		t.Errorf("dry run said %q", out.String())
	}

	if err := p.Install(); err != nil {
		t.Fatal(err)
	}
	if got := linksTo(); got != target {
		t.Fatalf("link -> %q, want %q", got, target)
	}
	out.Reset()
	if err := p.Install(); err != nil || !strings.Contains(out.String(), "already installed") {
		t.Errorf("second install: %v %q", err, out.String())
	}

	// A link to another gpurun is re-pointed.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := p.Install(); err != nil || linksTo() != target || !strings.Contains(out.String(), "(was -> "+other+")") {
		t.Errorf("re-point: %v -> %q %q", err, linksTo(), out.String())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("left behind in %s: %v", dir, entries)
	}

	// Uninstall: dry run keeps it, then it goes, then a second is a no-op.
	dry.Out = &out
	if err := dry.Uninstall(); err != nil || linksTo() != target {
		t.Errorf("dry uninstall: %v, link -> %q", err, linksTo())
	}
	if err := p.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("still there after uninstall: %v", err)
	}
	out.Reset()
	if err := p.Uninstall(); err != nil || !strings.Contains(out.String(), "not installed") {
		t.Errorf("second uninstall: %v %q", err, out.String())
	}

	// Something that is not a link is not ours to replace.
	write(t, link, "a binary somebody copied here\n")
	if err := p.Install(); err == nil || !strings.Contains(err.Error(), "not a symbolic link") {
		t.Errorf("over a regular file: %v", err)
	}
	if read(t, link) != "a binary somebody copied here\n" {
		t.Error("regular file changed")
	}

	for name, bad := range map[string]CLIPlugin{
		"relative target":  {Dir: dir, Target: "gpurun", Out: &out},
		"missing target":   {Dir: dir, Target: filepath.Join(tmp, "nope"), Out: &out},
		"directory target": {Dir: dir, Target: tmp, Out: &out},
	} {
		if err := bad.Install(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// write writes data to path, making its directory.
func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// read returns the content of path.
func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
