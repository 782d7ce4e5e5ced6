package oci

import (
	"path"
	"regexp"
	"testing"
)

// engineShmOracle is what EngineHostShm matches, written as the regular
// expressions it replaced (regexp's init and tables cost every cold
// gpurun-runtime start; the test keeps them as the reference).
func engineShmOracle(src string) (engine, owner string, ok bool) {
	for _, p := range []struct {
		engine string
		re     *regexp.Regexp
	}{
		{"docker", regexp.MustCompile(`/containers/([0-9a-f]{12,64})/mounts/shm$`)},
		{EngineContainerdCRI, regexp.MustCompile(`/sandboxes/([0-9a-zA-Z_.-]+)/shm$`)},
		{"cri-o", regexp.MustCompile(`/overlay-containers/([0-9a-f]{12,64})/userdata/shm$`)},
	} {
		if m := p.re.FindStringSubmatch(src); m != nil {
			return p.engine, m[1], true
		}
	}
	return "", "", false
}

var engineShmCases = []struct {
	source, engine, owner string
}{
	{"/var/lib/docker/containers/0123456789abcdef0123/mounts/shm", "docker", "0123456789abcdef0123"},
	{"/data/docker/containers/" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + "/mounts/shm/", "docker", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
	{"/containers/0123456789ab/mounts/shm", "docker", "0123456789ab"},
	{"/var/lib/docker/containers/0123456789a/mounts/shm", "", ""},        // 11 digits
	{"/var/lib/docker/containers/0123456789ABCDEF/mounts/shm", "", ""},   // upper case
	{"/var/lib/docker/mycontainers/0123456789abcdef/mounts/shm", "", ""}, // another dir
	{"/var/lib/docker/containers/0123456789abcdef/mounts/shm/x", "", ""}, // below it
	{"/run/containerd/io.containerd.grpc.v1.cri/sandboxes/abc_1.x-Y/shm", EngineContainerdCRI, "abc_1.x-Y"},
	{"/run/k3s/containerd/io.containerd.grpc.v1.cri/sandboxes/0a1b/shm", EngineContainerdCRI, "0a1b"},
	{"/run/containerd/sandboxes/a b/shm", "", ""},
	{"/sandboxes//shm", "", ""},
	{"/var/lib/containers/storage/overlay-containers/0123456789abcdef/userdata/shm", "cri-o", "0123456789abcdef"},
	{"/var/lib/containers/storage/overlay-containers/0123456789abcdef/userdata/shm2", "", ""},
	{"/dev/shm", "", ""},
	{"shm", "", ""},
	{"", "", ""},
}

func TestEngineHostShm(t *testing.T) {
	for _, tc := range engineShmCases {
		engine, owner, ok := EngineHostShm(tc.source)
		if engine != tc.engine || owner != tc.owner || ok != (tc.engine != "") {
			t.Errorf("EngineHostShm(%q) = %q, %q, %v; want %q, %q", tc.source, engine, owner, ok, tc.engine, tc.owner)
		}
	}
}

// FuzzEngineHostShm checks EngineHostShm against the regular expressions
// it replaced, on the cleaned path it matches.
func FuzzEngineHostShm(f *testing.F) {
	for _, tc := range engineShmCases {
		f.Add(tc.source)
	}
	f.Fuzz(func(t *testing.T, source string) {
		engine, owner, ok := EngineHostShm(source)
		wEngine, wOwner, wOK := engineShmOracle(path.Clean(source))
		if engine != wEngine || owner != wOwner || ok != wOK {
			t.Fatalf("EngineHostShm(%q) = %q, %q, %v; the expressions say %q, %q, %v", source, engine, owner, ok, wEngine, wOwner, wOK)
		}
	})
}
