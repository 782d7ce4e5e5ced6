package runargs

import "testing"

// BenchmarkParse measures Parse on command lines of typical lengths.
func BenchmarkParse(b *testing.B) {
	benchmarks := []struct {
		name string
		args []string
	}{
		{"short", []string{"-it", "ubuntu", "bash"}},
		{"gpu", []string{"--rm", "-it", "--gpus", "all", "--memory", "16g", "-e", "NCCL_DEBUG=INFO",
			"-v", "/data:/data:ro", "--ipc=private", "nvidia/cuda:12.4.1-runtime-ubuntu22.04", "python", "train.py"}},
		{"long", []string{
			"--detach-keys", "ctrl-p,ctrl-q", "-p", "8080:80", "-p8443:443", "--add-host", "a:1.2.3.4",
			"--sig-proxy=false", "--init", "-w", "/x", "--name", "n", "--network=host", "--net", "bridge",
			"-h", "host", "-u", "0:0", "-l", "a=b", "-a", "stdout", "-c", "512", "-P", "--privileged",
			"--ulimit", "memlock=-1", "--security-opt", "seccomp=unconfined", "--platform", "linux/amd64",
			"--pull", "always", "-q", "--annotation", "a=b", "--cgroupns", "host", "--kernel-memory", "1g",
			"--link-local-ip", "169.254.1.1", "--cpu-rt-runtime", "950000", "--disable-content-trust",
			"--use-api-socket", "--device", "/dev/nvidia0", "img", "python", "-m", "train"}},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(bm.args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
