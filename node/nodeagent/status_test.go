package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/node/install"
)

// TestStatusNamesTheContainerd: a containerd runs, but with another config
// (k3s's, say): status says which, and what it reads, instead of "not
// running"; a containerd whose config imports the one gpurun installed
// into does read it.
func TestStatusNamesTheContainerd(t *testing.T) {
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	a := n.agent(false)
	if err := a.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.write(t, "/etc/k3s/containerd/config.toml", "version = 2\nimports = [\"conf.d/*.toml\"]\n", 0o644)
	n.write(t, "/etc/k3s/containerd/conf.d/10-nvidia.toml", "version = 2\n", 0o644)
	k3sConfig := n.path("/etc/k3s/containerd/config.toml")
	k3s := startFakeWith(t, n, k3sConfig)
	st := a.Status()
	want := fmt.Sprintf("containerd is running, but not with %s, which gpurun installed into: containerd (pid %d, --config %s) reads %s and its imports %s. Set containerd-config",
		install.DefaultContainerdConfig, k3s.Process.Pid, k3sConfig, k3sConfig, n.path("/etc/k3s/containerd/conf.d/10-nvidia.toml"))
	if st.Ready || !strings.HasPrefix(st.Reason, want) {
		t.Errorf("another config:\n got %s\nwant %s...", st.Reason, want)
	}
	if len(st.Containerd) != 1 || st.Containerd[0].PID != k3s.Process.Pid || st.Containerd[0].ReadsGPURun || len(st.Containerd[0].Files) != 2 {
		t.Errorf("containerd list %+v", st.Containerd)
	}

	// Another containerd, whose config imports gpurun's.
	n.write(t, "/etc/other/config.toml", "version = 2\nimports = [\""+n.path(install.DefaultContainerdConfig)+"\"]\n", 0o644)
	touch(t, n.path(install.DefaultContainerdConfig), time.Now().Add(-time.Minute))
	importer := startFakeWith(t, n, n.path("/etc/other/config.toml"))
	st = a.Status()
	if !st.Ready || st.ContainerdPID != importer.Process.Pid || !strings.Contains(st.Reason, "--config "+n.path("/etc/other/config.toml")) {
		t.Errorf("a containerd that imports it: %+v", st)
	}
	reads := map[int]bool{}
	for _, c := range st.Containerd {
		reads[c.PID] = c.ReadsGPURun
	}
	if len(reads) != 2 || reads[k3s.Process.Pid] || !reads[importer.Process.Pid] {
		t.Errorf("containerd list %+v", st.Containerd)
	}
}
