//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/diagnose/doctor"
	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/policy"
)

// doctorImage builds gpurun-test/doctor in the daemon: FROM scratch, the
// static gpurun-full binary (doctor is one of its commands) as its
// entrypoint, with the classic builder.
func doctorImage(t *testing.T, d *harness.Dockerd) string {
	t.Helper()
	return harness.StaticBinaryImage(t, d, "gpurun-test/doctor:latest", bin(t, "gpurun-full"))
}

// decodeReport reads doctor's --json output.
func decodeReport(t *testing.T, out string) doctor.Report {
	t.Helper()
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("doctor --json output is not a report: %v\n%s", err, out)
	}
	if r.Schema != doctor.Schema {
		t.Fatalf("schema %q, want %q", r.Schema, doctor.Schema)
	}
	return r
}

// wantCheck fails the test unless the report has the check with the status.
func wantCheck(t *testing.T, r doctor.Report, name string, want doctor.Status) doctor.Check {
	t.Helper()
	c, ok := r.Find(name)
	if !ok {
		t.Fatalf("no check %q in %+v", name, r.Checks)
	}
	if c.Status != want {
		t.Errorf("%s: %s (%s), want %s", name, c.Status, c.Detail, want)
	}
	return c
}

func number(t *testing.T, c doctor.Check, key string) int64 {
	t.Helper()
	v, ok := c.Data[key].(float64)
	if !ok {
		t.Fatalf("%s: data %q is %v", c.Name, key, c.Data[key])
	}
	return int64(v)
}

// TestDoctorDocker: doctor inside a GPU container at Docker's default
// 64 MiB names the problem (exit 1); started by gpurun run it is healthy
// (exit 0); and from the host, doctor CONTAINER says the same of both.
func TestDoctorDocker(t *testing.T) {
	e := newRunEnv(t)
	img := doctorImage(t, e.d)
	want := hostTarget(t)

	t.Run("inside, docker run: problem", func(t *testing.T) {
		cmd := e.d.DockerCmd("run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", img, "doctor", "--json")
		outb, err := cmd.Output()
		code := cmd.ProcessState.ExitCode()
		if code != 1 {
			t.Fatalf("doctor in a 64MiB GPU container: exit %d (%v), want 1\n%s", code, err, outb)
		}
		r := decodeReport(t, string(outb))
		if r.Mode != doctor.ModeContainer {
			t.Errorf("mode %s, want container", r.Mode)
		}
		c := wantCheck(t, r, "shm.size", doctor.Problem)
		if got := number(t, c, "size_bytes"); got != policy.EngineDefaultShm {
			t.Errorf("size %d, want Docker's 64MiB", got)
		}
		if got := number(t, c, "target_bytes"); got != want {
			t.Errorf("target %d, want the policy's %d", got, want)
		}
		if plan := wantCheck(t, r, "plan", doctor.OK); plan.Data["action"] != "set-size" {
			t.Errorf("plan %v", plan.Data)
		}
	})
	t.Run("inside, gpurun run: healthy", func(t *testing.T) {
		out, stderr, code := e.gpurun(t, "run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", img, "doctor", "--json")
		if code != 0 {
			t.Fatalf("doctor under gpurun run: exit %d, want 0\n%s\n%s", code, out, stderr)
		}
		r := decodeReport(t, out)
		if got := number(t, wantCheck(t, r, "shm.size", doctor.OK), "size_bytes"); got != want {
			t.Errorf("size %d, want %d", got, want)
		}
	})
	t.Run("inside, --probe", func(t *testing.T) {
		out, stderr, code := e.gpurun(t, "run", "--rm", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", img, "doctor", "--json", "--probe", "256m")
		if code != 0 {
			t.Fatalf("--probe 256m under gpurun run: exit %d\n%s\n%s", code, out, stderr)
		}
		wantCheck(t, decodeReport(t, out), "probe", doctor.OK)
		cmd := e.d.DockerCmd("run", "--rm", "--network", "none", img, "doctor", "--json", "--probe", "256m")
		outb, _ := cmd.Output()
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Fatalf("--probe 256m in 64MiB: exit %d, want 1\n%s", code, outb)
		}
		c := wantCheck(t, decodeReport(t, string(outb)), "probe", doctor.Problem)
		if got := number(t, c, "allocated_bytes"); got >= policy.EngineDefaultShm+policy.MiB {
			t.Errorf("allocated %d of a 64MiB tmpfs", got)
		}
	})
	t.Run("from the host, doctor CONTAINER", func(t *testing.T) {
		if _, stderr, err := e.d.Docker("run", "-d", "--name", "plain", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "sleep", "600"); err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		if out, stderr, code := e.gpurun(t, "run", "-d", "--name", "sized", "--network", "none", "-e", "NVIDIA_VISIBLE_DEVICES=all", e.img, "sleep", "600"); code != 0 {
			t.Fatalf("gpurun run -d: %d %s %s", code, out, stderr)
		}
		t.Cleanup(func() { _, _, _ = e.d.Docker("rm", "-f", "plain", "sized") })

		out, stderr, code := e.gpurun(t, "doctor", "plain", "--json")
		if code != 1 {
			t.Fatalf("doctor plain: exit %d, want 1\n%s\n%s", code, out, stderr)
		}
		r := decodeReport(t, out)
		if r.Mode != doctor.ModeDocker || r.Target != "plain" {
			t.Errorf("mode %s target %s", r.Mode, r.Target)
		}
		c := wantCheck(t, r, "shm.size", doctor.Problem)
		if got := number(t, c, "size_bytes"); got != policy.EngineDefaultShm {
			t.Errorf("size %d read through /proc/<pid>/root, want 64MiB", got)
		}
		plan := wantCheck(t, r, "plan", doctor.OK)
		if plan.Data["action"] != "set-size" || number(t, plan, "size_bytes") != e.target(0) {
			t.Errorf("plan %v, want set-size %d", plan.Data, e.target(0))
		}
		if reason := plan.Detail; !strings.Contains(reason, "config.json") {
			t.Errorf("plan not made over the container's runtime config.json: %s", reason)
		}

		out, stderr, code = e.gpurun(t, "doctor", "sized", "--json")
		if code != 0 {
			t.Fatalf("doctor sized: exit %d, want 0\n%s\n%s", code, out, stderr)
		}
		if got := number(t, wantCheck(t, decodeReport(t, out), "shm.size", doctor.OK), "size_bytes"); got != e.target(0) {
			t.Errorf("size %d, want %d", got, e.target(0))
		}
		// The text form names the problem and the fix, without colour (not a TTY).
		text, _, _ := e.gpurun(t, "doctor", "plain")
		for _, s := range []string{"problem  shm.size", "gpurun resize plain", "exit 1"} {
			if !strings.Contains(text, s) {
				t.Errorf("text output lacks %q:\n%s", s, text)
			}
		}
		if strings.Contains(text, "\x1b[") {
			t.Errorf("colour on a pipe:\n%q", text)
		}
	})
}

// execGpurun is the gpurun binary under test with args.
func execGpurun(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(bin(t, "gpurun"), args...)
}

// TestDoctorHostDocker: doctor on the host reads a real daemon.json and
// asks the running dockerd, before and after gpurun install docker.
func TestDoctorHostDocker(t *testing.T) {
	e := newRunEnv(t)
	// The host's other engines and its /dev/shm are this machine's; only
	// a state with a problem of the test's making fixes the exit status.
	doctorHost := func(t *testing.T, wantExit int) doctor.Report {
		t.Helper()
		out, stderr, code := e.gpurun(t, "doctor", "--json", "--docker-config", e.d.ConfigPath)
		if wantExit >= 0 && code != wantExit {
			t.Fatalf("doctor --docker-config: exit %d, want %d\n%s\n%s", code, wantExit, out, stderr)
		}
		r := decodeReport(t, out)
		if r.Mode != doctor.ModeHost {
			t.Fatalf("mode %s", r.Mode)
		}
		wantCheck(t, r, "docker.daemon", doctor.OK)
		return r
	}
	r := doctorHost(t, -1)
	c := wantCheck(t, r, "docker.runtime", doctor.Warn)
	if c.Data["registered"] != false {
		t.Errorf("before install: %v", c.Data)
	}

	common := []string{"docker", "--config", e.d.ConfigPath, "--runtime-path", bin(t, "gpurun-runtime"),
		"--state", filepath.Join(t.TempDir(), "state.json"), "--policy", e.config, "--set-as-default"}
	installDocker(t, e.d, append([]string{"install"}, common...)...)
	// Not reloaded yet: daemon.json and the daemon disagree.
	r = doctorHost(t, 1)
	c = wantCheck(t, r, "docker.runtime", doctor.Problem)
	if !strings.Contains(c.Fix, "kill -HUP") {
		t.Errorf("fix %q does not say to reload", c.Fix)
	}
	e.d.Reload()
	r = doctorHost(t, -1)
	c = wantCheck(t, r, "docker.runtime", doctor.OK)
	if c.Data["registered"] != true || c.Data["default"] != true || c.Data["loaded"] != true || c.Data["loaded_default"] != true {
		t.Errorf("after install and reload: %v", c.Data)
	}
	wantCheck(t, r, "runtime.chain", doctor.OK)
	wantCheck(t, r, "docker.data-root", doctor.OK)
}

// TestDoctorHostContainerd: doctor reads a real containerd config and asks
// the running containerd, before and after gpurun install containerd; and
// doctor --cri looks at a pod's container before and after.
func TestDoctorHostContainerd(t *testing.T) {
	config, logFile := shimConfig(t, "")
	c := harness.StartContainerd(t, harness.ContainerdOptions{Env: []string{"GPURUN_CONFIG=" + config}})
	endpoint := "unix://" + c.Address
	run := func(t *testing.T, args ...string) (doctor.Report, int) {
		t.Helper()
		cmd := execGpurun(t, append([]string{"doctor", "--json"}, args...)...)
		cmd.Env = append(os.Environ(), "GPURUN_CONFIG="+config, "DOCKER_HOST=unix:///nonexistent.sock")
		out, _ := cmd.Output()
		return decodeReport(t, string(out)), cmd.ProcessState.ExitCode()
	}
	host := func(t *testing.T) (doctor.Report, int) {
		return run(t, "--containerd-config", c.ConfigPath, "--runtime-endpoint", endpoint)
	}
	cri := func(t *testing.T, id string, wantExit int) doctor.Report {
		t.Helper()
		r, code := run(t, "--cri", id, "--runtime-endpoint", endpoint)
		if code != wantExit {
			t.Fatalf("doctor --cri %s: exit %d, want %d\n%+v\nshim log: %s", id, code, wantExit, r.Checks, readFile(logFile))
		}
		return r
	}
	gpuPod := func(handler string) string {
		pod := c.RunPod(harness.PodOptions{Name: "gpu-" + handler, RuntimeHandler: handler})
		id := c.CreateContainer(pod, harness.ContainerOptions{Name: "trainer", Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}})
		c.StartContainer(id)
		return id
	}

	r, _ := host(t)
	rc := wantCheck(t, r, "containerd.runtime", doctor.Warn)
	if rc.Data["registered"] != false {
		t.Errorf("before install: %v", rc.Data)
	}
	wantCheck(t, r, "containerd.loaded", doctor.OK)
	before := gpuPod("")
	r = cri(t, before, 1)
	if got := number(t, wantCheck(t, r, "shm.size", doctor.Problem), "size_bytes"); got != policy.EngineDefaultShm {
		t.Errorf("pod /dev/shm %d, want 64MiB", got)
	}
	if plan := wantCheck(t, r, "plan", doctor.OK); plan.Data["action"] != "remount" {
		t.Errorf("plan %v, want remount of the pod's tmpfs", plan.Data)
	}

	gpurunInstall(t, "install", "containerd", "--config", c.ConfigPath, "--runtime-path", bin(t, "gpurun-runtime"),
		"--state", filepath.Join(t.TempDir(), "state.json"), "--policy", config)
	// Installed, containerd not restarted yet.
	r, code := host(t)
	if code != 1 {
		t.Errorf("installed, not restarted: exit %d, want 1", code)
	}
	rc = wantCheck(t, r, "containerd.runtime", doctor.OK)
	if rc.Data["registered"] != true || rc.Data["binary"] != bin(t, "gpurun-runtime") {
		t.Errorf("after install: %v", rc.Data)
	}
	wantCheck(t, r, "containerd.pod_annotations", doctor.OK)
	wantCheck(t, r, "containerd.loaded", doctor.Problem)
	c.Restart()
	r, _ = host(t)
	wantCheck(t, r, "containerd.loaded", doctor.OK)

	after := gpuPod("gpurun")
	r = cri(t, after, 0)
	if got := number(t, wantCheck(t, r, "shm.size", doctor.OK), "size_bytes"); got != hostTarget(t) {
		t.Errorf("pod /dev/shm %d, want %d", got, hostTarget(t))
	}
}

// TestDoctorHostDockerRemount is issue 13's case: gpurun-runtime registered
// in dockerd without its data-root (by hand, or by an older gpurun), and the
// data-root outside the policy's engine_roots (the private daemon's is under
// /tmp): a --ipc shareable GPU container keeps 64 MiB, and the shim only
// logs the refusal. Doctor on the host makes it a problem naming the path
// and the fix; after that fix (gpurun install docker) the group is grown,
// with the default policy, and doctor is satisfied.
func TestDoctorHostDockerRemount(t *testing.T) {
	config, logFile := shimConfig(t, "")
	d := harness.StartDockerd(t, harness.DockerdOptions{
		DaemonJSON: map[string]any{"runtimes": map[string]any{"gpurun": map[string]any{"path": bin(t, "gpurun-runtime")}}},
		Env:        []string{"GPURUN_CONFIG=" + config},
	})
	img := harness.BusyboxImage(t, d)
	want := hostTarget(t) / 1024
	donor := func(t *testing.T, name string) int64 {
		t.Helper()
		if _, stderr, err := d.Docker("run", "-d", "--name", name, "--runtime", "gpurun", "--network", "none", "--ipc", "shareable", "-e", "NVIDIA_VISIBLE_DEVICES=all", img, "sleep", "600"); err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		t.Cleanup(func() { _, _, _ = d.Docker("rm", "-f", name) })
		out, stderr, err := d.Docker("exec", name, "df", "-k", "/dev/shm")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		return dfKiB(t, out)
	}
	doctorHost := func(t *testing.T) doctor.Report {
		t.Helper()
		cmd := execGpurun(t, "doctor", "--json", "--docker-config", d.ConfigPath)
		cmd.Env = append(d.Env(), "GPURUN_CONFIG="+config)
		out, _ := cmd.Output()
		return decodeReport(t, string(out))
	}

	if got := donor(t, "before"); got != 65536 {
		t.Fatalf("registered without the data-root: the shareable donor has %d KiB, want the untouched 65536 (was the remount not refused?)", got)
	}
	if log := readFile(logFile); !strings.Contains(log, "not under an engine root") {
		t.Fatalf("the shim's log lacks the refusal:\n%s", log)
	}
	r := doctorHost(t)
	if r.ExitCode != 1 {
		t.Errorf("doctor: exit %d, want 1", r.ExitCode)
	}
	c := wantCheck(t, r, "remount", doctor.Problem)
	if !strings.Contains(c.Detail, filepath.Join(d.DataRoot, "containers")) || !strings.Contains(c.Fix, "gpurun install docker") {
		t.Errorf("remount: %q, fix %q; want the refused path under %s and the install", c.Detail, c.Fix, d.DataRoot)
	}
	if c := wantCheck(t, r, "docker.data-root", doctor.Problem); !strings.Contains(c.Detail, d.DataRoot) {
		t.Errorf("docker.data-root: %q, want dockerd's %s", c.Detail, d.DataRoot)
	}

	registerDocker(t, d, bin(t, "gpurun-runtime"), config, false)
	if got := donor(t, "after"); got != want {
		t.Errorf("after gpurun install docker: the shareable donor has %d KiB, want %d\nshim log:\n%s", got, want, readFile(logFile))
	}
	r = doctorHost(t)
	if c := wantCheck(t, r, "remount", doctor.OK); !strings.Contains(c.Detail, "succeeded since") {
		t.Errorf("remount: %q, want the earlier refusals fixed", c.Detail)
	}
	wantCheck(t, r, "docker.data-root", doctor.OK)
}
