package oci

import (
	"path"
	"regexp"
	"strings"
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
		{EngineDocker, regexp.MustCompile(`/containers/([0-9a-f]{12,64})/mounts/shm$`)},
		// containerd's identifiers.Validate: alphanumerics joined by
		// single '.', '_' or '-', at most 76 bytes.
		{EngineContainerdCRI, regexp.MustCompile(`/sandboxes/([A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*)/shm$`)},
		{EngineCRIO, regexp.MustCompile(`/overlay-containers/([0-9a-f]{12,64})/userdata/shm$`)},
	} {
		if m := p.re.FindStringSubmatch(src); m != nil && len(m[1]) <= 76 {
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

// The owner ids the layouts accept: containerd identifiers for sandboxes,
// hex container ids for dockerd and containers/storage.
func TestIdentifiers(t *testing.T) {
	for _, tt := range []struct {
		s         string
		id, isHex bool
	}{
		{"k8s.io", true, false},
		{"moby", true, false},
		{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", true, true},
		{"abc123def456", true, true},
		{"a-b_c.d", true, false},
		{"", false, false},
		{"..", false, false},
		{".a", false, false},
		{"a.", false, false},
		{"a..b", false, false},
		{"a/b", false, false},
		{strings.Repeat("a", 77), false, false},
		{strings.Repeat("f", 65), true, false},
		{"ABCDEF012345", true, false},
		{"0123456789a", true, false},
	} {
		if got := IsSandboxID(tt.s); got != tt.id {
			t.Errorf("IsSandboxID(%q) = %v, want %v", tt.s, got, tt.id)
		}
		if got := IsContainerID(tt.s); got != tt.isHex {
			t.Errorf("IsContainerID(%q) = %v, want %v", tt.s, got, tt.isHex)
		}
	}
}

// TestEngineFile: the files engines bind at /etc/hostname, /etc/hosts and
// /etc/resolv.conf, found by the same layouts as their /dev/shm.
func TestEngineFile(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		path, engine string
	}{
		{"/var/lib/docker/containers/" + id + "/hostname", EngineDocker},
		{"/containers/" + id + "/resolv.conf", EngineDocker}, // data-root on a file system of its own
		{"/run/containerd/io.containerd.grpc.v1.cri/sandboxes/" + id + "/hosts", EngineContainerdCRI},
		{"/var/lib/containers/storage/overlay-containers/" + id + "/userdata/hostname", EngineCRIO},
		{"/var/lib/containers/storage/overlay-containers/" + id + "/hostname", ""}, // not in userdata
		{"/var/lib/docker/containers/not-an-id/hostname", ""},
		{"/var/lib/docker/containers/" + id + "/config.v2.json", ""},
		{"/var/lib/kubelet/pods/uid/etc-hosts", ""}, // the kubelet's, not an engine's
		{"/etc/hostname", ""},
	} {
		if engine, ok := EngineFile(tc.path); engine != tc.engine || ok != (tc.engine != "") {
			t.Errorf("EngineFile(%s) = %q, %v; want %q", tc.path, engine, ok, tc.engine)
		}
	}
}
