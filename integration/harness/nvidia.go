package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NVIDIAToolkitEnv names the directory holding NVIDIA's container toolkit
// (nvidia-ctk, nvidia-ctk-installer, nvidia-container-runtime and its .cdi
// and .legacy modes, nvidia-cdi-hook). `make test-integration` builds them
// from the Go module proxy (`make nvidia-toolkit`) and sets it.
const NVIDIAToolkitEnv = "GPURUN_TEST_NVIDIA_TOOLKIT"

// nvidiaToolkitTools are the binaries NewNVIDIA needs from NVIDIAToolkitEnv.
var nvidiaToolkitTools = []string{"nvidia-ctk", "nvidia-ctk-installer", "nvidia-container-runtime",
	"nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy", "nvidia-cdi-hook"}

// What a fake NVIDIA GPU looks like in a container, as NVIDIA's CDI specs
// describe a real one.
const (
	// GPUDevicePath is the GPU's device node in the container.
	GPUDevicePath = "/dev/nvidia0"
	// GPUUUID is the fake GPU's UUID, a device name in its CDI spec.
	GPUUUID = "GPU-00000000-0000-4000-8000-000000000000"
	// DriverLibPath is where the CDI spec mounts the fake driver library
	// in the container (the driver's libcuda.so.1 on a real node).
	DriverLibPath = "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
	// DriverLibContent is that file's content.
	DriverLibContent = "fake libcuda of gpurun's tests\n"
	// CDIKind is the kind of NVIDIA's GPUs in CDI ("nvidia.com/gpu=0").
	CDIKind = "nvidia.com/gpu"
	// CDIManagementKind is the kind of the spec the GPU Operator's toolkit
	// generates for its own operands ("management.nvidia.com/gpu=all").
	CDIManagementKind = "management.nvidia.com/gpu"
	// CDIDRAKind is the kind of the claims NVIDIA's DRA driver writes
	// specs for ("k8s.gpu.nvidia.com/device=<claim uid>-gpu-0").
	CDIDRAKind = "k8s.gpu.nvidia.com/device"
)

// NVIDIA is the NVIDIA side of a fake GPU node: a GPU that is only a
// device node, the CDI specs NVIDIA's tools would write for it, and the
// toolkit's binaries. Everything lives in Dir; nothing under the host's
// /dev, /etc or /run is touched. Pass it to StartContainerd or
// StartContainerd2 (ContainerdOptions.NVIDIA) to run that containerd, its
// shims and runtimes on the node: in a mount namespace of its own where
// /var/run/cdi is CDIDir, and with a PATH in which /proc/modules lists the
// nvidia module (fakeModulesCat; NVIDIA's runtime wrappers run runc
// instead of NVIDIA's runtime without it).
type NVIDIA struct {
	// Dir holds everything; the cleanup removes it.
	Dir string
	// GPU is the fake GPU: a character device 195:0 in Dir.
	GPU string
	// CDIDir holds the CDI specs: containerd 2.x's cdi_spec_dirs, and the
	// node's /var/run/cdi (where NVIDIA's runtime looks) in containerd's
	// mount namespace.
	CDIDir string
	// DriverLib stands for the driver's libcuda.so.1, which every spec
	// mounts at DriverLibPath.
	DriverLib string
	// ToolkitBin holds the toolkit's binaries ($GPURUN_TEST_NVIDIA_TOOLKIT).
	ToolkitBin string

	t testing.TB
}

// NewNVIDIA makes a fake GPU node's NVIDIA side: the GPU, the driver
// library and the CDI specs of kinds CDIKind (devices "0", GPUUUID and
// "all": the device node; for the spec, the driver's mount and
// NVIDIA_VISIBLE_DEVICES=void, as the device plugin's native CDI mode
// has it), CDIManagementKind ("all", the toolkit's spec for the GPU
// Operator's operands) and CDIDRAKind (a DRA claim's device). It fails
// the test, naming the make target, when the toolkit is not built.
func NewNVIDIA(t testing.TB) *NVIDIA {
	t.Helper()
	requireRoot(t)
	bin := requireNVIDIAToolkit(t)
	dir := makeDir(t, "nv")
	n := &NVIDIA{
		Dir:        dir,
		GPU:        filepath.Join(dir, "dev", "nvidia0"),
		CDIDir:     filepath.Join(dir, "cdi"),
		DriverLib:  filepath.Join(dir, "driver", "libcuda.so.1"),
		ToolkitBin: bin,
		t:          t,
	}
	for _, d := range []string{filepath.Dir(n.GPU), n.CDIDir, filepath.Dir(n.DriverLib)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	if err := unix.Mknod(n.GPU, unix.S_IFCHR|0o666, int(unix.Mkdev(NvidiaMajor, 0))); err != nil {
		t.Fatalf("harness: mknod %s c %d 0: %v", n.GPU, NvidiaMajor, err)
	}
	if err := os.WriteFile(n.DriverLib, []byte(DriverLibContent), 0o644); err != nil {
		t.Fatalf("harness: %v", err)
	}
	for file, spec := range map[string]any{
		"nvidia.com-gpu.json":            n.spec(CDIKind, []string{"0", GPUUUID, "all"}, true),
		"management.nvidia.com-gpu.json": n.spec(CDIManagementKind, []string{"all"}, false),
		"k8s.gpu.nvidia.com-device.json": n.spec(CDIDRAKind, []string{"claim-0-gpu-0"}, true),
	} {
		data, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			t.Fatalf("harness: %v", err)
		}
		if err := os.WriteFile(filepath.Join(n.CDIDir, file), data, 0o644); err != nil {
			t.Fatalf("harness: %v", err)
		}
	}
	return n
}

// spec is a CDI spec of kind whose devices (names) all are the fake GPU.
func (n *NVIDIA) spec(kind string, names []string, void bool) map[string]any {
	node := map[string]any{"path": GPUDevicePath, "hostPath": n.GPU}
	var devices []any
	for _, name := range names {
		devices = append(devices, map[string]any{
			"name":           name,
			"containerEdits": map[string]any{"deviceNodes": []any{node}},
		})
	}
	edits := map[string]any{
		"mounts": []any{map[string]any{
			"hostPath": n.DriverLib, "containerPath": DriverLibPath, "options": []string{"ro", "nosuid", "nodev", "bind"},
		}},
	}
	if void {
		edits["env"] = []string{"NVIDIA_VISIBLE_DEVICES=void"}
	}
	return map[string]any{"cdiVersion": "0.5.0", "kind": kind, "devices": devices, "containerEdits": edits}
}

// requireNVIDIAToolkit returns $GPURUN_TEST_NVIDIA_TOOLKIT after checking
// that it holds the toolkit, failing the test with how to build it.
func requireNVIDIAToolkit(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(NVIDIAToolkitEnv)
	if dir == "" {
		t.Fatalf("harness: prerequisite missing: $%s is not set: run the tests with `make test-integration` (it builds NVIDIA's container toolkit with `make nvidia-toolkit` and sets it), or point it at a directory holding %s", NVIDIAToolkitEnv, strings.Join(nvidiaToolkitTools, ", "))
	}
	for _, name := range nvidiaToolkitTools {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			t.Fatalf("harness: prerequisite missing: %s has no executable %s (%v): run `make nvidia-toolkit`", dir, name, err)
		}
	}
	return dir
}

// nodeMounts is the mount namespace a containerd of this node runs in:
// the node's /var/run/cdi is CDIDir.
func (n *NVIDIA) nodeMounts(scratch string) nodeMounts {
	return nodeMounts{
		overlays: []string{"/run"},
		binds:    map[string]string{"/run/cdi": n.CDIDir},
		scratch:  scratch,
	}
}

// fakeModulesCat is a cat that answers for a /proc/modules this kernel
// does not have (it has no loadable modules) as a GPU node's lists the
// nvidia module, and is cat for everything else. The toolkit's runtime
// wrappers run `cat /proc/modules | grep -e "^nvidia "` and, finding no
// driver, run runc instead of NVIDIA's runtime; a containerd of the node
// has it first in PATH.
const fakeModulesCat = `#!/bin/sh
if [ "$#" = 1 ] && [ "$1" = /proc/modules ] && [ ! -e /proc/modules ]; then
	echo "nvidia 56823808 0 - Live 0x0000000000000000 (POE)"
	exit 0
fi
exec /bin/cat "$@"
`

// nodeEnv writes fakeModulesCat into dir/node-bin and returns env with
// that directory first in PATH.
func (n *NVIDIA) nodeEnv(dir string, env []string) ([]string, error) {
	binDir := filepath.Join(dir, "node-bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(binDir, "cat"), []byte(fakeModulesCat), 0o755); err != nil {
		return nil, err
	}
	path := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return append(env, "PATH="+binDir+":"+path), nil
}

// Bin returns the path of one of the toolkit's binaries.
func (n *NVIDIA) Bin(name string) string { return filepath.Join(n.ToolkitBin, name) }

// RuntimeConfig writes a config.toml for nvidia-container-runtime (as the
// toolkit's package installs it in /etc/nvidia-container-runtime) in CDI
// mode, with runtimes as its low-level runtimes, and returns its path.
// containerd gets it through NVIDIA_CTK_CONFIG_FILE_PATH (RuntimeEnv).
func (n *NVIDIA) RuntimeConfig(runtimes ...string) string {
	n.t.Helper()
	if len(runtimes) == 0 {
		runtimes = []string{"runc", "crun"}
	}
	p := filepath.Join(n.Dir, "etc", "nvidia-container-runtime", "config.toml")
	text := fmt.Sprintf("[nvidia-container-runtime]\n  log-level = \"info\"\n  mode = \"cdi\"\n  runtimes = %s\n\n[nvidia-container-runtime.modes.cdi]\n  default-kind = %q\n  annotation-prefixes = [\"cdi.k8s.io/\"]\n  spec-dirs = [%s]\n",
		tomlArray(runtimes), CDIKind, tomlString(n.CDIDir))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		n.t.Fatalf("harness: %v", err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		n.t.Fatalf("harness: %v", err)
	}
	return p
}

// RuntimeEnv is the environment entry that points NVIDIA's runtime at the
// config RuntimeConfig wrote.
func (n *NVIDIA) RuntimeEnv() string {
	return "NVIDIA_CTK_CONFIG_FILE_PATH=" + filepath.Join(n.Dir, "etc", "nvidia-container-runtime", "config.toml")
}

// Toolkit is NVIDIA's toolkit configuring one containerd, as an admin
// runs nvidia-ctk or as the GPU Operator's toolkit pod runs
// nvidia-ctk-installer, on that containerd's own config and sockets.
type Toolkit struct {
	N *NVIDIA
	C *Containerd
	// DropIn is the drop-in the toolkit writes: conf.d/99-nvidia.toml next
	// to the containerd's config, as /etc/containerd/conf.d/99-nvidia.toml
	// is next to /etc/containerd/config.toml.
	DropIn string
	// Root is where nvidia-ctk-installer installs the toolkit
	// (/usr/local/nvidia/toolkit under the GPU Operator).
	Root string
	// RuntimeConfig is the installed toolkit's own config: the
	// nvidia-container-runtime.runtimes it lists are the low-level
	// runtimes NVIDIA's runtime runs.
	RuntimeConfig string
}

// Toolkit returns the toolkit for containerd c.
func (n *NVIDIA) Toolkit(c *Containerd) *Toolkit {
	root := filepath.Join(n.Dir, "usr-local-nvidia")
	return &Toolkit{
		N: n, C: c,
		DropIn:        filepath.Join(filepath.Dir(c.ConfigPath), "conf.d", "99-nvidia.toml"),
		Root:          filepath.Join(root, "toolkit"),
		RuntimeConfig: filepath.Join(root, "toolkit", ".config", "nvidia-container-runtime", "config.toml"),
	}
}

// Configure runs `nvidia-ctk runtime configure --runtime=containerd` on
// the containerd's config with the drop-in DropIn, registering
// nvidia-container-runtime (the toolkit's binary, which reads
// RuntimeConfig's file through the containerd's environment), as the
// default when setDefault. It does not restart containerd. It returns
// nvidia-ctk's output, failing the test on an error.
func (tk *Toolkit) Configure(setDefault bool) string {
	tk.C.t.Helper()
	args := []string{"runtime", "configure", "--runtime=containerd", "--config=" + tk.C.ConfigPath,
		"--drop-in-config=" + tk.DropIn, "--nvidia-runtime-path=" + tk.N.Bin("nvidia-container-runtime")}
	if setDefault {
		args = append(args, "--set-as-default")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, errOut, err := runCmd(ctx, nil, tk.N.Bin("nvidia-ctk"), args...)
	if err != nil {
		tk.C.t.Fatalf("harness: nvidia-ctk %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out + errOut
}

// Installer is a running nvidia-ctk-installer: the GPU Operator's toolkit
// container, started as its DaemonSet pod starts.
type Installer struct {
	tk   *Toolkit
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	nri  bool
}

// InstallerOptions configure StartInstaller.
type InstallerOptions struct {
	// NRI runs NVIDIA's NRI plugin (the GPU Operator's
	// cdi.nriPluginEnabled) on the containerd's NRI socket instead of
	// configuring the runtime; pods in NRINamespace may get
	// management.nvidia.com/gpu devices.
	NRI          bool
	NRINamespace string
	// Env is added to the installer's environment.
	Env []string
}

// StartInstaller starts nvidia-ctk-installer for the containerd, as the
// GPU Operator's toolkit DaemonSet does (RUNTIME=containerd, its config,
// drop-in and socket; the toolkit's runtime in CDI mode), on this node's
// paths: the toolkit installed from ToolkitBin into Root, its pid file in
// Dir. RUNTIME_RESTART_MODE is none — its default would signal the
// installer's own process group here — and the harness restarts the
// containerd where the installer would, once the installer has configured
// it and waits for its signal. It fails the test when the installer does
// not get there.
func (tk *Toolkit) StartInstaller(o InstallerOptions) *Installer {
	tk.C.t.Helper()
	n := tk.N
	art := filepath.Join(n.Dir, "artifacts")
	if err := os.MkdirAll(filepath.Join(art, "usr", "bin"), 0o755); err != nil {
		tk.C.t.Fatalf("harness: %v", err)
	}
	for _, name := range []string{"nvidia-ctk", "nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy", "nvidia-cdi-hook"} {
		link := filepath.Join(art, "usr", "bin", name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(n.Bin(name), link); err != nil {
			tk.C.t.Fatalf("harness: %v", err)
		}
	}
	// containerd config dump, as the installer runs it on a node: this
	// containerd's binary with its config.
	dump := filepath.Join(n.Dir, "containerd-config-dump")
	script := fmt.Sprintf("#!/bin/sh\nexec %s --config %s \"$@\"\n", tk.C.bin, tk.C.ConfigPath)
	if err := os.WriteFile(dump, []byte(script), 0o755); err != nil {
		tk.C.t.Fatalf("harness: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(tk.DropIn), 0o755); err != nil {
		tk.C.t.Fatalf("harness: %v", err)
	}
	env := append(envWithout("NVIDIA_CTK_CONFIG_FILE_PATH"),
		"RUNTIME=containerd",
		"CONTAINERD_CONFIG="+tk.C.ConfigPath,
		"RUNTIME_DROP_IN_CONFIG="+tk.DropIn,
		"CONTAINERD_SOCKET="+tk.C.Address,
		"RUNTIME_EXECUTABLE_PATH="+dump,
		"RUNTIME_RESTART_MODE=none",
		"HOST_ROOT_MOUNT=/",
		"TOOLKIT_INSTALL_DIR="+filepath.Dir(tk.Root),
		"TOOLKIT_SOURCE_ROOT="+art,
		"PID_FILE="+filepath.Join(n.Dir, "run", "toolkit.pid"),
		"NVIDIA_CONTAINER_RUNTIME_MODE=cdi",
		"CDI_ENABLED=false",
	)
	if o.NRI {
		ns := o.NRINamespace
		if ns == "" {
			ns = "gpu-operator"
		}
		env = append(env, "ENABLE_NRI_PLUGIN=true", "NRI_NAMESPACE="+ns, "NRI_SOCKET="+tk.nriSocket())
	}
	env = append(env, o.Env...)
	i := &Installer{tk: tk, nri: o.NRI, log: filepath.Join(n.Dir, fmt.Sprintf("installer-%d.log", time.Now().UnixNano())), done: make(chan struct{})}
	logf, err := os.Create(i.log)
	if err != nil {
		tk.C.t.Fatalf("harness: %v", err)
	}
	defer logf.Close()
	// --ignore-errors: the toolkit's C parts (libnvidia-container,
	// nvidia-container-cli, the legacy hook) are not built here, and
	// CDI mode needs none of them.
	i.cmd = exec.Command(n.Bin("nvidia-ctk-installer"), "--ignore-errors")
	i.cmd.Env = env
	i.cmd.Stdout, i.cmd.Stderr = logf, logf
	i.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := StartWaited(i.cmd, func(err error) { i.err = err; close(i.done) }); err != nil {
		tk.C.t.Fatalf("harness: start nvidia-ctk-installer: %v", err)
	}
	tk.C.t.Cleanup(i.kill)
	if err := i.waitLog("Waiting for signal", 1); err != nil {
		tk.C.t.Fatalf("harness: nvidia-ctk-installer: %v\n--- its log ---\n%s", err, logTail(i.log, 40))
	}
	if !o.NRI {
		tk.C.Restart()
	}
	return i
}

// nriSocket is the containerd's NRI socket (containerd 2.x), else "".
func (tk *Toolkit) nriSocket() string {
	return nriDirs(tk.C.Dir).socket
}

// waitLog waits until the installer's log has n lines with substr, or it
// exits.
func (i *Installer) waitLog(substr string, n int) error {
	deadline := time.Now().Add(time.Minute)
	for countLines(i.log, substr) < n {
		select {
		case <-i.done:
			if countLines(i.log, substr) >= n {
				return nil
			}
			return fmt.Errorf("exited (%v) before logging %q", i.err, substr)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %q after a minute", substr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Log returns the installer's output so far.
func (i *Installer) Log() string { return logTail(i.log, 200) }

// Stop sends the installer SIGTERM, as the kubelet does when the toolkit
// pod stops (an operator upgrade, a node drain), waits until it has
// reverted its configuration and exited, and restarts the containerd
// where the installer would (unless it ran the NRI plugin, which changes
// no config). It fails the test when the installer does not exit cleanly.
func (i *Installer) Stop() {
	t := i.tk.C.t
	t.Helper()
	if err := i.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("harness: SIGTERM nvidia-ctk-installer: %v\n--- its log ---\n%s", err, logTail(i.log, 40))
	}
	select {
	case <-i.done:
	case <-time.After(time.Minute):
		t.Fatalf("harness: nvidia-ctk-installer did not exit within a minute of SIGTERM\n--- its log ---\n%s", logTail(i.log, 40))
	}
	if i.err != nil {
		t.Fatalf("harness: nvidia-ctk-installer: %v\n--- its log ---\n%s", i.err, logTail(i.log, 40))
	}
	if !i.nri {
		i.tk.C.Restart()
	}
}

// kill ends an installer a test left running, without its cleanup.
func (i *Installer) kill() {
	select {
	case <-i.done:
		return
	default:
	}
	_ = i.cmd.Process.Kill()
	<-i.done
}
