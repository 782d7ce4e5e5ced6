package resize

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpurun/gpurun/policy"
)

type fakeDocker struct {
	containers map[string]container.InspectResponse
	root       string
}

func (f fakeDocker) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	c, ok := f.containers[id]
	if !ok {
		return c, errors.New("No such container: " + id)
	}
	return c, nil
}

func (f fakeDocker) Info(context.Context) (system.Info, error) {
	return system.Info{DockerRootDir: f.root}, nil
}

func dockerContainer(id, name string, running bool, ipc string, mutate func(*container.InspectResponse)) container.InspectResponse {
	c := container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{
			ID:         id,
			Name:       "/" + name,
			State:      &container.State{Running: running, Pid: 4242},
			HostConfig: &container.HostConfig{IpcMode: container.IpcMode(ipc)},
		},
	}
	if mutate != nil {
		mutate(&c)
	}
	return c
}

func TestDockerTarget(t *testing.T) {
	const root = "/var/lib/docker"
	donorID := strings.Repeat("d", 64)
	d := fakeDocker{root: root, containers: map[string]container.InspectResponse{
		"private":   dockerContainer(strings.Repeat("a", 64), "private", true, "private", nil),
		"legacy":    dockerContainer(strings.Repeat("b", 64), "legacy", true, "", nil),
		"shareable": dockerContainer(donorID, "shareable", true, "shareable", nil),
		donorID:     dockerContainer(donorID, "shareable", true, "shareable", nil),
		"joined":    dockerContainer(strings.Repeat("c", 64), "joined", true, "container:"+donorID, nil),
		"host":      dockerContainer(strings.Repeat("e", 64), "host", true, "host", nil),
		"none":      dockerContainer(strings.Repeat("f", 64), "none", true, "none", nil),
		"stopped":   dockerContainer(strings.Repeat("1", 64), "stopped", false, "private", nil),
		"tmpfs": dockerContainer(strings.Repeat("2", 64), "tmpfs", true, "private", func(c *container.InspectResponse) {
			c.HostConfig.Tmpfs = map[string]string{"/dev/shm": "size=1g"}
		}),
		"bind": dockerContainer(strings.Repeat("3", 64), "bind", true, "private", func(c *container.InspectResponse) {
			c.Mounts = []container.MountPoint{{Type: "bind", Source: "/dev/shm", Destination: "/dev/shm"}}
		}),
		"joined-private": dockerContainer(strings.Repeat("4", 64), "joined-private", true, "container:private", nil),
	}}
	shareablePath := filepath.Join(root, "containers", donorID, "mounts", "shm")
	tests := []struct {
		ref        string
		kind       Kind
		path       string
		sharedWith string
		err        string
	}{
		{ref: "private", kind: Namespace, path: "/dev/shm"},
		{ref: "legacy", kind: Namespace, path: "/dev/shm"},
		{ref: "shareable", kind: HostTmpfs, path: shareablePath},
		{ref: "joined", kind: HostTmpfs, path: shareablePath, sharedWith: "joined"},
		{ref: "joined-private", kind: Namespace, path: "/dev/shm", sharedWith: "joined-private"},
		{ref: "tmpfs", kind: Namespace, path: "/dev/shm"},
		{ref: "host", err: "--ipc host"},
		{ref: "none", err: "--ipc none"},
		{ref: "stopped", err: "not running"},
		{ref: "bind", err: "not a tmpfs Docker made"},
		{ref: "missing", err: "No such container"},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			got, err := DockerTarget(context.Background(), d, tc.ref)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("DockerTarget(%s) error = %v, want one containing %q", tc.ref, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DockerTarget(%s): %v", tc.ref, err)
			}
			if got.Kind != tc.kind || got.Path != tc.path || got.SharedWith != tc.sharedWith {
				t.Errorf("DockerTarget(%s) = kind %s path %s shared %q, want %s %s %q", tc.ref, got.Kind, got.Path, got.SharedWith, tc.kind, tc.path, tc.sharedWith)
			}
			if got.Kind == Namespace && got.PID != 4242 {
				t.Errorf("PID = %d, want the container's 4242", got.PID)
			}
			if got.Kind == HostTmpfs && (len(got.Roots) != 1 || !strings.HasPrefix(got.Path, got.Roots[0]+"/")) {
				t.Errorf("Roots = %v, want the daemon's containers dir holding %s", got.Roots, got.Path)
			}
			if got.Kind == HostTmpfs && got.Named != got.Path {
				t.Errorf("Named = %q, want the donor's tmpfs %s, as docker info names it", got.Named, got.Path)
			}
			if got.Note != DockerNote {
				t.Errorf("Note = %q, want the HostConfig.ShmSize note", got.Note)
			}
		})
	}
}

type fakeCRI struct {
	resp *runtimeapi.ContainerStatusResponse
	err  error
	// stateDir is the CRI plugin's state dir its verbose Status reports
	// ("" for a runtime that does not say).
	stateDir string
}

func (f fakeCRI) ContainerStatus(context.Context, *runtimeapi.ContainerStatusRequest, ...grpc.CallOption) (*runtimeapi.ContainerStatusResponse, error) {
	return f.resp, f.err
}

func (f fakeCRI) Status(context.Context, *runtimeapi.StatusRequest, ...grpc.CallOption) (*runtimeapi.StatusResponse, error) {
	if f.stateDir == "" {
		return &runtimeapi.StatusResponse{}, nil
	}
	return &runtimeapi.StatusResponse{Info: map[string]string{"config": `{"stateDir":"` + f.stateDir + `"}`}}, nil
}

func criStatus(t *testing.T, state runtimeapi.ContainerState, pid int, spec *specs.Spec) *runtimeapi.ContainerStatusResponse {
	t.Helper()
	info := map[string]string{}
	if spec != nil {
		raw, err := json.Marshal(criInfo{PID: pid, SandboxID: "pod1", RuntimeSpec: spec})
		if err != nil {
			t.Fatal(err)
		}
		info["info"] = string(raw)
	}
	return &runtimeapi.ContainerStatusResponse{
		Status: &runtimeapi.ContainerStatus{Id: "c1", State: state, Metadata: &runtimeapi.ContainerMetadata{Name: "trainer"}},
		Info:   info,
	}
}

func specWithShm(m *specs.Mount, privateIPC bool) *specs.Spec {
	s := &specs.Spec{Linux: &specs.Linux{}}
	if privateIPC {
		s.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.IPCNamespace}, {Type: specs.MountNamespace}}
	} else {
		s.Linux.Namespaces = []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	}
	if m != nil {
		s.Mounts = []specs.Mount{*m}
	}
	return s
}

func TestCRITarget(t *testing.T) {
	sandboxShm := "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/0123abcd/shm"
	movedShm := "/data/ctd/io.containerd.grpc.v1.cri/sandboxes/pod1/shm" // pod1: criStatus's sandbox
	bindOf := func(src string) *specs.Mount {
		return &specs.Mount{Destination: "/dev/shm", Type: "bind", Source: src, Options: []string{"rbind", "rprivate", "rw"}}
	}
	tests := []struct {
		name     string
		resp     *runtimeapi.ContainerStatusResponse
		stateDir string
		kind     Kind
		path     string
		named    string
		err      string
	}{
		{
			name: "sandbox shm bind",
			resp: criStatus(t, runtimeapi.ContainerState_CONTAINER_RUNNING, 77, specWithShm(bindOf(sandboxShm), true)),
			kind: HostTmpfs, path: sandboxShm,
		},
		{
			name:     "sandbox shm bind, containerd names its state dir",
			resp:     criStatus(t, runtimeapi.ContainerState_CONTAINER_RUNNING, 77, specWithShm(bindOf(movedShm), true)),
			stateDir: "/data/ctd/io.containerd.grpc.v1.cri",
			kind:     HostTmpfs, path: movedShm, named: movedShm,
		},
		{
			name:     "a bind that is not the tmpfs containerd made for the pod",
			resp:     criStatus(t, runtimeapi.ContainerState_CONTAINER_RUNNING, 77, specWithShm(bindOf(sandboxShm), true)),
			stateDir: "/data/ctd/io.containerd.grpc.v1.cri",
			err:      "not the tmpfs containerd made for its pod sandbox (" + movedShm + ")",
		},
		{
			name: "own tmpfs",
			resp: criStatus(t, runtimeapi.ContainerState_CONTAINER_RUNNING, 77, specWithShm(&specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "size=65536k"}}, true)),
			kind: Namespace, path: "/dev/shm",
		},
		{
			name: "host ipc",
			resp: criStatus(t, runtimeapi.ContainerState_CONTAINER_RUNNING, 77, specWithShm(&specs.Mount{Destination: "/dev/shm", Type: "bind", Source: "/dev/shm", Options: []string{"rbind", "rw"}}, false)),
			err:  "hostIPC",
		},
		{
			name: "exited",
			resp: criStatus(t, runtimeapi.ContainerState_CONTAINER_EXITED, 77, specWithShm(nil, true)),
			err:  "not running",
		},
		{
			name: "no verbose info",
			resp: criStatus(t, runtimeapi.ContainerState_CONTAINER_RUNNING, 77, nil),
			err:  `no "info"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CRITarget(context.Background(), fakeCRI{resp: tc.resp, stateDir: tc.stateDir}, "c1")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("CRITarget error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CRITarget: %v", err)
			}
			if got.Kind != tc.kind || got.Path != tc.path || got.Named != tc.named {
				t.Errorf("CRITarget = %s %s (named %q), want %s %s (named %q)", got.Kind, got.Path, got.Named, tc.kind, tc.path, tc.named)
			}
			if got.Kind == Namespace && got.PID != 77 {
				t.Errorf("PID = %d, want 77 from the verbose info", got.PID)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	p := policy.Default()
	p.Max = 64 << 30
	tests := []struct {
		size  int64
		force bool
		ok    bool
	}{
		{p.Max, false, true},
		{p.Max + 1, false, false},
		{p.Max + 1, true, true},
		{0, true, false},
		{-1, false, false},
	}
	for _, tc := range tests {
		err := Check(tc.size, p, tc.force)
		if (err == nil) != tc.ok {
			t.Errorf("Check(%d, force=%v) = %v, want ok=%v", tc.size, tc.force, err, tc.ok)
		}
	}
}
