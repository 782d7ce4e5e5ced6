package nodeagent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/gpurun/gpurun/engine/restart"
	"github.com/gpurun/gpurun/node/install"
)

const k3sTestdata = "../install/testdata/k3s/"

// renderK3s renders containerd's config as k3s does when it starts: the
// node's template (the version 3 one first), else k3s's base template, with
// the base template defined as "base".
func renderK3s(t *testing.T, n *node, l install.Layout) string {
	t.Helper()
	base, err := os.ReadFile(k3sTestdata + "k3s-06be48b6-ContainerdConfigTemplate.toml.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	main := string(base)
	for _, p := range []string{l.TemplateV3(), l.Template()} {
		if data, err := os.ReadFile(n.path(p)); err == nil {
			main = string(data)
			break
		}
	}
	tt := template.Must(template.New("compiled_template").Parse(main))
	template.Must(tt.New("base").Parse(string(base)))
	data := map[string]any{
		"Program": string(l.Distribution),
		"NodeConfig": map[string]any{
			"SELinux": false, "NoFlannel": false,
			"Containerd":  map[string]any{"Opt": filepath.Join(l.Root(), "opt")},
			"AgentConfig": map[string]any{"PauseImage": "rancher/mirrored-pause:3.6", "Snapshotter": "overlayfs", "ImageServiceSocket": "", "CNIBinDir": "/bin", "CNIConfDir": "/etc/cni/net.d"},
		},
		"EnableUnprivileged": true, "DisableCgroup": false, "IsRunningInUserNS": false, "SystemdCgroup": true,
		"PrivateRegistryConfig": nil,
		"ExtraRuntimes":         map[string]map[string]string{"nvidia": {"RuntimeType": "io.containerd.runc.v2", "BinaryName": "/usr/bin/nvidia-container-runtime"}},
	}
	var b bytes.Buffer
	if err := tt.Execute(&b, data); err != nil {
		t.Fatal(err)
	}
	n.write(t, l.Config(), b.String(), 0o600)
	return b.String()
}

// newK3sNode is a fake k3s node: k3s's generated config and an
// administrator's template, no /etc/containerd.
func newK3sNode(t *testing.T, d install.Distribution) (*node, install.Layout) {
	t.Helper()
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	if err := os.RemoveAll(n.path("/etc/containerd")); err != nil {
		t.Fatal(err)
	}
	l := install.Layout{Distribution: d}
	admin, err := os.ReadFile(k3sTestdata + "admin-v2-config.toml.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	n.write(t, l.Template(), string(admin), 0o644)
	renderK3s(t, n, l)
	return n, l
}

func TestK3sInstallStatusUninstall(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dist  install.Distribution // as given: auto is detected
		want  install.Distribution
		start bool // a containerd runs before the install
	}{
		{"k3s detected", install.DistAuto, install.DistK3s, true},
		{"k3s named", install.DistK3s, install.DistK3s, false},
		{"rke2 detected", install.DistAuto, install.DistRKE2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, l := newK3sNode(t, tc.want)
			before := withoutProc(n.snapshot(t))
			generated := n.read(t, l.Config())
			var old *exec.Cmd
			if tc.start {
				old = startFakeWith(t, n, n.path(l.Config()))
				touch(t, n.path(l.Config()), time.Now().Add(-time.Minute))
			}
			a := n.agent(false)
			a.Distribution = tc.dist
			if err := a.Install(context.Background()); err != nil {
				t.Fatalf("install: %v\n%s", err, n.log.String())
			}
			if n.read(t, l.Config()) != generated {
				t.Fatal("install wrote the config.toml k3s generates")
			}
			if tmpl := n.read(t, l.Template()); !strings.Contains(tmpl, "gpurun-runtime") {
				t.Fatalf("template without gpurun:\n%s", tmpl)
			}
			if !strings.Contains(n.log.String(), "NRI disabled in the embedded containerd") {
				t.Errorf("no NRI line in the log:\n%s", n.log.String())
			}
			rec, err := loadRecord(n.path(DefaultStatePath))
			if err != nil || rec.Containerd.Distribution != tc.want || rec.Containerd.Config != l.Config() {
				t.Fatalf("record %+v, %v", rec, err)
			}
			st := a.Status()
			unit := strings.TrimSuffix(l.Units()[0], ".service")
			if st.Ready || !strings.Contains(st.Reason, "restart it (systemctl restart "+unit+")") || st.Distribution != tc.want || st.Embedded == "" {
				t.Errorf("before the restart: %+v", st)
			}

			// k3s restarts: it renders the template, then starts containerd.
			if old != nil {
				stopFake(t, old)
			}
			renderK3s(t, n, l)
			touch(t, n.path(l.Config()), time.Now().Add(-time.Minute))
			ctd := startFakeWith(t, n, n.path(l.Config()))
			if st := a.Status(); !st.Ready || st.ContainerdPID != ctd.Process.Pid {
				t.Errorf("after the restart: %+v", st)
			}

			// Uninstall: the template is restored at once; containerd has
			// gpurun until k3s restarts.
			a.Restart = restart.None
			if err := a.Uninstall(context.Background()); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, n.log.String())
			}
			admin, _ := os.ReadFile(k3sTestdata + "admin-v2-config.toml.tmpl")
			if got := n.read(t, l.Template()); got != string(admin) {
				t.Fatalf("template not restored byte for byte:\n%q", got)
			}
			rec, _ = loadRecord(n.path(DefaultStatePath))
			if rec == nil || !strings.Contains(rec.Pending, "systemctl restart "+unit) {
				t.Fatalf("pending after uninstall: %+v", rec)
			}
			stopFake(t, ctd)
			renderK3s(t, n, l)
			touch(t, n.path(l.Config()), time.Now().Add(-time.Minute))
			startFakeWith(t, n, n.path(l.Config()))
			if err := a.Uninstall(context.Background()); err != nil {
				t.Fatalf("second uninstall: %v\n%s", err, n.log.String())
			}
			if d := diffSnapshots(before, withoutProc(n.snapshot(t))); d != "" {
				t.Errorf("the node is not as it was:\n%s", d)
			}
		})
	}
}

// stopFake stops a fake containerd and waits until it is gone.
func stopFake(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for i := 0; i < 500; i++ {
		if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
			return
		}
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid)); strings.Contains(string(st), ") Z ") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("fake containerd did not stop")
}

// withoutProc drops the processes a test showed the node.
func withoutProc(snap map[string]string) map[string]string {
	for k := range snap {
		if strings.HasPrefix(k, "proc/") {
			delete(snap, k)
		}
	}
	return snap
}

// TestK3sRefusals: settings that cannot work on a k3s node are refused
// before anything changes.
func TestK3sRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(a *Agent)
		want string
	}{
		{"signal", func(a *Agent) { a.Restart = restart.Signal }, "--restart=signal"},
		// Named: a drop-in is refused. Detected, it is left out
		// (TestK3sDetectedLeavesDropInOut).
		{"drop-in", func(a *Agent) { a.Distribution, a.DropInDir = install.DistK3s, "/etc/containerd/conf.d" }, "--drop-in"},
		{"bad name", func(a *Agent) { a.Distribution = "k0s" }, "k0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, _ := newK3sNode(t, install.DistK3s)
			before := n.snapshot(t)
			a := n.agent(false)
			tc.set(a)
			// Run (the DaemonSet's agent) returns the refusal, and tells
			// Failed first (the wiring posts it as a Warning Event).
			var told error
			err := a.Run(context.Background(), RunOptions{Failed: func(err error) { told = err }})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if told != err {
				t.Errorf("Failed was told %v, want %v", told, err)
			}
			if d := diffSnapshots(before, n.snapshot(t)); d != "" {
				t.Errorf("a refused install changed the node:\n%s", d)
			}
		})
	}
}

// TestK3sDetectedLeavesDropInOut: a drop-in setting reaches every node
// of the DaemonSet (the default-runtime overlay's, or the chart's
// nodeAgent.dropIn), k3s and RKE2 ones too; where the agent detects them
// (distribution auto) it leaves the drop-in out, says so, and puts
// gpurun's tables into their template as without it.
func TestK3sDetectedLeavesDropInOut(t *testing.T) {
	for _, d := range []install.Distribution{install.DistK3s, install.DistRKE2} {
		t.Run(string(d), func(t *testing.T) {
			n, l := newK3sNode(t, d)
			a := n.agent(false)
			a.DropInDir = "/etc/containerd/gpurun.d"
			if err := a.Install(context.Background()); err != nil {
				t.Fatalf("install: %v\n%s", err, n.log.String())
			}
			if !strings.Contains(n.log.String(), "--drop-in does not apply to "+string(d)) {
				t.Errorf("the log does not say the drop-in was left out:\n%s", n.log.String())
			}
			if _, err := os.Stat(n.path("/etc/containerd/gpurun.d")); !os.IsNotExist(err) {
				t.Errorf("a drop-in directory on a %s node: %v", d, err)
			}
			if tmpl := n.read(t, l.Template()); !strings.Contains(tmpl, "gpurun-runtime") {
				t.Errorf("template without gpurun:\n%s", tmpl)
			}
			rec, err := loadRecord(n.path(DefaultStatePath))
			if err != nil || rec.Containerd.DropInDir != "" || rec.Containerd.Distribution != d {
				t.Fatalf("record %+v, %v", rec, err)
			}
			// Installing again (the next pod of a rollout) changes nothing.
			before := withoutProc(n.snapshot(t))
			if err := a.Install(context.Background()); err != nil {
				t.Fatalf("second install: %v", err)
			}
			if diff := diffSnapshots(before, withoutProc(n.snapshot(t))); diff != "" {
				t.Errorf("a second install changed the node:\n%s", diff)
			}
			if err := a.Uninstall(context.Background()); err != nil {
				t.Fatalf("uninstall: %v", err)
			}
		})
	}
}
