package launch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/docker/cliplugin"
	"github.com/gpurun/gpurun/docker/runargs"
	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/internal/version"
)

// subcommands are the names of gpurun's own subcommands, as its command
// tree knows them.
var subcommands = []string{"run", "create", "install", "uninstall", "version", "hook", "explain", "shm-probe",
	"completion", "plan", "resize", "node", "nri", "webhook", "doctor", "stats", "compose", "__gendocs", "help"}

func isSubcommand(name string) bool { return slices.Contains(subcommands, name) }

// testEnv is the process's Env with the output in buffers and an exec that
// fails the test.
func testEnv(t *testing.T) (Env, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := OSEnv()
	env.Stdout, env.Stderr = &out, &errOut
	env.Exec = func(path string, argv, _ []string) error {
		t.Errorf("exec %s %q in a dry run", path, argv)
		return errors.New("no exec in tests")
	}
	return env, &out, &errOut
}

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

// dryDispatch is main's dispatch of a gpurun command line (after the CLI
// plugin's part, if any), with --dry-run's output returned instead of an
// exec: "" when the command line is not a docker run.
func dryDispatch(t *testing.T, o *Options, args []string) (string, error) {
	t.Helper()
	env, out, errOut := testEnv(t)
	if _, _, err := Dispatch(args, o, isSubcommand, env); err != nil {
		return "", fmt.Errorf("%w (stderr %q)", err, errOut.String())
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

// fromPlugin is main's part for docker-gpurun: FromDockerCLI, then the
// dry-run dispatch of what it returns.
func fromPlugin(t *testing.T, args []string) (string, error) {
	t.Helper()
	o := &Options{}
	env, _, _ := testEnv(t)
	rest, done, err := FromDockerCLI(args, o, "short", env)
	if done {
		t.Fatalf("docker-gpurun %q: done early: %v", args, err)
	}
	return dryDispatch(t, o, rest)
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
					out, err := dryDispatch(t, &Options{}, args)
					if err != nil || !strings.HasPrefix(out, want) {
						t.Errorf("gpurun %q:\n%s(err %v)\nwant:\n%s", args, out, err, want)
					}
					// Also with gpurun's options after docker's, and -v.
					args = append(append(append(append([]string{}, opt...), "-v", "--dry-run"), cmd...), runArgs...)
					if out, err := dryDispatch(t, &Options{}, args); err != nil || !strings.HasPrefix(out, want) {
						t.Errorf("gpurun %q:\n%s(err %v)\nwant:\n%s", args, out, err, want)
					}

					pluginEnv(t, "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND", docker, "DOCKER_CLI_PLUGIN_SOCKET", "@x")
					pargs := append(append(append(append([]string{}, opt...), "gpurun", "--dry-run"), cmd...), runArgs...)
					if out, err := fromPlugin(t, pargs); err != nil || !strings.HasPrefix(out, want) {
						t.Errorf("docker %q:\n%s(err %v)\nwant:\n%s", pargs, out, err, want)
					}
					// And docker's options after the plugin's name.
					pargs = append(append(append([]string{"gpurun", "--dry-run"}, opt...), cmd...), runArgs...)
					pluginEnv(t, "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND", docker, "DOCKER_CLI_PLUGIN_SOCKET", "@x")
					if out, err := fromPlugin(t, pargs); err != nil || !strings.HasPrefix(out, want) {
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
	out, err := dryDispatch(t, &Options{}, args)
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
	// 4 GiB: the default policy gives half (2 GiB), the file's min 3 GiB
	// (which leaves the processes memory_reserve's 25 %).
	run := []string{"--dry-run", "run", "-e", "NVIDIA_VISIBLE_DEVICES=all", "--memory", "4g", "busybox"}
	tests := []struct {
		opts       []string
		dockerOpts string
		size       string
	}{
		{[]string{"--config", dir}, "--config " + dir + " ", "--shm-size=2147483648"},
		{[]string{"--config=" + dir}, "--config=" + dir + " ", "--shm-size=2147483648"},
		{[]string{"--config", pol}, "", "--shm-size=3221225472"},
		{[]string{"--policy", pol}, "", "--shm-size=3221225472"},
		{[]string{"--config", dir, "--policy=" + pol}, "--config " + dir + " ", "--shm-size=3221225472"},
	}
	for _, tt := range tests {
		out, err := dryDispatch(t, &Options{}, append(append([]string{}, tt.opts...), run...))
		want := "/usr/local/bin/docker " + tt.dockerOpts + "run " + tt.size + " "
		if err != nil || !strings.HasPrefix(out, want) {
			t.Errorf("%q:\n%s(err %v)\nwant prefix %q", tt.opts, out, err, want)
		}
	}
	// A --config that names nothing is the policy file, missing: an error naming it.
	o := &Options{}
	rest, err := ParseOptions([]string{"--config", filepath.Join(dir, "nope"), "run", "img"}, o, OSEnv())
	if err != nil || o.ConfigPath != filepath.Join(dir, "nope") || len(o.DockerGlobals) != 0 || rest[0] != "run" {
		t.Errorf("--config missing: %v %+v %q", err, o, rest)
	}
	if _, err := o.LoadPolicy(os.Getenv); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("--config missing: policy load error %v", err)
	}
	// And a docker run with it fails with exit status 2, naming it.
	if _, err := dryDispatch(t, &Options{}, []string{"--config", filepath.Join(dir, "nope"), "--dry-run", "run", "img"}); exitcode.Of(err) != 2 || !strings.Contains(err.Error(), "nope") {
		t.Errorf("docker run with --config missing: %v (exit %d), want exit 2 naming it", err, exitcode.Of(err))
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
		out, err := dryDispatch(t, &Options{}, tt.args)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: error %v, want %q", tt.args, err, tt.wantErr)
		case tt.wantErr != "" && exitcode.Of(err) != 2:
			t.Errorf("%q: exit %d, want 2", tt.args, exitcode.Of(err))
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tt.args, err)
		case tt.run != (out != ""):
			t.Errorf("%q: docker run %v, output %q", tt.args, tt.run, out)
		}
	}
}

// TestParseCommand: which command lines are a docker run, with what
// options, and the arguments docker gets.
func TestParseCommand(t *testing.T) {
	tests := []struct {
		args    []string
		run     bool
		dry     bool
		cfg     string
		command string
		dockArg []string
	}{
		{[]string{"run", "-it", "img"}, true, false, "", "run", []string{"-it", "img"}},
		{[]string{"-it", "img", "sh"}, true, false, "", "run", []string{"-it", "img", "sh"}},
		{[]string{"--dry-run", "img"}, true, true, "", "run", []string{"img"}},
		{[]string{"--config", "/c.toml", "-v", "run", "--rm", "img"}, true, false, "/c.toml", "run", []string{"--rm", "img"}},
		{[]string{"--config=/c.toml", "run", "img"}, true, false, "/c.toml", "run", []string{"img"}},
		{[]string{"container", "create", "img"}, true, false, "", "container create", []string{"img"}},
		{[]string{"plan", "--spec", "x"}, false, false, "", "", nil},
		{[]string{"version"}, false, false, "", "", nil},
		{[]string{"--help"}, false, false, "", "", nil},
		{[]string{"help", "run"}, false, false, "", "", nil},
		{[]string{"completion", "bash"}, false, false, "", "", nil},
		{[]string{"__complete", "inst"}, false, false, "", "", nil},
		{[]string{"__completeNoDesc", "run", ""}, false, false, "", "", nil},
		{[]string{"-v", "completion", "zsh"}, false, false, "", "", nil},
		{[]string{"run", "plan"}, true, false, "", "run", []string{"plan"}}, // an image named plan
	}
	pluginEnv(t)
	for _, tt := range tests {
		o := &Options{}
		rest, err := ParseOptions(tt.args, o, OSEnv())
		if err != nil {
			t.Fatal(err)
		}
		inv, ok, _ := ParseCommand(rest, *o, isSubcommand)
		if ok != tt.run || o.DryRun != tt.dry || o.ConfigPath != tt.cfg || strings.Join(inv.Command, " ") != tt.command || !slices.Equal(inv.Args, tt.dockArg) {
			t.Errorf("%q: run=%v %q args=%q dry=%v cfg=%q", tt.args, ok, inv.Command, inv.Args, o.DryRun, o.ConfigPath)
		}
	}
	if _, err := ParseOptions([]string{"--config"}, &Options{}, OSEnv()); err == nil {
		t.Error("--config without a value: no error")
	}
}

func TestOptionsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name         string
		env          map[string]string
		args         []string
		dry, verbose bool
		wantRest     string
	}{
		{"both on", map[string]string{"GPURUN_DRY_RUN": "1", "GPURUN_VERBOSE": "yes"}, []string{"run", "img"}, true, true, "run img"},
		{"TRUE", map[string]string{"GPURUN_DRY_RUN": "TRUE"}, []string{"img"}, true, false, "img"},
		{"off, the flag on", map[string]string{"GPURUN_DRY_RUN": "0", "GPURUN_VERBOSE": ""}, []string{"--dry-run", "img"}, true, false, "img"},
		{"nothing", nil, []string{"img"}, false, false, "img"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := OSEnv()
			env.Getenv = func(k string) string { return tc.env[k] }
			o := &Options{}
			rest, err := ParseOptions(tc.args, o, env)
			if err != nil || o.DryRun != tc.dry || o.Verbose != tc.verbose || strings.Join(rest, " ") != tc.wantRest {
				t.Errorf("options %+v rest %q err %v; want dry %v verbose %v rest %q", o, rest, err, tc.dry, tc.verbose, tc.wantRest)
			}
		})
	}
}

// TestRunExec: a docker run that is not a dry run replaces the process
// with the docker CLI found on PATH (or $GPURUN_DOCKER), with the
// environment as it is; no docker CLI is exit 127, an exec that fails 126.
func TestRunExec(t *testing.T) {
	pluginEnv(t, "DOCKER_HOST", "unix:///nonexistent/docker.sock")
	inv := Invocation{Command: []string{"run"}, Args: []string{"-e", "NVIDIA_VISIBLE_DEVICES=all", "--memory", "4g", "busybox"}}
	for _, tc := range []struct {
		name     string
		docker   string // $GPURUN_DOCKER
		found    string // what LookPath finds, "" for nothing
		execErr  error
		wantCode int
		wantArgv string
	}{
		{"docker on PATH", "", "/usr/bin/docker", nil, 0, "/usr/bin/docker -H unix:///x run --shm-size=2147483648 -e NVIDIA_VISIBLE_DEVICES=all --memory 4g busybox"},
		{"GPURUN_DOCKER", "/opt/docker", "/opt/docker", nil, 0, "/opt/docker -H unix:///x run --shm-size=2147483648 -e NVIDIA_VISIBLE_DEVICES=all --memory 4g busybox"},
		{"no docker CLI", "", "", nil, 127, ""},
		{"exec fails", "", "/usr/bin/docker", errors.New("exec format error"), 126, "/usr/bin/docker -H unix:///x run --shm-size=2147483648 -e NVIDIA_VISIBLE_DEVICES=all --memory 4g busybox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, _, _ := testEnv(t)
			env.Getenv = func(k string) string { return map[string]string{DockerEnv: tc.docker}[k] }
			env.Environ = func() []string { return []string{"A=1"} }
			var looked string
			env.LookPath = func(name string) (string, error) {
				looked = name
				if tc.found == "" {
					return "", errors.New("executable file not found in $PATH")
				}
				return tc.found, nil
			}
			var gotArgv, gotEnv []string
			env.Exec = func(path string, argv, environ []string) error {
				if path != argv[0] {
					t.Errorf("exec %s with argv[0] %s", path, argv[0])
				}
				gotArgv, gotEnv = argv, environ
				return tc.execErr
			}
			err := Run(inv, Options{DockerGlobals: []string{"-H", "unix:///x"}}, env)
			if exitcode.Of(err) != tc.wantCode {
				t.Errorf("Run: %v (exit %d), want exit %d", err, exitcode.Of(err), tc.wantCode)
			}
			if want := map[bool]string{true: tc.docker, false: "docker"}[tc.docker != ""]; looked != want {
				t.Errorf("looked for %q, want %q", looked, want)
			}
			if strings.Join(gotArgv, " ") != tc.wantArgv || (tc.wantArgv != "" && !slices.Equal(gotEnv, []string{"A=1"})) {
				t.Errorf("exec %q env %q, want %q env [A=1]", gotArgv, gotEnv, tc.wantArgv)
			}
		})
	}
}

func TestDockerCLIPluginMetadata(t *testing.T) {
	pluginEnv(t)
	env, out, _ := testEnv(t)
	_, done, err := FromDockerCLI([]string{cliplugin.CLIPluginMetadataCommand}, &Options{}, "the short one", env)
	if !done || err != nil {
		t.Fatalf("done %v err %v", done, err)
	}
	var meta map[string]string
	dec := json.NewDecoder(out)
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
		"ShortDescription": "the short one",
		"URL":              cliplugin.CLIPluginURL,
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

	pluginEnv(t, DockerEnv, "/usr/local/bin/docker", "DOCKER_HOST", host)
	plain, err := dryDispatch(t, &Options{}, runArgs)
	if err != nil {
		t.Fatal(err)
	}

	pluginEnv(t, "DOCKER_CLI_PLUGIN_ORIGINAL_CLI_COMMAND", "/usr/local/bin/docker", "DOCKER_CLI_PLUGIN_SOCKET", "@x")
	viaPlugin, err := fromPlugin(t, append([]string{"-H", host, "gpurun"}, runArgs...))
	if err != nil {
		t.Fatal(err)
	}
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
	env, _, _ := testEnv(t)
	_, done, err := FromDockerCLI([]string{"-H"}, &Options{}, "short", env)
	if !done || exitcode.Of(err) != 2 || !strings.Contains(err.Error(), "-H needs a value") {
		t.Errorf("done %v err %v (exit %d)", done, err, exitcode.Of(err))
	}
}
