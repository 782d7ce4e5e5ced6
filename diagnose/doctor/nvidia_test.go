package doctor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpurun/gpurun/engine/nvidia"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/node/shim"
	"github.com/gpurun/gpurun/policy"
)

// The GPU Operator's toolkit, as its installer lays it out on a node.
const (
	toolkitRuntime = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
	toolkitConfig  = "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"
)

// toolkitWrapper is the wrapper script nvidia-ctk-installer v1.20.2
// writes for its runtime.
const toolkitWrapper = `#! /bin/sh
cat /proc/modules | grep -e "^nvidia " >/dev/null 2>&1
if [ "${?}" != "0" ]; then
	echo "nvidia driver modules are not yet loaded, invoking runc directly" >&2
	exec runc "$@"
fi
NVIDIA_CTK_CONFIG_FILE_PATH=` + toolkitConfig + ` \
PATH=/usr/local/nvidia/toolkit:$PATH \
	/usr/local/nvidia/toolkit/nvidia-container-runtime.real \
		"$@"
`

// TestCycleCheck: gpurun-runtime hands over to the GPU Operator's
// toolkit runtime; that runtime's config (named in its wrapper) lists
// its low-level runtimes. gpurun-runtime first (the installer lists
// containerd's default runtime binary) is a cycle: a problem, with the
// toolkit's environment as the fix; runc first is not; records of broken
// cycles after the config changed are a problem too, older ones not.
func TestCycleCheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		runtimes string // the config's runtimes line, "" for none
		logAge   time.Duration
		want     Status
		wantText string
	}{
		{"the installer listed gpurun-runtime", `runtimes = ["/usr/local/bin/gpurun-runtime", "runc", "crun"]`, 0, Problem, "call each other"},
		{"runc and crun", `runtimes = ["runc", "crun"]`, 0, OK, "which runs /usr/sbin/runc"},
		{"no runtimes: runc", "", 0, OK, "which runs /usr/sbin/runc"},
		{"cycles logged since the config changed", `runtimes = ["runc", "crun"]`, -time.Hour, Problem, "calling gpurun-runtime back"},
		{"cycles logged before the config changed", `runtimes = ["runc", "crun"]`, time.Hour, OK, "which runs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := hostFake(t)
			f.executable(goldenRuntime)
			f.write(toolkitRuntime, toolkitWrapper)
			if err := os.Chmod(filepath.Join(f.root, toolkitRuntime), 0o755); err != nil {
				t.Fatal(err)
			}
			f.write(toolkitConfig, "[nvidia-container-runtime]\n  mode = \"cdi\"\n  "+tc.runtimes+"\n")
			main, err := os.ReadFile(filepath.Join(containerdData, "golden", "installed", "containerd-1.6.20-config-default.default.toml"))
			if err != nil {
				t.Fatal(err)
			}
			f.write(DefaultContainerdConfig, string(main))
			logFile := "/var/log/gpurun.log"
			f.write(policyFile, fmt.Sprintf("runtime = %q\nlog_file = %q\n", toolkitRuntime, logFile))
			if tc.logAge != 0 {
				at := time.Now()
				rec := fmt.Sprintf(`{"time":%q,"level":"ERROR","msg":%q,"component":"gpurun-runtime"}`+"\n", at.Format(time.RFC3339Nano), shim.MsgCycle)
				f.write(logFile, rec)
				mtime := at.Add(tc.logAge)
				if err := os.Chtimes(filepath.Join(f.root, toolkitConfig), mtime, mtime); err != nil {
					t.Fatal(err)
				}
			}
			r := hostReport(f, HostOptions{DockerErr: errors.New("no docker"), Policy: PolicySource{Path: policyFile}})
			c := check(t, r, "runtime.cycle")
			if c.Status != tc.want || !strings.Contains(c.Detail, tc.wantText) {
				t.Errorf("%s: %s; want %s mentioning %q", c.Status, c.Detail, tc.want, tc.wantText)
			}
			if c.Status == Problem && !strings.Contains(c.Fix, nvidia.RuntimesEnv+"=runc,crun") {
				t.Errorf("fix %q does not name the toolkit's environment", c.Fix)
			}
		})
	}
}

// policyFile is the fake node's policy file.
const policyFile = "/etc/gpurun/config.toml"

// TestNRIPluginSeen: with no gpurun runtime handler, containerd 2.x's
// NRI on and a gpurun NRI plugin connected to its socket, doctor does not
// warn that pods get 64 MiB; a plugin on another socket, or none, leaves
// the warning. A plugin in a pod names the socket as its container mounts
// it: where containerd's socket_path is another path (the node's NRI
// directory mounted at /var/run/nri in the pod), the socket the plugin's
// own root shows is compared with containerd's, file for file.
func TestNRIPluginSeen(t *testing.T) {
	main, err := os.ReadFile(filepath.Join(containerdData, "containerd-2.4.2-config-default.toml"))
	if err != nil {
		t.Fatal(err)
	}
	const nodeSocket = "/run/node/nri/nri.sock"
	moved := strings.Replace(string(main), "socket_path = '/var/run/nri/nri.sock'", "socket_path = '"+nodeSocket+"'", 1)
	if moved == string(main) {
		t.Fatal("the testdata config sets no NRI socket_path")
	}
	inPod := []string{"/usr/local/bin/gpurun", "--config=/etc/gpurun/config.toml", "nri", "--socket=/var/run/nri/nri.sock"}
	for _, tc := range []struct {
		name    string
		config  string
		cmdline []string // the plugin's; nil for none
		// podSocket, when set, is the socket in the plugin's root: "same"
		// the node's socket (a hard link), "other" another file.
		podSocket string
		want      Status
	}{
		{"connected", string(main), []string{"/usr/local/bin/gpurun", "--config", "/etc/gpurun/config.toml", "nri", "--socket", "/var/run/nri/nri.sock"}, "", OK},
		{"connected, default socket", string(main), []string{"gpurun-full", "nri"}, "", OK},
		{"on another socket", string(main), []string{"gpurun", "nri", "--socket=/tmp/other.sock"}, "", Warn},
		{"none", string(main), nil, "", Warn},
		{"in a pod that mounts the node's socket elsewhere", moved, inPod, "same", OK},
		{"in a pod on another runtime's socket", moved, inPod, "other", Warn},
		{"in a pod whose root is gone", moved, inPod, "", Warn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := hostFake(t)
			f.write(DefaultContainerdConfig, tc.config)
			if tc.cmdline != nil {
				f.write("/proc/4321/cmdline", strings.Join(tc.cmdline, "\x00")+"\x00")
			}
			if tc.podSocket != "" {
				f.write(nodeSocket, "")
				inRoot := "/proc/4321/root/var/run/nri/nri.sock"
				if tc.podSocket == "same" {
					if err := os.MkdirAll(filepath.Dir(filepath.Join(f.root, inRoot)), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.Link(filepath.Join(f.root, nodeSocket), filepath.Join(f.root, inRoot)); err != nil {
						t.Fatal(err)
					}
				} else {
					f.write(inRoot, "")
				}
			}
			r := hostReport(f, HostOptions{DockerErr: errors.New("no docker")})
			if c := check(t, r, "containerd.runtime"); c.Status != tc.want {
				t.Errorf("%s: %s; want %s", c.Status, c.Detail, tc.want)
			}
		})
	}
}

// TestHandlersHidden: gpurun's drop-in, written before NVIDIA's toolkit
// came (a copy of the main config's CRI section), read after NVIDIA's
// drop-in on containerd 1.x, hides the nvidia handler: a problem whose
// fix is installing gpurun again.
func TestHandlersHidden(t *testing.T) {
	f := hostFake(t)
	f.executable(goldenRuntime)
	f.executable("/usr/bin/nvidia-container-runtime")
	main, err := os.ReadFile(filepath.Join(containerdData, "nvidia", "containerd-1.6.20-config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	mainText := strings.Replace(string(main), `imports = ["/etc/containerd/conf.d/*.toml"]`, `imports = ["/etc/containerd/conf.d/*.toml", "/etc/containerd/gpurun.d/99-gpurun.toml"]`, 1)
	f.write(DefaultContainerdConfig, mainText)
	f.copyFile(filepath.Join(containerdData, "nvidia", "containerd-1.6.20-99-nvidia.toml"), "/etc/containerd/conf.d/99-nvidia.toml")
	own, err := os.ReadFile(filepath.Join(containerdData, "golden", "dropin", "containerd-1.6.20-config-default.default.dropin.toml"))
	if err != nil {
		t.Fatal(err)
	}
	f.write("/etc/containerd/gpurun.d/99-gpurun.toml", string(own))
	r := hostReport(f, HostOptions{DockerErr: errors.New("no docker")})
	c := check(t, r, "containerd.handlers")
	if c.Status != Problem || !strings.Contains(c.Detail, "nvidia (defined in /etc/containerd/conf.d/99-nvidia.toml)") || !strings.Contains(c.Fix, "gpurun install containerd again") {
		t.Errorf("%s: %s [fix: %s]; want a problem naming the nvidia handler and the fix", c.Status, c.Detail, c.Fix)
	}
}

// TestRecordedDefaultLost: gpurun installed on containerd 1.6 as the
// default (gpurun install --set-as-default, its record in the install
// state), then nvidia-ctk runtime configure --set-as-default by hand (the
// files as v1.20.2 wrote them over gpurun's): every new GPU pod gets
// 64 MiB. What the admin asked for no longer holds: a problem, with the
// command that restores it. Without the record, gpurun as a handler that
// is not the default is what an admin may want: a warning.
func TestRecordedDefaultLost(t *testing.T) {
	for _, recorded := range []bool{true, false} {
		t.Run(fmt.Sprintf("recorded=%v", recorded), func(t *testing.T) {
			f := hostFake(t)
			f.executable(goldenRuntime)
			f.executable("/usr/bin/nvidia-container-runtime")
			f.copyFile(filepath.Join(containerdData, "containerd-1.6.20-config-default.toml"), DefaultContainerdConfig)
			if recorded {
				var out bytes.Buffer
				c := install.Containerd{Options: install.Options{HostRoot: f.root, RuntimePath: goldenRuntime, StatePath: install.DefaultStatePath, PolicyPath: policy.DefaultConfigPath, Out: &out}, SetAsDefault: true}
				if err := c.Install(); err != nil {
					t.Fatalf("install: %v\n%s", err, out.String())
				}
			}
			f.copyFile(filepath.Join(containerdData, "nvidia", "over-gpurun-containerd-1.6.20-config.toml"), DefaultContainerdConfig)
			f.copyFile(filepath.Join(containerdData, "nvidia", "over-gpurun-containerd-1.6.20-99-nvidia.toml"), "/etc/containerd/conf.d/99-nvidia.toml")
			c := check(t, hostReport(f, HostOptions{DockerErr: errors.New("no docker")}), "containerd.runtime")
			switch {
			case recorded && (c.Status != Problem || !strings.Contains(c.Detail, "gpurun install made gpurun the default") || !strings.Contains(c.Detail, "nvidia is, set in /etc/containerd/conf.d/99-nvidia.toml") || !strings.HasPrefix(c.Fix, "sudo gpurun install containerd --set-as-default --restart")):
				t.Errorf("%s: %s [fix: %s]; want a problem saying the recorded default no longer holds, and the install that restores it", c.Status, c.Detail, c.Fix)
			case !recorded && c.Status != Warn:
				t.Errorf("%s: %s; want a warning (nothing recorded)", c.Status, c.Detail)
			}
		})
	}
}
