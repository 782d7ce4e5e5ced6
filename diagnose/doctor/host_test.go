package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	toml "github.com/pelletier/go-toml/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/docker"
	"github.com/gpurun/gpurun/node/hook"
	"github.com/gpurun/gpurun/policy"
)

// dockerData is the daemon.json files of the Docker editor's tests: real
// files, and what gpurun install makes of them.
const dockerData = "../../engine/docker/testdata"

// containerdData is the containerd configs of the containerd editor's
// tests: real config.toml files, and what gpurun install makes of them.
const containerdData = "../../engine/containerd/testdata"

// The path gpurun-runtime has in engineconf's golden files.
const goldenRuntime = "/usr/local/bin/gpurun-runtime"

type fakeDocker struct {
	info       system.Info
	infoErr    error
	containers map[string]container.InspectResponse
}

func (d *fakeDocker) Info(context.Context) (system.Info, error) { return d.info, d.infoErr }

func (d *fakeDocker) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	c, ok := d.containers[id]
	if !ok {
		return c, errors.New("No such container: " + id)
	}
	return c, nil
}

// loadedInfo is what a dockerd that loaded daemon.json data reports.
func loadedInfo(t *testing.T, data []byte) system.Info {
	t.Helper()
	info := system.Info{ServerVersion: "20.10.24", DefaultRuntime: "runc", Runtimes: map[string]system.RuntimeWithStatus{"runc": {Runtime: system.Runtime{Path: "runc"}}}}
	cfg, err := docker.ReadDaemonJSON("daemon.json", data)
	if err != nil {
		t.Fatal(err)
	}
	for n, rt := range cfg.Runtimes {
		info.Runtimes[n] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: rt.Path, Args: rt.Args}}
	}
	if cfg.DefaultRuntime != "" {
		info.DefaultRuntime = cfg.DefaultRuntime
	}
	return info
}

// hostFake is a fake host: a root with runc and a tmpfs /dev/shm.
func hostFake(t *testing.T) *fakeSystem {
	f := newFake(t)
	f.namespaces(hostPIDNS, hostIPCNS)
	f.fs["/dev/shm"] = FS{Tmpfs: true, Size: fakeHostMemory / 2}
	f.executable("/usr/sbin/runc")
	return f
}

func hostReport(f *fakeSystem, o HostOptions) *Report {
	if o.Policy.Path == "" {
		o.Policy.Path = policy.DefaultConfigPath
	}
	if o.DockerHost == "" {
		o.DockerHost = "unix:///var/run/docker.sock"
	}
	return Host(context.Background(), f.system(), o)
}

func TestHostNothingInstalled(t *testing.T) {
	f := hostFake(t)
	r := hostReport(f, HostOptions{DockerErr: errors.New("connection refused")})
	for name, want := range map[string]Status{"docker": OK, "containerd": OK, "hooks": OK, "host.shm": OK, "policy": OK} {
		if c := check(t, r, name); c.Status != want {
			t.Errorf("%s: %s (%s), want %s", name, c.Status, c.Detail, want)
		}
	}
	if _, ok := r.Find("runtime.chain"); ok {
		t.Error("runtime.chain without gpurun-runtime registered anywhere")
	}
	if r.ExitCode != 0 {
		t.Errorf("exit %d\n%s", r.ExitCode, text(r))
	}
}

// TestHostDockerConfigs runs the Docker checks over every daemon.json of
// engineconf's tests: the inputs (gpurun not registered) and the golden
// results of installing it (registered; "-default": the default runtime),
// each with a daemon that loaded it.
func TestHostDockerConfigs(t *testing.T) {
	inputs, _ := filepath.Glob(filepath.Join(dockerData, "*.json"))
	golden, _ := filepath.Glob(filepath.Join(dockerData, "golden", "*.json"))
	if len(inputs) == 0 || len(golden) == 0 {
		t.Fatal("no engineconf docker test data")
	}
	pol := policy.Default()
	for _, file := range append(inputs, golden...) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			f := hostFake(t)
			f.write(DefaultDockerConfig, string(data))
			f.executable(goldenRuntime)
			cfg, err := docker.ReadDaemonJSON(file, data)
			if err != nil {
				t.Fatal(err)
			}
			_, registered := cfg.Runtimes[RuntimeName]
			isDefault := cfg.DefaultRuntime == RuntimeName
			r := hostReport(f, HostOptions{Docker: &fakeDocker{info: loadedInfo(t, data)}})
			c := check(t, r, "docker.runtime")
			want := Warn
			if registered {
				want = OK
			}
			if c.Status != want || c.Data["registered"] != registered || c.Data["default"] != isDefault || c.Data["loaded"] != registered {
				t.Errorf("docker.runtime %s %v (%s); want %s, registered %v, default %v", c.Status, c.Data, c.Detail, want, registered, isDefault)
			}
			if !registered && !strings.Contains(c.Fix, "gpurun install docker") {
				t.Errorf("fix %q does not say how to install", c.Fix)
			}
			if s := check(t, r, "docker.config"); s.Status != OK {
				t.Errorf("docker.config %s: %s", s.Status, s.Detail)
			}
			// default-shm-size: the daemon's own, judged against the policy.
			wantShm := OK
			if cfg.DefaultShmSize != "" {
				if n, err := policy.ParseSize(cfg.DefaultShmSize); err != nil {
					wantShm = Problem
				} else if n < pol.Min {
					wantShm = Warn
				}
			}
			if s := check(t, r, "docker.default-shm-size"); s.Status != wantShm {
				t.Errorf("default-shm-size %s (%s), want %s", s.Status, s.Detail, wantShm)
			}
			// An NVIDIA runtime that gpurun replaced as the default must be
			// chained to.
			chain, hasChain := r.Find("runtime.chain")
			if hasChain != registered {
				t.Errorf("runtime.chain present %v, want %v", hasChain, registered)
			}
			if nv := nvidiaRuntime(runtimePaths(cfg)); hasChain && isDefault && nv != "" && chain.Status != Warn {
				t.Errorf("runtime.chain %s (%s): gpurun is the default over NVIDIA's %s, but the policy execs runc", chain.Status, chain.Detail, nv)
			}
			// engineconf's golden files register gpurun-runtime without the
			// data-root gpurun install adds to runtimeArgs: covered by the
			// default engine_roots, that is a warning; not covered, a problem.
			wantProblems := 0
			if registered {
				dr := check(t, r, "docker.data-root")
				root := cfg.DataRoot
				if root == "" {
					root = "/var/lib/docker"
				}
				wantDR, wantIn := Warn, "not told"
				switch {
				case cfg.UsernsRemap != "":
					// The fake host has no /etc/passwd, and the daemon
					// does not say: the directory is not known.
					wantIn = "userns-remap cannot be resolved"
				case !underRoots(root, pol.EngineRoots):
					wantDR, wantProblems = Problem, 1
				}
				if dr.Status != wantDR || !strings.Contains(dr.Detail, wantIn) || !strings.Contains(dr.Fix, "gpurun install docker") {
					t.Errorf("docker.data-root %s (%s), fix %q; want %s with %q", dr.Status, dr.Detail, dr.Fix, wantDR, wantIn)
				}
			} else if _, ok := r.Find("docker.data-root"); ok {
				t.Error("docker.data-root without gpurun-runtime registered")
			}
			if r.Count(Problem) != wantProblems || (wantProblems == 0) != (r.ExitCode == 0) {
				t.Errorf("exit %d\n%s", r.ExitCode, text(r))
			}
		})
	}
}

func TestHostDockerProblems(t *testing.T) {
	installed := `{"runtimes": {"gpurun": {"path": "` + goldenRuntime + `"}}, "default-runtime": "gpurun"}`
	tests := []struct {
		name      string
		file      string
		binary    bool
		info      func(system.Info) system.Info
		infoErr   error
		check     string
		want      Status
		wantIn    string
		wantExit  int
		wantInFix string
	}{
		{"registered and loaded", installed, true, nil, nil, "docker.runtime", OK, "dockerd's default", 0, ""},
		{"registered, dockerd not reloaded", installed, true, func(i system.Info) system.Info {
			delete(i.Runtimes, "gpurun")
			i.DefaultRuntime = "runc"
			return i
		}, nil, "docker.runtime", Problem, "has not loaded it", 1, "kill -HUP"},
		{"default in the file, not in the daemon", installed, true, func(i system.Info) system.Info {
			i.DefaultRuntime = "runc"
			return i
		}, nil, "docker.runtime", Problem, "default is runc", 1, "kill -HUP"},
		{"gpurun-runtime missing", installed, false, nil, nil, "docker.runtime", Problem, "does not exist", 1, "--runtime-path"},
		{"still loaded after uninstall", `{}`, true, func(i system.Info) system.Info {
			i.Runtimes["gpurun"] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: goldenRuntime}}
			return i
		}, nil, "docker.runtime", Warn, "no longer registers it", 0, "restart"},
		{"daemon unreachable", installed, true, nil, errors.New("dial unix: connection refused"), "docker.daemon", Warn, "connection refused", 0, ""},
		{"broken daemon.json", "{\n  \"runtimes\": {\n    \"gpurun\": {\"path\": \"x\"},\n  }\n}\n", true, nil, nil, "docker.config", Problem, "daemon.json:4:3", 1, "correct the file"},
		{"default-shm-size below the minimum", `{"default-shm-size": "256m"}`, true, nil, nil, "docker.default-shm-size", Warn, "256MiB", 0, `"1g"`},
		{"default-shm-size above the minimum", `{"default-shm-size": "2g"}`, true, nil, nil, "docker.default-shm-size", OK, "2GiB", 0, ""},
		{"default-shm-size unreadable", `{"default-shm-size": "lots"}`, true, nil, nil, "docker.default-shm-size", Problem, `"lots"`, 1, ""},
		{"the policy's runtime is gpurun-runtime itself", installed, true, nil, nil, "-", OK, "", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			f.write(DefaultDockerConfig, tt.file)
			if tt.binary {
				f.executable(goldenRuntime)
			}
			var info system.Info
			if json.Valid([]byte(tt.file)) {
				info = loadedInfo(t, []byte(tt.file))
			}
			if tt.info != nil {
				info = tt.info(info)
			}
			r := hostReport(f, HostOptions{Docker: &fakeDocker{info: info, infoErr: tt.infoErr}})
			if tt.check == "-" {
				return
			}
			c := check(t, r, tt.check)
			if c.Status != tt.want || !strings.Contains(c.Detail, tt.wantIn) || !strings.Contains(c.Fix, tt.wantInFix) {
				t.Errorf("%s: %s %q fix %q; want %s with %q, fix with %q", tt.check, c.Status, c.Detail, c.Fix, tt.want, tt.wantIn, tt.wantInFix)
			}
			if r.ExitCode != tt.wantExit {
				t.Errorf("exit %d, want %d\n%s", r.ExitCode, tt.wantExit, text(r))
			}
		})
	}
}

// TestHostChain: the runtime gpurun-runtime hands over to.
func TestHostChain(t *testing.T) {
	const nvidia = "/usr/bin/nvidia-container-runtime"
	tests := []struct {
		name     string
		policy   string
		binaries []string
		want     Status
		wantIn   string
	}{
		{"runc found", "", []string{"/usr/sbin/runc"}, OK, "/usr/sbin/runc"},
		{"runc missing", "", nil, Problem, "runc is not in"},
		{"itself", `runtime = "` + goldenRuntime + `"` + "\n", nil, Problem, "gpurun-runtime itself"},
		{"nvidia default replaced, runc chained", "", []string{"/usr/sbin/runc", nvidia}, Warn, "NVIDIA runtime"},
		{"nvidia chained", `runtime = "` + nvidia + `"` + "\n", []string{nvidia}, OK, nvidia},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			if err := os.Remove(filepath.Join(f.root, "/usr/sbin/runc")); err != nil {
				t.Fatal(err)
			}
			f.executable(goldenRuntime)
			for _, b := range tt.binaries {
				f.executable(b)
			}
			if tt.policy != "" {
				f.write(policy.DefaultConfigPath, tt.policy)
			}
			file := `{"runtimes": {"gpurun": {"path": "` + goldenRuntime + `"}, "nvidia": {"path": "nvidia-container-runtime"}}, "default-runtime": "gpurun"}`
			if !strings.HasPrefix(tt.name, "nvidia") {
				file = `{"runtimes": {"gpurun": {"path": "` + goldenRuntime + `"}}, "default-runtime": "gpurun"}`
			}
			f.write(DefaultDockerConfig, file)
			r := hostReport(f, HostOptions{Docker: &fakeDocker{info: loadedInfo(t, []byte(file))}})
			c := check(t, r, "runtime.chain")
			if c.Status != tt.want || !strings.Contains(c.Detail, tt.wantIn) {
				t.Errorf("runtime.chain %s %q; want %s with %q", c.Status, c.Detail, tt.want, tt.wantIn)
			}
		})
	}
}

// dropInTarget is where a drop-in golden file goes: the file the main
// config imports, or a file its glob matches.
func dropInTarget(t *testing.T, main []byte) string {
	t.Helper()
	var cfg struct {
		Imports []string `toml:"imports"`
	}
	if err := toml.Unmarshal(main, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Imports) == 0 {
		t.Fatal("drop-in main config imports nothing")
	}
	last := cfg.Imports[len(cfg.Imports)-1]
	if !path.IsAbs(last) {
		last = path.Join(path.Dir(DefaultContainerdConfig), last)
	}
	if strings.Contains(last, "*") {
		return strings.Replace(last, "*", "99-gpurun", 1)
	}
	return last
}

// TestHostContainerdConfigs runs the containerd checks over every config
// of engineconf's tests: the inputs (no gpurun), the golden results of an
// install in place, and of a drop-in install (main config plus the
// imported file).
func TestHostContainerdConfigs(t *testing.T) {
	dir := containerdData
	inputs, _ := filepath.Glob(filepath.Join(dir, "*.toml"))
	installed, _ := filepath.Glob(filepath.Join(dir, "golden", "installed", "*.toml"))
	mains, _ := filepath.Glob(filepath.Join(dir, "golden", "dropin", "*.main.toml"))
	if len(inputs) == 0 || len(installed) == 0 || len(mains) == 0 {
		t.Fatal("no engineconf containerd test data")
	}
	type tc struct{ name, main, dropIn string }
	var cases []tc
	for _, f := range append(inputs, installed...) {
		cases = append(cases, tc{name: strings.TrimPrefix(f, dir+"/"), main: f})
	}
	for _, f := range mains {
		cases = append(cases, tc{name: strings.TrimPrefix(f, dir+"/"), main: f, dropIn: strings.TrimSuffix(f, ".main.toml") + ".dropin.toml"})
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			f.executable(goldenRuntime)
			f.executable("/usr/bin/nvidia-container-runtime")
			main, err := os.ReadFile(tt.main)
			if err != nil {
				t.Fatal(err)
			}
			f.write(DefaultContainerdConfig, string(main))
			all := [][]byte{main}
			if tt.dropIn != "" {
				f.copyFile(tt.dropIn, dropInTarget(t, main))
				d, _ := os.ReadFile(tt.dropIn)
				all = append(all, d)
			}
			// Expectations from the files: gpurun is registered when its
			// table is there, the default when default_runtime_name says so.
			registered, isDefault := false, false
			for _, data := range all {
				registered = registered || strings.Contains(string(data), "runtimes.gpurun]")
				isDefault = isDefault || strings.Contains(string(data), `default_runtime_name = "gpurun"`) || strings.Contains(string(data), `default_runtime_name = 'gpurun'`)
			}
			// NVIDIA's runtime the default without gpurun (nvidia-ctk
			// --set-as-default): gpurun chains it when it becomes the
			// default, and GPU pods bypass it when it does not.
			nvidiaDefault := strings.Contains(tt.name, "set-as-default")
			if nvidiaDefault && isDefault {
				f.write(policy.DefaultConfigPath, "runtime = \"/usr/bin/nvidia-container-runtime\"\n")
			}
			r := hostReport(f, HostOptions{DockerErr: errors.New("no docker")})
			if c := check(t, r, "containerd.config"); c.Status != OK {
				t.Fatalf("containerd.config %s: %s", c.Status, c.Detail)
			}
			c := check(t, r, "containerd.runtime")
			want := Warn
			if registered && (isDefault || !nvidiaDefault) {
				want = OK
			}
			if c.Status != want || c.Data["registered"] != registered || c.Data["default"] != isDefault {
				t.Errorf("containerd.runtime %s %v (%s); want %s, registered %v, default %v", c.Status, c.Data, c.Detail, want, registered, isDefault)
			}
			if registered {
				if a := check(t, r, "containerd.pod_annotations"); a.Status != OK {
					t.Errorf("pod_annotations %s: %s", a.Status, a.Detail)
				}
				if c.Data["binary"] != goldenRuntime {
					t.Errorf("binary %v, want %s", c.Data["binary"], goldenRuntime)
				}
			}
			if r.Count(Problem) != 0 {
				t.Errorf("problems:\n%s", text(r))
			}
		})
	}
}

func TestHostContainerdProblems(t *testing.T) {
	v2 := func(runtime string) string {
		return "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"gpurun\"\n" + runtime
	}
	tests := []struct {
		name   string
		config string
		extra  map[string]string
		check  string
		want   Status
		wantIn string
	}{
		{"binary missing", v2("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun]\n  runtime_type = \"io.containerd.runc.v2\"\n  pod_annotations = [\"gpurun.io/*\"]\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun.options]\n    BinaryName = \"/opt/gone/gpurun-runtime\"\n"),
			nil, "containerd.runtime", Problem, "/opt/gone/gpurun-runtime does not exist"},
		{"wrong runtime_type", v2("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun]\n  runtime_type = \"io.containerd.runsc.v1\"\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun.options]\n    BinaryName = \"" + goldenRuntime + "\"\n"),
			nil, "containerd.runtime", Problem, "runtime_type"},
		{"pod annotations not passed", v2("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun]\n  runtime_type = \"io.containerd.runc.v2\"\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun.options]\n    BinaryName = \"" + goldenRuntime + "\"\n"),
			nil, "containerd.pod_annotations", Warn, "gpurun.io/shm-size"},
		{"TOML syntax error", "version = 2\n[plugins\n", nil, "containerd.config", Problem, "config.toml:2:"},
		{"imported file missing", "version = 2\nimports = [\"/etc/containerd/conf.d/gpurun.toml\"]\n", nil, "containerd.config", Problem, "does not exist"},
		{"CRI plugin disabled (Docker's containerd)", "version = 2\ndisabled_plugins = [\"cri\"]\n", nil, "containerd.runtime", OK, "CRI plugin is disabled"},
		{"version 1", "[plugins.cri]\n  sandbox_image = \"pause\"\n", nil, "containerd.config", Warn, "version 1"},
		{"1.x: an imported CRI section replaces the main one", "imports = [\"conf.d/*.toml\"]\n" + v2("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun]\n  runtime_type = \"io.containerd.runc.v2\"\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gpurun.options]\n    BinaryName = \""+goldenRuntime+"\"\n"),
			map[string]string{"/etc/containerd/conf.d/x.toml": "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause:3.9\"\n"},
			"containerd.runtime", Warn, "no gpurun runtime handler"},
		{"2.x: an imported file merges key by key", "version = 3\nimports = [\"conf.d/*.toml\"]\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gpurun]\n  runtime_type = \"io.containerd.runc.v2\"\n  pod_annotations = [\"gpurun.io/*\"]\n  [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gpurun.options]\n    BinaryName = \"" + goldenRuntime + "\"\n",
			map[string]string{"/etc/containerd/conf.d/x.toml": "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\n  default_runtime_name = \"gpurun\"\n"},
			"containerd.runtime", OK, "is the default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			f.executable(goldenRuntime)
			f.write(DefaultContainerdConfig, tt.config)
			for p, c := range tt.extra {
				f.write(p, c)
			}
			r := hostReport(f, HostOptions{DockerErr: errors.New("no docker")})
			c := check(t, r, tt.check)
			if c.Status != tt.want || !strings.Contains(c.Detail, tt.wantIn) {
				t.Errorf("%s: %s %q; want %s with %q", tt.check, c.Status, c.Detail, tt.want, tt.wantIn)
			}
			if c.Status == Problem && c.Fix == "" {
				t.Error("a problem without a fix")
			}
		})
	}
}

type fakeCRI struct {
	config    string
	statusErr error
	status    map[string]*runtimeapi.ContainerStatusResponse
	// sandboxOf and handlers are the running containers' pods and the
	// pods' runtime handlers.
	sandboxOf, handlers map[string]string
}

func (c *fakeCRI) Status(context.Context, *runtimeapi.StatusRequest, ...grpc.CallOption) (*runtimeapi.StatusResponse, error) {
	if c.statusErr != nil {
		return nil, c.statusErr
	}
	return &runtimeapi.StatusResponse{Info: map[string]string{"config": c.config}}, nil
}

func (c *fakeCRI) ListContainers(context.Context, *runtimeapi.ListContainersRequest, ...grpc.CallOption) (*runtimeapi.ListContainersResponse, error) {
	if c.statusErr != nil {
		return nil, c.statusErr
	}
	resp := &runtimeapi.ListContainersResponse{}
	for _, id := range slices.Sorted(maps.Keys(c.status)) {
		st := c.status[id].GetStatus()
		resp.Containers = append(resp.Containers, &runtimeapi.Container{Id: id, PodSandboxId: c.sandboxOf[id], Metadata: st.GetMetadata(), State: st.GetState()})
	}
	return resp, nil
}

func (c *fakeCRI) PodSandboxStatus(_ context.Context, in *runtimeapi.PodSandboxStatusRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error) {
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: in.GetPodSandboxId(), RuntimeHandler: c.handlers[in.GetPodSandboxId()]}}, nil
}

func (c *fakeCRI) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest, _ ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	r, ok := c.status[in.GetContainerId()]
	if !ok {
		return nil, status.Error(codes.NotFound, "container not found")
	}
	return r, nil
}

// TestHostContainerdLoaded compares the config with what the running
// containerd reports.
func TestHostContainerdLoaded(t *testing.T) {
	installed, err := os.ReadFile(filepath.Join(containerdData, "golden", "installed", "containerd-1.6.20-config-default.default.toml"))
	if err != nil {
		t.Fatal(err)
	}
	loaded := func(def string, names ...string) string {
		rts := map[string]any{}
		for _, n := range names {
			rts[n] = map[string]any{"runtimeType": containerd.RuncV2}
		}
		data, _ := json.Marshal(map[string]any{"containerd": map[string]any{"defaultRuntimeName": def, "runtimes": rts}})
		return string(data)
	}
	tests := []struct {
		name   string
		cri    *fakeCRI
		want   Status
		wantIn string
	}{
		{"loaded", &fakeCRI{config: loaded("gpurun", "runc", "gpurun")}, OK, "runs with this config"},
		{"not restarted", &fakeCRI{config: loaded("runc", "runc")}, Problem, "has not loaded it"},
		{"default not applied", &fakeCRI{config: loaded("runc", "runc", "gpurun")}, Problem, "runs with default runc"},
		{"no CRI plugin", &fakeCRI{statusErr: status.Error(codes.Unimplemented, "unknown service runtime.v1.RuntimeService")}, OK, "serves no CRI"},
		{"unreachable", &fakeCRI{statusErr: status.Error(codes.Unavailable, "connection refused")}, Problem, "does not answer"},
		{"hung", &fakeCRI{statusErr: status.Error(codes.DeadlineExceeded, "context deadline exceeded")}, Problem, "starts and stops no pod"},
		{"another error", &fakeCRI{statusErr: status.Error(codes.Internal, "oops")}, Warn, "cannot ask"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			f.executable(goldenRuntime)
			f.write(DefaultContainerdConfig, string(installed))
			r := hostReport(f, HostOptions{DockerErr: errors.New("no docker"), CRI: tt.cri, CRIEndpoint: "unix:///run/containerd/containerd.sock"})
			c := check(t, r, "containerd.loaded")
			if c.Status != tt.want || !strings.Contains(c.Detail, tt.wantIn) {
				t.Errorf("containerd.loaded %s %q; want %s with %q", c.Status, c.Detail, tt.want, tt.wantIn)
			}
		})
	}
}

func TestHostHooks(t *testing.T) {
	const good = `{"version": "1.0.0", "hook": {"path": "/usr/local/bin/gpurun", "args": ["gpurun", "hook"]}, "when": {"always": true}, "stages": ["createRuntime"]}`
	const runtimeEntry = `{"version": "1.0.0", "hook": {"path": "/usr/local/bin/gpurun-runtime", "args": ["gpurun-runtime", "hook", "--stage", "createRuntime"]}, "when": {"always": true}, "stages": ["createRuntime"]}`
	tests := []struct {
		name   string
		files  map[string]string
		want   Status
		wantIn string
	}{
		{"none", nil, OK, "no gpurun OCI hook"},
		{"installed for podman", map[string]string{"/usr/share/containers/oci/hooks.d/gpurun.json": good}, OK, "/usr/share/containers/oci/hooks.d/gpurun.json"},
		{"both directories", map[string]string{"/usr/share/containers/oci/hooks.d/gpurun.json": good, "/etc/containers/oci/hooks.d/gpurun.json": good}, OK, "overrides"},
		{"binary gone", map[string]string{"/etc/containers/oci/hooks.d/gpurun.json": strings.Replace(good, "/usr/local/bin/gpurun", "/opt/gpurun", 1)}, Problem, "/opt/gpurun does not exist"},
		{"bad JSON", map[string]string{"/etc/containers/oci/hooks.d/gpurun.json": "{\n  \"version\": \"1.0.0\",\n  \"hook\": {,\n}"}, Problem, "gpurun.json:3:"},
		{"unknown stage, no when", map[string]string{"/etc/containers/oci/hooks.d/gpurun.json": `{"version": "1.0.0", "hook": {"path": "/usr/local/bin/gpurun"}, "stages": ["prestrat"]}`}, Problem, `unknown stage "prestrat"`},
		{"gpurun-runtime's hook mode", map[string]string{"/etc/containers/oci/hooks.d/gpurun.json": runtimeEntry}, OK, "/etc/containers/oci/hooks.d/gpurun.json"},
		{"a gpurun-runtime without the hook mode", map[string]string{"/etc/containers/oci/hooks.d/gpurun.json": strings.ReplaceAll(runtimeEntry, "/usr/local/bin/", "/opt/old/")}, Problem,
			"/opt/old/gpurun-runtime has no hook mode"},
		{"installed where containers.conf's hooks_dir says", map[string]string{
			"/etc/containers/containers.conf": "[engine]\nhooks_dir = [\"/opt/hooks.d\"]\n", "/opt/hooks.d/gpurun.json": runtimeEntry}, OK,
			"/opt/hooks.d/gpurun.json (read by Podman)"},
		{"in the default directory, which containers.conf's hooks_dir leaves out", map[string]string{
			"/etc/containers/containers.conf": "[engine]\nhooks_dir = [\"/opt/hooks.d\"]\n", "/etc/containers/oci/hooks.d/gpurun.json": runtimeEntry}, Problem,
			"/etc/containers/oci/hooks.d/gpurun.json: in no directory the engines here read (Podman reads /opt/hooks.d, as hooks_dir in /etc/containers/containers.conf says; CRI-O reads /usr/share/containers/oci/hooks.d)"},
		{"read by CRI-O only: Podman's hooks_dir leaves it out", map[string]string{
			"/etc/containers/containers.conf": "[engine]\nhooks_dir = [\"/opt/hooks.d\"]\n", "/usr/share/containers/oci/hooks.d/gpurun.json": runtimeEntry}, OK,
			"/usr/share/containers/oci/hooks.d/gpurun.json (read by CRI-O)"},
		{"one entry read, a stale one not", map[string]string{
			"/etc/crio/crio.conf.d/10-gpu.conf": "[crio.runtime]\nhooks_dir = [\"/gpu/hooks.d\"]\n", "/etc/containers/containers.conf": "[engine]\nhooks_dir = [\"/gpu/hooks.d\"]\n",
			"/gpu/hooks.d/gpurun.json": runtimeEntry, "/usr/share/containers/oci/hooks.d/gpurun.json": runtimeEntry}, Warn,
			"/usr/share/containers/oci/hooks.d/gpurun.json is in no directory the engines here read"},
		{"containers.conf that does not parse", map[string]string{"/etc/containers/containers.conf": "[engine\n"}, Problem, "Podman's hooks_dir: "},
		{"only Podman here: CRI-O's directory does not count", map[string]string{"/usr/bin/podman": "",
			"/etc/containers/containers.conf": "[engine]\nhooks_dir = [\"/opt/hooks.d\"]\n", "/usr/share/containers/oci/hooks.d/gpurun.json": runtimeEntry}, Problem,
			"in no directory the engines here read (Podman reads /opt/hooks.d, as hooks_dir in /etc/containers/containers.conf says)"},
		{"only CRI-O here: no word of Podman's order", map[string]string{"/usr/bin/crio": "",
			"/usr/share/containers/oci/hooks.d/gpurun.json": runtimeEntry, "/etc/containers/oci/hooks.d/gpurun.json": runtimeEntry}, Warn,
			"gpurun OCI hook: /usr/share/containers/oci/hooks.d/gpurun.json (read by CRI-O); /etc/containers/oci/hooks.d/gpurun.json is in no directory"},
		{"only CRI-O here, its drop-in's directory", map[string]string{"/usr/bin/crio": "",
			"/etc/crio/crio.conf.d/10-gpu.conf": "[crio.runtime]\nhooks_dir = [\"/gpu/hooks.d\"]\n", "/gpu/hooks.d/gpurun.json": runtimeEntry}, OK,
			"/gpu/hooks.d/gpurun.json (read by CRI-O)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			f.executable("/usr/local/bin/gpurun")
			f.executable("/usr/local/bin/gpurun-runtime")
			f.executable("/opt/old/gpurun-runtime")
			f.outputs = map[string]string{"/usr/local/bin/gpurun-runtime hook --help": "Usage of " + hook.RuntimeUsage + ":\n"}
			for p, c := range tt.files {
				if c == "" && strings.HasPrefix(p, "/usr/bin/") {
					f.executable(p)
					continue
				}
				f.write(p, c)
			}
			c := check(t, hostReport(f, HostOptions{DockerErr: errors.New("no docker")}), "hooks")
			if c.Status != tt.want || !strings.Contains(c.Detail, tt.wantIn) {
				t.Errorf("hooks %s %q; want %s with %q", c.Status, c.Detail, tt.want, tt.wantIn)
			}
		})
	}
}

func TestHostShm(t *testing.T) {
	tests := []struct {
		name   string
		fs     *FS
		files  []string
		want   Status
		wantIn string
	}{
		{"empty", &FS{Tmpfs: true, Size: 32 * policy.GiB}, nil, OK, "tmpfs of 32GiB"},
		{"leftovers, nearly full", &FS{Tmpfs: true, Size: 10 * policy.GiB, Used: 95 * policy.GiB / 10}, []string{"torch_123_456", "nccl-shm-recv-abc", "mine"}, Problem, "2 file(s)"},
		{"not a tmpfs", &FS{Size: 10 * policy.GiB}, nil, Warn, "not a tmpfs"},
		{"unreadable", nil, nil, Error, "cannot read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := hostFake(t)
			delete(f.fs, "/dev/shm")
			if tt.fs != nil {
				f.fs["/dev/shm"] = *tt.fs
			}
			for _, n := range tt.files {
				f.write("/dev/shm/"+n, "x")
			}
			c := check(t, hostReport(f, HostOptions{DockerErr: errors.New("no docker")}), "host.shm")
			if c.Status != tt.want || !strings.Contains(c.Detail, tt.wantIn) {
				t.Errorf("host.shm %s %q; want %s with %q", c.Status, c.Detail, tt.want, tt.wantIn)
			}
		})
	}
}

// TestHostPolicy: a broken policy file under the host root is a problem
// naming its line.
func TestHostPolicy(t *testing.T) {
	f := hostFake(t)
	f.write(policy.DefaultConfigPath, "min = \"1g\"\nmax = \"512m\"\n")
	c := check(t, hostReport(f, HostOptions{DockerErr: errors.New("no docker")}), "policy")
	if c.Status != Problem || !strings.Contains(c.Detail, filepath.Join(f.root, policy.DefaultConfigPath)) || !strings.Contains(c.Detail, "min") {
		t.Errorf("policy %s %q", c.Status, c.Detail)
	}
}
