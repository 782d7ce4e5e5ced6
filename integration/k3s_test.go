//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/internal/k3stest"
	"github.com/gpurun/gpurun/node/install"
	"github.com/gpurun/gpurun/node/nodeagent"
	"github.com/gpurun/gpurun/policy"
)

const k3sTestdata = "../node/install/testdata/k3s/"

// TestK3sNodeAgent runs the node agent on a node laid out as k3s (or
// RKE2) lays out its embedded containerd, with a real containerd on the
// config the harness renders from the node's template the way k3s does:
// the agent writes gpurun into the template (never into the generated
// config.toml), k3s's restart (render, restart containerd) brings it in,
// a pod that ran before the restart still runs, and a GPU pod with handler
// gpurun gets the policy's /dev/shm through the CRI. Uninstall restores
// the template byte for byte (or removes the one gpurun created); once the
// pods are gone and k3s restarted, a second uninstall leaves the node as
// it was.
func TestK3sNodeAgent(t *testing.T) {
	v2, v3, v3i := k3stest.V2(), k3stest.V3(), k3stest.V3Imports()
	for _, tc := range []struct {
		name        string
		dataDir     string
		program     string
		release     k3stest.Release
		admin       string // testdata template of the administrator's, "" for none
		as          string // its name
		flag        string // --distribution, "" to let the agent detect it
		containerd2 bool
		version     string // what the stand-in k3s/rke2 binary says it is
		setDefault  bool
	}{
		{name: "k3s containerd 1.6, admin template, detected", dataDir: "/var/lib/rancher/k3s", program: "k3s", release: v2, admin: "admin-v2-config.toml.tmpl", as: "config.toml.tmpl", version: "v1.28.15+k3s1"},
		{name: "k3s containerd 1.6, no template", dataDir: "/var/lib/rancher/k3s", program: "k3s", release: v2, flag: "k3s", version: "v1.30.14+k3s1"},
		{name: "k3s v1.34.6 containerd 2.x, version 3, no template", dataDir: "/var/lib/rancher/k3s", program: "k3s", release: v3i, flag: "k3s", containerd2: true, version: "v1.34.6+k3s1"},
		{name: "rke2 v1.34.3 containerd 2.x, docs example template", dataDir: "/var/lib/rancher/rke2", program: "rke2", release: v3, admin: "k3s-docs-05051a0-config-v3.toml.tmpl", as: "config-v3.toml.tmpl", flag: "rke2", containerd2: true, version: "v1.34.3+rke2r1"},
		{name: "k3s v1.34.3 containerd 2.x, version 3, default runtime", dataDir: "/var/lib/rancher/k3s", program: "k3s", release: v3, containerd2: true, version: "v1.34.3+k3s1", setDefault: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := harness.K3sNode{HostRoot: t.TempDir(), DataDir: tc.dataDir, Program: tc.program, Release: tc.release, Base: string(readTestdata(t, k3sTestdata+tc.release.Base)), NVIDIA: true}
			var admin []byte
			tmplName := tc.as
			if tc.admin != "" {
				admin = readTestdata(t, k3sTestdata+tc.admin)
				writeFile(t, n.Host(filepath.Join(n.ContainerdDir(), tc.as)), admin)
			} else if tc.containerd2 {
				tmplName = "config-v3.toml.tmpl"
			} else {
				tmplName = "config.toml.tmpl"
			}
			tmplPath := n.Host(filepath.Join(n.ContainerdDir(), tmplName))
			// The embedded containerd's --version, which the agent asks
			// (chrooted into the host root, hence a static stand-in that
			// prints what the real one would).
			release, nri := "1.6.20~ds1", "NRI disabled in the embedded containerd (1.6.20~ds1)"
			if tc.containerd2 {
				release, nri = "2.4.2", "NRI enabled in the embedded containerd (2.4.2; socket /var/run/nri/nri.sock)"
			}
			embedded := n.Host(filepath.Join(tc.dataDir, "data/current/bin/containerd"))
			if tc.program == "rke2" {
				// RKE2's bin is an absolute link to the release's directory.
				release := filepath.Join(tc.dataDir, "data", tc.version+"-0123abcd", "bin")
				embedded = n.Host(filepath.Join(release, "containerd"))
				if err := os.MkdirAll(n.Host(release), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(release, n.Host(filepath.Join(tc.dataDir, "bin"))); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, embedded, readTestdata(t, staticHelper(t, fmt.Sprintf(fakeEmbeddedContainerd, release))))
			program := n.Host("/usr/local/bin/" + tc.program)
			writeFile(t, program, readTestdata(t, staticHelper(t, fmt.Sprintf(fakeProgram, tc.program+" version "+tc.version+" (0123abcd)"))))
			for _, p := range []string{embedded, program} {
				if err := os.Chmod(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			testK3sNodeAgent(t, n, tc.flag, tc.containerd2, tc.setDefault, tmplPath, admin, tc.program+" "+tc.version+": "+nri)
		})
	}
}

// fakeEmbeddedContainerd answers --version as containerd of release %s.
const fakeEmbeddedContainerd = `package main

import "fmt"

func main() { fmt.Println("containerd github.com/containerd/containerd %s 0123456789ab") }
`

// fakeProgram answers --version as k3s or rke2 do.
const fakeProgram = `package main

import "fmt"

func main() { fmt.Println("%s") }
`

func readTestdata(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func testK3sNodeAgent(t *testing.T, n harness.K3sNode, flag string, containerd2, setDefault bool, tmplPath string, admin []byte, nri string) {
	keepHostFile(t, policy.Default().LogFile)
	if err := os.Symlink("/proc", n.Host("/proc")); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "gpurun.log")
	source := filepath.Join(t.TempDir(), "config.toml")
	sourceText := "# the DaemonSet's policy\nsize = \"40%\"\nmin = \"1g\"\nlog_file = \"" + logFile + "\"\n"
	writeFile(t, source, []byte(sourceText))

	// k3s runs, with a pod of its own.
	c := harness.StartK3sContainerd(t, n, containerd2, []string{policy.ConfigEnv + "=" + n.Host(policy.DefaultConfigPath)})
	before := (fakeNode{root: n.HostRoot}).snapshot(t)
	generated, err := os.ReadFile(n.Host(n.ConfigPath()))
	if err != nil {
		t.Fatal(err)
	}
	early := c.RunPod(harness.PodOptions{Name: "early"})
	earlyCtr := c.CreateContainer(early, harness.ContainerOptions{Name: "early"})
	c.StartContainer(earlyCtr)

	args := []string{"--host-root", n.HostRoot}
	if flag != "" {
		args = append(args, "--distribution="+flag)
	}
	image := filepath.Dir(bin(t, "gpurun"))
	installArgs := []string{"install", "--from", image, "--policy-source", source}
	if setDefault {
		installArgs = append(installArgs, "--set-as-default")
	}
	out, err := nodeCmd(t, append(installArgs, args...)...)
	if err != nil {
		t.Fatalf("gpurun node install: %v\n%s", err, out)
	}
	if !strings.Contains(out, nri) {
		t.Errorf("the agent does not say %q:\n%s", nri, out)
	}
	if now, _ := os.ReadFile(n.Host(n.ConfigPath())); !bytes.Equal(now, generated) {
		t.Fatal("the agent wrote the config.toml k3s generates")
	}
	tmpl, err := os.ReadFile(tmplPath)
	if err != nil {
		t.Fatalf("no template with gpurun: %v\n%s", err, out)
	}
	if !bytes.HasPrefix(tmpl, admin) || !bytes.Contains(tmpl, []byte(filepath.Join(nodeagent.DefaultBinDir, nodeagent.RuntimeBinary))) {
		t.Fatalf("template:\n%s", tmpl)
	}
	if out, err := nodeCmd(t, append([]string{"status"}, args...)...); err == nil || !strings.Contains(out, "has not written gpurun's template") || !strings.Contains(out, nri) {
		t.Errorf("status before k3s restarts: %v\n%s", err, out)
	}

	// k3s restarts: the template is rendered, containerd restarts.
	n.Restart(t, c)
	rendered, _ := os.ReadFile(n.Host(n.ConfigPath()))
	if b, d := registeredHandler(t, rendered); b != filepath.Join(nodeagent.DefaultBinDir, nodeagent.RuntimeBinary) || d != setDefault {
		t.Fatalf("rendered config registers gpurun with %q, default %v:\n%s", b, d, rendered)
	}
	if _, err := c.Exec(earlyCtr, "true"); err != nil {
		t.Errorf("the pod that ran before k3s's restart: %v", err)
	}

	pod := runGPUPod(t, c, source, sourceText, setDefault, logFile)
	if shm, err := c.Exec(earlyCtr, "df", "-k", "/dev/shm"); err != nil || dfKiB(t, shm) != 65536 {
		t.Errorf("/dev/shm of the runc pod: %v %q", err, shm)
	}

	// Uninstall while the GPU pod runs: the template is restored,
	// gpurun-runtime stays.
	out, err = nodeCmd(t, append([]string{"uninstall"}, args...)...)
	if err != nil {
		t.Fatalf("gpurun node uninstall: %v\n%s", err, out)
	}
	now, err := os.ReadFile(tmplPath)
	switch {
	case admin == nil && !os.IsNotExist(err):
		t.Errorf("the template gpurun created is still there: %v\n%s", err, now)
	case admin != nil && !bytes.Equal(now, admin):
		t.Errorf("template after uninstall:\n%s\nwant\n%s", now, admin)
	}
	if !strings.Contains(out, "running container(s) use it") {
		t.Errorf("uninstall while the pod runs:\n%s", out)
	}
	c.StopPod(pod)
	c.RemovePod(pod)
	c.StopPod(early)
	c.RemovePod(early)

	// k3s restarts on the restored template: gpurun is gone.
	n.Restart(t, c)
	if again, _ := os.ReadFile(n.Host(n.ConfigPath())); !bytes.Equal(again, generated) {
		t.Errorf("config.toml rendered from the restored template differs from the original:\n%s", again)
	}
	if _, err := c.TryRunPod(harness.PodOptions{Name: "gone", RuntimeHandler: install.RuntimeName}); err == nil {
		t.Error("runtime handler gpurun still accepted after uninstall")
	}
	if out, err := nodeCmd(t, append([]string{"uninstall"}, args...)...); err != nil {
		t.Fatalf("second uninstall: %v\n%s", err, out)
	}
	after := (fakeNode{root: n.HostRoot}).snapshot(t)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed or is gone", k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s was left on the node", k)
		}
	}
}
