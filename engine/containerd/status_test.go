package containerd

import (
	"testing"
)

// TestReadRunning reads the "config" of a verbose CRI Status as containerd
// writes it: its CRI config encoded with the json tags of containerd's
// criconfig (containerd.defaultRuntimeName, containerd.runtimes, stateDir),
// in 1.7 and 2.x alike.
func TestReadRunning(t *testing.T) {
	const config = `{"containerd":{"defaultRuntimeName":"gpurun","runtimes":{"gpurun":{"runtimeType":"io.containerd.runc.v2","options":{"BinaryName":"/usr/local/bin/gpurun-runtime"}},"runc":{"runtimeType":"io.containerd.runc.v2"}}},"enableCDI":true,"stateDir":"/run/containerd/io.containerd.grpc.v1.cri","rootDir":"/var/lib/containerd/io.containerd.grpc.v1.cri"}`
	tests := []struct {
		name     string
		info     map[string]string
		ok       bool
		state    string
		def      string
		runtimes []string
	}{
		{"containerd", map[string]string{"config": config, "golang": "go1.24"}, true, "/run/containerd/io.containerd.grpc.v1.cri", "gpurun", []string{"gpurun", "runc"}},
		{"no config (CRI-O)", map[string]string{"runtimes": "{}"}, false, "", "", nil},
		{"not JSON", map[string]string{"config": "{"}, false, "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := ReadRunning(tt.info)
			if ok != tt.ok || r.StateDir != tt.state || r.DefaultRuntime != tt.def || len(r.Runtimes) != len(tt.runtimes) {
				t.Fatalf("ReadRunning = %+v, %v; want state %q, default %q, runtimes %q, %v", r, ok, tt.state, tt.def, tt.runtimes, tt.ok)
			}
			for _, n := range tt.runtimes {
				if _, ok := r.Runtimes[n]; !ok {
					t.Errorf("runtime %s missing", n)
				}
			}
		})
	}
}
