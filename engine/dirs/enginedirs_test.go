package dirs

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/node/specfile"
	"github.com/gpurun/gpurun/oci"
)

// captureDir is the capture directory of the fixtures in
// oci/testdata/fixtures, as their index records it: the engines ran with
// their state under it, as the integration harness's do.
func captureDir(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "oci", "testdata", "fixtures", "capture", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Tmp string `json:"tmp"`
	}
	if err := json.Unmarshal(data, &index); err != nil || index.Tmp == "" {
		t.Fatalf("capture index: tmp %q, %v", index.Tmp, err)
	}
	return index.Tmp
}

const (
	podID   = "5fce15bd29897f1573d33e815893f8349ff0008b953814662f46f70cd08e0077"
	ctrID   = "8d2e4fe6b9b6d1c0d1a8e4b2e94c1bc0b5f0f4ee7b5c9d2d1c8a3e1f0b9a7c6d"
	otherID = "a46dafde315e36d7b69a341af7882d05e8ebff7d8aa3fc755f5e6c454de491cb"
)

func TestFromBundle(t *testing.T) {
	T := captureDir(t)
	tests := []struct {
		name, bundle, id string
		want             Dirs
	}{
		{"containerd 1.6 CRI", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + ctrID, ctrID, Dirs{ContainerdState: "/run/containerd"}},
		{"containerd 2.x, state on a big disk", "/data/containerd/state/io.containerd.runtime.v2.task/k8s.io/" + ctrID, ctrID, Dirs{ContainerdState: "/data/containerd/state"}},
		{"k3s", "/run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io/" + ctrID, "", Dirs{ContainerdState: "/run/k3s/containerd"}},
		{"the harness's private containerd", T + "/cri/state/io.containerd.runtime.v2.task/k8s.io/" + ctrID, ctrID, Dirs{ContainerdState: T + "/cri/state"}},
		{"dockerd 20.10's own containerd", "/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/" + ctrID, ctrID, Dirs{ContainerdState: "/run/docker/containerd/daemon"}},
		{"dockerd with the system containerd", "/run/containerd/io.containerd.runtime.v2.task/moby/" + ctrID, ctrID, Dirs{ContainerdState: "/run/containerd"}},
		{"Podman", "/var/lib/containers/storage/overlay-containers/" + ctrID + "/userdata", ctrID, Dirs{StorageRoot: "/var/lib/containers/storage"}},
		{"Podman, graph root moved", "/srv/podman/overlay-containers/" + ctrID + "/userdata", "", Dirs{StorageRoot: "/srv/podman"}},
		{"CRI-O", "/run/containers/storage/overlay-containers/" + ctrID + "/userdata", ctrID, Dirs{StorageRoot: "/run/containers/storage"}},
		{"runc run in some directory", "/tmp/bundles/" + ctrID, ctrID, Dirs{}},
		// Hostile or malformed: nothing is learned from them.
		{"a .. segment", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/../../../tmp/evil/io.containerd.runtime.v2.task/k8s.io/" + ctrID, ctrID, Dirs{}},
		{"a .. id", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/..", "", Dirs{}},
		{"a trailing slash", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + ctrID + "/", ctrID, Dirs{}},
		{"relative", "run/containerd/io.containerd.runtime.v2.task/k8s.io/" + ctrID, ctrID, Dirs{}},
		{"another container's bundle", "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + otherID, ctrID, Dirs{}},
		{"a namespace no containerd gives", "/run/containerd/io.containerd.runtime.v2.task/k8s..io/" + ctrID, ctrID, Dirs{}},
		{"Podman, another container's userdata", "/var/lib/containers/storage/overlay-containers/" + otherID + "/userdata", ctrID, Dirs{}},
		{"Podman, not an id", "/var/lib/containers/storage/overlay-containers/evil/userdata", "", Dirs{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FromBundle(tt.bundle, tt.id); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("FromBundle(%q, %q) = %+v, want %+v", tt.bundle, tt.id, got, tt.want)
			}
		})
	}
}

// fixtureShm is the /dev/shm and pod of a captured config.json.
func fixtureShm(t *testing.T, name string) (oci.Shm, oci.Pod) {
	t.Helper()
	c, err := specfile.Load(filepath.Join("..", "..", "oci", "testdata", "fixtures", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return oci.ClassifyShm(c.Spec, 0), oci.CRIPod(c.Spec)
}

// bind is an engine-host-tmpfs /dev/shm at source.
func bind(source string) oci.Shm {
	engine, owner, ok := oci.EngineHostShm(source)
	if !ok {
		panic("not an engine layout: " + source)
	}
	return oci.Shm{Kind: oci.ShmEngine, Type: "bind", Source: source, Engine: engine, OwnerID: owner}
}

func criPod(id string) oci.Pod { return oci.Pod{SandboxID: id, Engine: "containerd-cri"} }

func TestShm(t *testing.T) {
	T := captureDir(t)
	// What the fixtures' engines would have handed over with them.
	ctd16 := FromBundle(T+"/cri/state/io.containerd.runtime.v2.task/k8s.io/"+ctrID, ctrID)
	ctd24 := FromBundle(T+"/cri2/state/io.containerd.runtime.v2.task/k8s.io/"+ctrID, ctrID)
	podman := FromBundle(T+"/podman/root/overlay-containers/"+ctrID+"/userdata", ctrID)
	docker := Dirs{DockerRoot: T + "/docker/root"}

	fixture := func(name string) func(t *testing.T) (oci.Shm, oci.Pod) {
		return func(t *testing.T) (oci.Shm, oci.Pod) { return fixtureShm(t, name) }
	}
	given := func(sh oci.Shm, pod oci.Pod) func(*testing.T) (oci.Shm, oci.Pod) {
		return func(*testing.T) (oci.Shm, oci.Pod) { return sh, pod }
	}
	sandboxShm := func(state, id string) string {
		return state + "/io.containerd.grpc.v1.cri/sandboxes/" + id + "/shm"
	}
	roots := []string{"/run/containerd", "/run/k3s/containerd", "/run/containers/storage"}
	tests := []struct {
		name  string
		dirs  Dirs
		in    func(*testing.T) (oci.Shm, oci.Pod)
		named bool
		bad   string // the error says this; "" for none
	}{
		{"containerd 1.6 CRI container", ctd16, fixture("containerd-1.6-cri-container-env-nvidia-all"), true, ""},
		{"containerd 1.6 CRI container, memory limit", ctd16, fixture("containerd-1.6-cri-container-memory-2g"), true, ""},
		{"containerd 2.4 CRI container", ctd24, fixture("containerd-2.4-cri-container-env-nvidia-all"), true, ""},
		{"Podman", podman, fixture("podman-4.3-env-nvidia-all"), true, ""},
		{"Docker shareable donor", docker, fixture("docker-20.10-ipc-shareable"), true, ""},
		{"Docker container: peer", docker, fixture("docker-20.10-ipc-container"), true, ""},
		{"Docker, the shim not told the data-root", Dirs{ContainerdState: "/run/docker/containerd/daemon"}, fixture("docker-20.10-ipc-shareable"), false, ""},
		{"containerd, bundle of another shape", Dirs{}, fixture("containerd-1.6-cri-container"), false, ""},
		{"CRI-O pod", Dirs{StorageRoot: "/run/containers/storage"},
			given(bind("/run/containers/storage/overlay-containers/"+podID+"/userdata/shm"), oci.Pod{SandboxID: podID, Engine: "cri-o"}), true, ""},
		{"NRI, containerd", ForPod(podID, 0, roots), given(bind(sandboxShm("/run/containerd", podID)), criPod(podID)), true, ""},
		{"NRI, k3s", ForPod(podID, 0, roots), given(bind(sandboxShm("/run/k3s/containerd", podID)), criPod(podID)), true, ""},
		{"NRI, containerd, state moved, the pod's pid given", ForPod(podID, 4242, roots), given(bind(sandboxShm("/data/ctd", podID)), criPod(podID)), true, ""},
		{"NRI, CRI-O", ForPod(podID, 0, roots), given(bind("/run/containers/storage/overlay-containers/"+podID+"/userdata/shm"), oci.Pod{SandboxID: podID, Engine: "cri-o"}), true, ""},
		{"NRI, CRI-O, run root moved, the pod's pid given", ForPod(podID, 4242, roots), given(bind("/srv/run/overlay-containers/"+podID+"/userdata/shm"), oci.Pod{SandboxID: podID, Engine: "cri-o"}), true, ""},

		// Hostile: the engine named dirs, and /dev/shm is not their tmpfs.
		{"containerd: another pod's sandbox", ctd16, given(bind(sandboxShm(T+"/cri/state", otherID)), criPod(podID)), true, otherID},
		{"containerd: under the state dir, not the CRI plugin's", ctd16, given(bind(T+"/cri/state/evil/sandboxes/"+podID+"/shm"), criPod(podID)), true, "named " + sandboxShm(T+"/cri/state", podID)},
		{"containerd: another containerd's state", ctd16, given(bind(sandboxShm("/run/containerd", podID)), criPod(podID)), true, "named"},
		{"containerd: a .. segment", ctd16, given(bind(T+"/cri/state/io.containerd.grpc.v1.cri/sandboxes/x/../"+podID+"/shm"), criPod(podID)), true, "named"},
		{"containerd: a sandbox id that climbs", ctd16, given(bind(sandboxShm(T+"/cri/state", podID)), criPod("../../../../tmp/x")), true, "is not one containerd gives"},
		{"containerd: no sandbox id", ctd16, given(bind(sandboxShm(T+"/cri/state", podID)), oci.Pod{}), true, "names no pod sandbox"},
		{"NRI: another pod's sandbox", ForPod(podID, 0, roots), given(bind(sandboxShm("/run/containerd", otherID)), criPod(otherID)), true, otherID},
		{"NRI: not containerd's layout", ForPod(podID, 0, roots), given(bind("/run/containerd/evil/sandboxes/"+podID+"/shm"), criPod(podID)), true, "not where containerd makes"},
		{"NRI: a .. segment", ForPod(podID, 0, roots), given(bind("/run/containerd/io.containerd.grpc.v1.cri/sandboxes/x/../../io.containerd.grpc.v1.cri/sandboxes/"+podID+"/shm"), criPod(podID)), true, "named"},
		{"NRI: this pod's shape under another root, no pid", ForPod(podID, 0, roots), given(bind(sandboxShm("/tmp/user", podID)), criPod(podID)), true, "not a containerd dir in engine_roots"},
		{"NRI: this pod's shape under a subdir of the state dir, no pid", ForPod(podID, 0, roots), given(bind(sandboxShm("/run/containerd/user", podID)), criPod(podID)), true, "under /run/containerd/user"},
		{"NRI: CRI-O's shape elsewhere, no pid", ForPod(podID, 0, roots), given(bind("/tmp/user/overlay-containers/"+podID+"/userdata/shm"), oci.Pod{SandboxID: podID, Engine: "cri-o"}), true, "not a containers/storage dir"},
		{"CRI-O: another pod's sandbox", Dirs{StorageRoot: "/run/containers/storage"},
			given(bind("/run/containers/storage/overlay-containers/"+otherID+"/userdata/shm"), oci.Pod{SandboxID: podID, Engine: "cri-o"}), true, otherID},
		{"Podman: another graph root", podman, given(bind("/var/lib/containers/storage/overlay-containers/"+ctrID+"/userdata/shm"), oci.Pod{}), true, "named"},
		{"Docker: under another data-root", docker, given(bind("/var/lib/docker/containers/"+ctrID+"/mounts/shm"), oci.Pod{}), true, "gpurun-runtime was told data-root " + T + "/docker/root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh, pod := tt.in(t)
			if sh.Kind != oci.ShmEngine {
				t.Fatalf("/dev/shm is %s, want an engine host tmpfs", sh.Kind)
			}
			path, named, err := tt.dirs.Shm(sh, pod)
			if named != tt.named {
				t.Errorf("named = %v, want %v (path %q, err %v)", named, tt.named, path, err)
			}
			switch {
			case tt.bad == "" && err != nil:
				t.Errorf("err = %v", err)
			case tt.bad == "" && named && path != sh.Source:
				t.Errorf("path %q, want the bind's source %q", path, sh.Source)
			case tt.bad != "" && (!errors.Is(err, ErrNotNamed) || !strings.Contains(err.Error(), tt.bad) || path != ""):
				t.Errorf("Shm = %q, %v; want a refusal saying %q", path, err, tt.bad)
			}
		})
	}
}

// TestShmRefusalKinds: each refusal of Shm matches its own kind with
// errors.Is, and no other, so that callers choose their fix by type.
func TestShmRefusalKinds(t *testing.T) {
	docker := Dirs{DockerRoot: "/var/lib/docker"}
	roots := []string{"/run/containerd"}
	sandbox := func(state, id string) oci.Shm {
		return bind(state + "/io.containerd.grpc.v1.cri/sandboxes/" + id + "/shm")
	}
	kinds := []error{ErrStaleRoot, ErrUnknownRoot}
	tests := []struct {
		name  string
		dirs  Dirs
		sh    oci.Shm
		pod   oci.Pod
		kind  error  // the one of kinds it matches; nil for none
		found string // StaleRootError's Found
	}{
		{"dockerd moved its data-root", docker, bind("/srv/docker/containers/" + ctrID + "/mounts/shm"), oci.Pod{}, ErrStaleRoot, "/srv/docker"},
		// userns-remap: dockerd keeps containers in <data-root>/<uid>.<gid>
		// (docs.docker.com/engine/security/userns-remap's 231072.231072).
		{"dockerd took up userns-remap", docker, bind("/var/lib/docker/231072.231072/containers/" + ctrID + "/mounts/shm"), oci.Pod{}, ErrStaleRoot, "/var/lib/docker/231072.231072"},
		{"NRI: an unknown root, no pid", ForPod(podID, 0, roots), sandbox("/data/ctd", podID), criPod(podID), ErrUnknownRoot, ""},
		{"containerd: another pod's sandbox", FromBundle("/run/containerd/io.containerd.runtime.v2.task/k8s.io/"+ctrID, ctrID), sandbox("/run/containerd", otherID), criPod(podID), nil, ""},
		{"containerd: another containerd's state", FromBundle("/run/containerd/io.containerd.runtime.v2.task/k8s.io/"+ctrID, ctrID), sandbox("/data/ctd", podID), criPod(podID), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := tt.dirs.Shm(tt.sh, tt.pod)
			if !errors.Is(err, ErrNotNamed) {
				t.Fatalf("Shm = %v, want a refusal (ErrNotNamed)", err)
			}
			for _, k := range kinds {
				if errors.Is(err, k) != (k == tt.kind) {
					t.Errorf("errors.Is(%v, %v) = %v", err, k, !(k == tt.kind))
				}
			}
			var stale *StaleRootError
			if errors.As(err, &stale) != (tt.kind == ErrStaleRoot) {
				t.Fatalf("Shm = %v: a *StaleRootError %v, want %v", err, !(tt.kind == ErrStaleRoot), tt.kind == ErrStaleRoot)
			}
			if stale != nil && (stale.Told != tt.dirs.DockerRoot || stale.Found != tt.found || stale.Source != tt.sh.Source) {
				t.Errorf("stale %+v, want told %s, found %s, source %s", stale, tt.dirs.DockerRoot, tt.found, tt.sh.Source)
			}
		})
	}
}

// TestConfirm: which NRI names need the pod's own /dev/shm as proof.
func TestConfirm(t *testing.T) {
	roots := []string{"/run/containerd", "/run/containers/storage"}
	sandbox := func(state string) oci.Shm {
		return bind(state + "/io.containerd.grpc.v1.cri/sandboxes/" + podID + "/shm")
	}
	tests := []struct {
		name string
		dirs Dirs
		sh   oci.Shm
		want string
	}{
		{"NRI, a known state dir", ForPod(podID, 42, roots), sandbox("/run/containerd"), ""},
		{"NRI, a moved state dir", ForPod(podID, 42, roots), sandbox("/data/ctd"), "/proc/42/root/dev/shm"},
		{"NRI, a subdir of a known one", ForPod(podID, 42, roots), sandbox("/run/containerd/x"), "/proc/42/root/dev/shm"},
		{"NRI, CRI-O moved", ForPod(podID, 42, roots), bind("/srv/overlay-containers/" + podID + "/userdata/shm"), "/proc/42/root/dev/shm"},
		{"NRI, no pid", ForPod(podID, 0, roots), sandbox("/data/ctd"), ""},
		{"a bundle named the state dir", FromBundle("/data/ctd/io.containerd.runtime.v2.task/k8s.io/"+ctrID, ctrID), sandbox("/data/ctd"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.dirs.Confirm(tt.sh); got != tt.want {
				t.Errorf("Confirm = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRoot(t *testing.T) {
	tests := []struct{ source, want string }{
		{"/data/ctd/io.containerd.grpc.v1.cri/sandboxes/" + podID + "/shm", "/data/ctd"},
		{"/srv/docker/containers/" + ctrID + "/mounts/shm", "/srv/docker"},
		{"/var/lib/containers/storage/overlay-containers/" + ctrID + "/userdata/shm", "/var/lib/containers/storage"},
		{"/elsewhere/sandboxes/" + podID + "/shm", ""},
	}
	for _, tt := range tests {
		if got := Root(bind(tt.source)); got != tt.want {
			t.Errorf("Root(%s) = %q, want %q", tt.source, got, tt.want)
		}
	}
}

func TestCheckDockerRoot(t *testing.T) {
	for _, tt := range []struct {
		root string
		ok   bool
	}{
		{"/var/lib/docker", true},
		{"/mnt/nvme0/docker-data_1.2", true},
		{"/tmp/gpurun-d-123/root", true},
		{"relative/docker", false},
		{"/var/lib/docker/", false},
		{"/mnt/my docker", false},
		{"/mnt/$HOME", false},
		{"/mnt/a;b", false},
	} {
		if err := CheckDockerRoot(tt.root); (err == nil) != tt.ok {
			t.Errorf("CheckDockerRoot(%q) = %v, want ok %v", tt.root, err, tt.ok)
		}
	}
}

func TestPodEmptyDir(t *testing.T) {
	const uid = "7e4a1f7c-1b2d-4c3e-9f00-123456789abc"
	for _, tt := range []struct {
		source string
		want   bool
	}{
		{"/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~empty-dir/dshm", true},
		{"/data/kubelet/pods/" + uid + "/volumes/kubernetes.io~empty-dir/gpurun-shm", true},
		{"/var/lib/kubelet/pods/other-uid/volumes/kubernetes.io~empty-dir/dshm", false},
		{"/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~host-path/dshm", false},
		{"/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~empty-dir/dshm/../x", false},
		{"var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~empty-dir/dshm", false},
		{"/pods/" + uid + "/x/kubernetes.io~empty-dir/dshm", false},
		{"/dev/shm", false},
	} {
		if got := PodEmptyDir(tt.source, uid); got != tt.want {
			t.Errorf("PodEmptyDir(%q) = %v, want %v", tt.source, got, tt.want)
		}
	}
	if PodEmptyDir("/var/lib/kubelet/pods//volumes/kubernetes.io~empty-dir/dshm", "") {
		t.Error("an empty uid names no pod")
	}
}
