package doctor

import (
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/gpurun/gpurun/oci"
	"github.com/moby/sys/mountinfo"
)

// Where says whether doctor runs inside a container, and why it thinks so.
type Where struct {
	Container bool
	// Evidence lists what was seen, for people.
	Evidence []string
}

// engineFile reports whether a mount's root is a file an engine or the
// kubelet binds at /etc/hostname, /etc/hosts or /etc/resolv.conf: one of
// the engines' own (oci.EngineFile), or the kubelet's pods/<uid>/etc-hosts.
func engineFile(root string) bool {
	if _, ok := oci.EngineFile(root); ok {
		return true
	}
	return path.Base(root) == "etc-hosts" && path.Base(path.Dir(path.Dir(root))) == "pods"
}

// engineCgroupPattern matches cgroup v1 paths of containers.
var engineCgroupPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`/(docker|kubepods|libpod|crio|containerd|lxc|machine\.slice)[/.-]`)
})

// Detect decides whether this process runs inside a container. The PID
// namespace decides when it can be read: a namespace of its own means a
// container. In the host's PID namespace it is a container only when an
// engine bind-mounted /etc/hostname, /etc/hosts or /etc/resolv.conf (a
// container started with --pid=host); files such as /.dockerenv alone do
// not count there, since hosts built from images carry them too. When the
// namespace cannot be read, any evidence counts.
func Detect(sys *System) Where {
	var w Where
	var strong, medium []string
	pidNS, nsErr := sys.namespaceInode("self", "pid")
	ms, _ := sys.mounts()
	for _, p := range []string{"/etc/hostname", "/etc/hosts", "/etc/resolv.conf"} {
		if m := lastMountAt(ms, p); m != nil && engineFile(m.Root) {
			strong = append(strong, p+" bound by the engine")
			break
		}
	}
	for _, f := range []struct{ path, what string }{
		{"/.dockerenv", "/.dockerenv"},
		{"/run/.containerenv", "/run/.containerenv"},
	} {
		if sys.exists(f.path) {
			medium = append(medium, f.what)
		}
	}
	if sys.getenv("KUBERNETES_SERVICE_HOST") != "" {
		medium = append(medium, "KUBERNETES_SERVICE_HOST set")
	}
	if v := sys.getenv("container"); v != "" {
		medium = append(medium, "container="+v)
	}
	if data, err := sys.readFile("/proc/1/cgroup"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.SplitN(line, ":", 3); len(f) == 3 && engineCgroupPattern().MatchString(f[2]+"/") {
				medium = append(medium, "PID 1 in a "+engineCgroupPattern().FindStringSubmatch(f[2] + "/")[1]+" cgroup")
				break
			}
		}
	}
	switch {
	case nsErr == nil && pidNS != initialPIDNamespace:
		w.Container = true
		w.Evidence = append([]string{"own PID namespace"}, append(strong, medium...)...)
	case nsErr == nil:
		w.Container = len(strong) > 0
		w.Evidence = append([]string{"the host's PID namespace"}, strong...)
		if !w.Container && len(medium) > 0 {
			w.Evidence = append(w.Evidence, strings.Join(medium, ", ")+" ignored there")
		}
	default:
		w.Evidence = append(append([]string{"PID namespace unknown"}, strong...), medium...)
		w.Container = len(strong)+len(medium) > 0
		if comm, err := sys.readFile("/proc/1/comm"); err == nil {
			name := strings.TrimSpace(string(comm))
			if !slices.Contains([]string{"systemd", "init", "runit", "openrc-init", "s6-svscan", "launchd"}, name) {
				w.Evidence = append(w.Evidence, "PID 1 is "+name+", not an init system")
				w.Container = true
			}
		}
	}
	return w
}

// hostIPC reports whether this process is in the host's IPC namespace
// (docker --ipc host, Kubernetes hostIPC), and whether that could be told.
func (s *System) hostIPC() (bool, bool) {
	ino, err := s.namespaceInode("self", "ipc")
	if err != nil {
		return false, false
	}
	return ino == initialIPCNamespace, true
}

// shmMount is the mount at /dev/shm, if any.
func shmMount(ms []*mountinfo.Info) *mountinfo.Info {
	return lastMountAt(ms, "/dev/shm")
}
