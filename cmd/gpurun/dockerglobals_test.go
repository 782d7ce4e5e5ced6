package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/docker/runargs"
)

// dryDispatch is main's dispatch of a gpurun command line (after the CLI
// plugin's part, if any), with --dry-run's output returned instead of an
// exec.
func dryDispatch(t *testing.T, g *globals, args []string) (string, error) {
	t.Helper()
	rest, err := splitGlobals(args, g)
	if err != nil {
		return "", err
	}
	command, dockerArgs, ok, err := isRunInvocation(newRootCmd(&globals{}), rest, g)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", nil
	}
	var out, errOut bytes.Buffer
	if err := runDocker(g, command, dockerArgs, &out, &errOut); err != nil {
		t.Fatalf("%q: %v: %s", args, err, errOut.String())
	}
	return out.String(), nil
}

// globalSpellings returns each way to write a docker global option with a
// value that works here: --name value, --name=value, -x value, -xvalue.
func globalSpellings(t *testing.T, f runargs.Flag) [][]string {
	value := map[string]string{
		"config": t.TempDir(), "context": "gpurun-test-ctx", "host": "unix:///nonexistent/docker.sock",
		"log-level": "debug", "tlscacert": "/nonexistent/ca.pem", "tlscert": "/nonexistent/cert.pem",
		"tlskey": "/nonexistent/key.pem",
	}[f.Name]
	if !f.TakesValue {
		s := [][]string{{"--" + f.Name}, {"--" + f.Name + "=true"}}
		if f.Shorthand != "" {
			s = append(s, []string{"-" + f.Shorthand})
		}
		return s
	}
	s := [][]string{{"--" + f.Name, value}, {"--" + f.Name + "=" + value}}
	if f.Shorthand != "" {
		s = append(s, []string{"-" + f.Shorthand, value}, []string{"-" + f.Shorthand + value})
	}
	return s
}

// TestDockerGlobalsEveryCommand: every docker global option, in every
// spelling, before run, create, container run and container create, reaches
// docker in place and in order, and the container is sized the same — for
// gpurun and for docker gpurun (the CLI plugin).
func TestDockerGlobalsEveryCommand(t *testing.T) {
	const docker = "/usr/local/bin/docker"
	runArgs := []string{"--rm", "-e", "NVIDIA_VISIBLE_DEVICES=all", "--memory", "4g", "busybox", "true"}
	commands := [][]string{{"run"}, {"create"}, {"container", "run"}, {"container", "create"}}
	const sized = " --shm-size=2147483648 --rm -e NVIDIA_VISIBLE_DEVICES=all --memory 4g busybox true\n"
	for _, f := range runargs.GlobalFlags() {
		if f.Name == "help" || f.Name == "version" {
			continue // gpurun's own --help and --version
		}
		for _, opt := range globalSpellings(t, f) {
			for _, cmd := range commands {
				name := strings.Join(opt, " ") + " " + strings.Join(cmd, " ")
				t.Run(name, func(t *testing.T) {
					want := docker + " " + strings.Join(opt, " ") + " " + strings.Join(cmd, " ") + sized
					args := append(append(append([]string{"--dry-run"}, opt...), cmd...), runArgs...)

					pluginEnv(t, DockerEnv, docker)
					out, err := dryDispatch(t, &globals{}, args)
					if err != nil || !strings.HasPrefix(out, want) {
						t.Errorf("gpurun %q:\n%s(err %v)\nwant:\n%s", args, out, err, want)
					}
					// Also with gpurun's options after docker's, and -v.
					args = append(append(append(append([]string{}, opt...), "-v", "--dry-run"), cmd...), runArgs...)
					if out, err := dryDispatch(t, &globals{}, args); err != nil || !strings.HasPrefix(out, want) {
						t.Errorf("gpurun %q:\n%s(err %v)\nwant:\n%s", args, out, err, want)
					}

					pluginEnv(t, "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND", docker, "DOCKER_CLI_PLUGIN_SOCKET", "@x")
					g := &globals{}
					var errOut bytes.Buffer
					pargs := append(append(append(append([]string{}, opt...), "gpurun", "--dry-run"), cmd...), runArgs...)
					rest, code, done := fromDockerCLI(g, pargs, &bytes.Buffer{}, &errOut)
					if done {
						t.Fatalf("docker-gpurun %q: done early, exit %d: %s", pargs, code, errOut.String())
					}
					if out, err := dryDispatch(t, g, rest); err != nil || !strings.HasPrefix(out, want) {
						t.Errorf("docker %q:\n%s(err %v)\nwant:\n%s", pargs, out, err, want)
					}
					// And docker's options after the plugin's name.
					pargs = append(append(append([]string{"gpurun", "--dry-run"}, opt...), cmd...), runArgs...)
					pluginEnv(t, "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND", docker, "DOCKER_CLI_PLUGIN_SOCKET", "@x")
					g = &globals{}
					if rest, _, done = fromDockerCLI(g, pargs, &bytes.Buffer{}, &errOut); done {
						t.Fatalf("docker-gpurun %q: done early: %s", pargs, errOut.String())
					}
					if out, err := dryDispatch(t, g, rest); err != nil || !strings.HasPrefix(out, want) {
						t.Errorf("docker %q:\n%s(err %v)\nwant:\n%s", pargs, out, err, want)
					}
				})
			}
		}
	}
}

// TestDockerGlobalsOrder: several docker options keep their order and
// spelling; gpurun's own are taken out wherever they are among them.
func TestDockerGlobalsOrder(t *testing.T) {
	pluginEnv(t, DockerEnv, "/usr/local/bin/docker")
	dir := t.TempDir()
	args := []string{"-D", "--dry-run", "--config", dir, "-l=warn", "-v", "-H", "unix:///nonexistent.sock", "--tlsverify=false", "container", "create", "--name", "x", "busybox"}
	out, err := dryDispatch(t, &globals{}, args)
	want := "/usr/local/bin/docker -D --config " + dir + " -l=warn -H unix:///nonexistent.sock --tlsverify=false container create --name x busybox\n"
	if err != nil || !strings.HasPrefix(out, want) {
		t.Errorf("%q:\n%s(err %v)\nwant:\n%s", args, out, err, want)
	}
}

// TestConfigFileOrDir: --config naming a directory is docker's (kept for
// docker); naming anything else it is gpurun's policy file, as it always
// was; --policy is always gpurun's.
func TestConfigFileOrDir(t *testing.T) {
	pluginEnv(t, DockerEnv, "/usr/local/bin/docker")
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pol, []byte("min = \"3g\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := []string{"--dry-run", "run", "-e", "NVIDIA_VISIBLE_DEVICES=all", "--memory", "2g", "busybox"}
	tests := []struct {
		opts       []string
		dockerOpts string
		size       string
	}{
		{[]string{"--config", dir}, "--config " + dir + " ", "--shm-size=1073741824"},
		{[]string{"--config=" + dir}, "--config=" + dir + " ", "--shm-size=1073741824"},
		{[]string{"--config", pol}, "", "--shm-size=3221225472"},
		{[]string{"--policy", pol}, "", "--shm-size=3221225472"},
		{[]string{"--config", dir, "--policy=" + pol}, "--config " + dir + " ", "--shm-size=3221225472"},
	}
	for _, tt := range tests {
		g := &globals{}
		out, err := dryDispatch(t, g, append(append([]string{}, tt.opts...), run...))
		want := "/usr/local/bin/docker " + tt.dockerOpts + "run " + tt.size + " "
		if err != nil || !strings.HasPrefix(out, want) {
			t.Errorf("%q:\n%s(err %v)\nwant prefix %q", tt.opts, out, err, want)
		}
	}
	// A --config that names nothing is the policy file, missing: an error naming it.
	g := &globals{}
	rest, err := splitGlobals([]string{"--config", filepath.Join(dir, "nope"), "run", "img"}, g)
	if err != nil || g.configPath != filepath.Join(dir, "nope") || len(g.dockerGlobals) != 0 || rest[0] != "run" {
		t.Errorf("--config missing: %v %+v %q", err, g, rest)
	}
	if _, err := g.loadPolicy(); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("--config missing: policy load error %v", err)
	}
}

// TestOtherCommands: what gpurun does with command lines that are not a
// container run or create.
func TestOtherCommands(t *testing.T) {
	pluginEnv(t, DockerEnv, "/usr/local/bin/docker")
	tests := []struct {
		args    []string
		wantErr string // "" = no error
		run     bool
	}{
		{[]string{"ps"}, `"ps" is a docker command gpurun does not wrap: run docker ps directly`, false},
		{[]string{"--dry-run", "exec", "-it", "c", "sh"}, `"exec" is a docker command`, false},
		{[]string{"container", "ls"}, `"container ls" is a docker command`, false},
		{[]string{"-H", "unix:///x", "start", "c"}, `"start" is a docker command`, false},
		{[]string{"-H", "unix:///x", "plan", "--spec", "x"}, "gpurun plan does not use them", false},
		{[]string{"--context", "c", "version"}, "gpurun version does not use them", false},
		{[]string{"-H", "unix:///x"}, "no command follows them", false},
		{[]string{"--tls=maybe", "run", "img"}, "--tls", false},
		{[]string{"-H"}, "-H: flag needs an argument", false},
		{[]string{"version"}, "", false},
		{[]string{"--help"}, "", false},
		{[]string{"-v", "--help"}, "", false},
		{[]string{"--dry-run", "run", "ps"}, "", true},                  // an image named ps
		{[]string{"--dry-run", "-it", "busybox", "ps"}, "", true},       // docker run's options: the short form
		{[]string{"--dry-run", "-H", "unix:///x", "busybox"}, "", true}, // the short form after docker's options
	}
	for _, tt := range tests {
		out, err := dryDispatch(t, &globals{}, tt.args)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: error %v, want %q", tt.args, err, tt.wantErr)
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tt.args, err)
		case tt.run != (out != ""):
			t.Errorf("%q: docker run %v, output %q", tt.args, tt.run, out)
		}
	}
}
