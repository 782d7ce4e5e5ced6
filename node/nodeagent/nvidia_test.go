package nodeagent

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestRepairBesideNVIDIA: the agent installed gpurun as the default in
// its own drop-in directory; NVIDIA's toolkit comes second (its pod's
// start: a drop-in with nvidia the default, its glob appended to
// imports). The agent reports not ready with the reason, and within the
// same round installs gpurun's registration again (its drop-in last,
// chaining NVIDIA's runtime) and is satisfied; a second round changes
// nothing and logs no repair: the agent does not fight the toolkit in a
// loop.
func TestRepairBesideNVIDIA(t *testing.T) {
	const v3 = "version = 3\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\n  default_runtime_name = \"nvidia\"\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\n  runtime_type = \"io.containerd.runc.v2\"\n\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia.options]\n  BinaryName = \"/usr/bin/nvidia-container-runtime\"\n"
	v2, err := readTestdataFile("nvidia/containerd-1.6.20-99-nvidia.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, config, nvidiaDropIn, wantReason string
	}{
		// containerd 1.x: NVIDIA's CRI section, read last, hides gpurun's.
		{"containerd 1.x", "containerd-1.6.20-config-default.toml", v2, "hidden by the CRI section of /etc/containerd/conf.d/99-nvidia.toml"},
		// containerd 2.x's default config imports conf.d/*.toml already,
		// before gpurun's drop-in: gpurun's default wins, but does not
		// chain the runtime NVIDIA made the default.
		{"containerd 2.x", "containerd-2.4.2-config-default.toml", v3, "/etc/containerd/conf.d/99-nvidia.toml makes NVIDIA's nvidia the default handler, but gpurun-runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, tc.config)
			a := n.agent(true)
			a.DropInDir = "/etc/containerd/gpurun.d"
			if err := a.Install(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := a.Status(); len(st.Problems) > 0 {
				t.Fatalf("installed: %v", st.Problems)
			}
			n.write(t, "/etc/containerd/conf.d/99-nvidia.toml", tc.nvidiaDropIn, 0o644)
			main := n.read(t, "/etc/containerd/config.toml")
			ours := `"/etc/containerd/gpurun.d/99-gpurun.toml"`
			n.write(t, "/etc/containerd/config.toml", strings.Replace(main, ours, ours+`, "/etc/containerd/conf.d/*.toml"`, 1), 0o644)

			st := a.Status()
			if st.Ready || !st.Repairable || !strings.Contains(st.Reason, tc.wantReason) {
				t.Fatalf("the toolkit second: ready %v, repairable %v, %s", st.Ready, st.Repairable, st.Reason)
			}
			a.check1("")
			if st = a.Status(); len(st.Problems) > 0 {
				t.Errorf("after the repair: %v\n%s", st.Problems, n.log.String())
			}
			if pol := n.read(t, "/etc/gpurun/config.toml"); !strings.Contains(pol, `runtime = "/usr/bin/nvidia-container-runtime"`) {
				t.Errorf("the repair did not chain NVIDIA's runtime:\n%s", pol)
			}
			if cfg := n.read(t, "/etc/containerd/config.toml"); !strings.Contains(cfg, `"/etc/containerd/conf.d/*.toml", `+ours) {
				t.Errorf("gpurun's drop-in is not imported last:\n%s", cfg)
			}
			repairs := strings.Count(n.log.String(), "installing gpurun's registration again")
			a.check1("")
			if again := strings.Count(n.log.String(), "installing gpurun's registration again"); again != repairs || repairs != 1 {
				t.Errorf("%d repairs, then %d: want one", repairs, again)
			}
		})
	}
}

// readTestdataFile reads a file of engine/containerd's testdata.
func readTestdataFile(name string) (string, error) {
	data, err := os.ReadFile(containerdTestdata + name)
	return string(data), err
}
