package dockerargs

import (
	"slices"
	"testing"
)

func TestMountsDevShm(t *testing.T) {
	tests := []struct {
		name string
		args []string
		how  string // "" for none
	}{
		{"none", []string{"-v", "/data:/data", "--tmpfs", "/tmp", "img"}, ""},
		{"bind ro", []string{"-v", "/x:/dev/shm:ro", "img"}, "--volume /x:/dev/shm:ro"},
		{"bind long form", []string{"--volume=/x:/dev/shm", "img"}, "--volume /x:/dev/shm"},
		{"named volume", []string{"-v", "shmvol:/dev/shm", "img"}, "--volume shmvol:/dev/shm"},
		{"anonymous volume", []string{"-v", "/dev/shm", "img"}, "--volume /dev/shm"},
		{"trailing slash cleaned", []string{"-v", "/x:/dev/shm/", "img"}, "--volume /x:/dev/shm/"},
		{"host /dev covers /dev/shm", []string{"-v", "/dev:/dev", "img"}, "--volume /dev:/dev"},
		{"host /dev/shm into other path does not", []string{"-v", "/dev/shm:/host-shm", "img"}, ""},
		{"subdir does not", []string{"-v", "/x:/dev/shm/sub", "img"}, ""},
		{"mount tmpfs destination", []string{"--mount", "type=tmpfs,destination=/dev/shm", "img"}, "--mount type=tmpfs,destination=/dev/shm"},
		{"mount target", []string{"--mount", "type=bind,source=/x,target=/dev/shm,readonly", "img"}, "--mount type=bind,source=/x,target=/dev/shm,readonly"},
		{"mount dst uppercase key", []string{"--mount", "type=tmpfs,DST=/dev/shm,tmpfs-size=1g", "img"}, "--mount type=tmpfs,DST=/dev/shm,tmpfs-size=1g"},
		{"mount quoted csv", []string{"--mount", `type=tmpfs,"dst=/dev/shm",tmpfs-mode=1777`, "img"}, `--mount type=tmpfs,"dst=/dev/shm",tmpfs-mode=1777`},
		{"mount last target wins", []string{"--mount", "type=tmpfs,dst=/dev/shm,dst=/tmp", "img"}, ""},
		{"mount elsewhere", []string{"--mount", "type=tmpfs,dst=/tmp", "img"}, ""},
		{"mount bad csv", []string{"--mount", `type=tmpfs,dst="/dev/shm`, "img"}, ""},
		{"tmpfs with options", []string{"--tmpfs", "/dev/shm:size=1g", "img"}, "--tmpfs /dev/shm:size=1g"},
		{"tmpfs bare", []string{"--tmpfs=/dev/shm", "img"}, "--tmpfs /dev/shm"},
		{"first in argument order", []string{"--tmpfs", "/dev/shm", "-v", "/x:/dev/shm", "img"}, "--tmpfs /dev/shm"},
		{"after the image it is the command", []string{"img", "-v", "/x:/dev/shm"}, ""},
		{"ipc host is not a mount", []string{"--ipc=host", "img"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			how, ok := r.MountsDevShm()
			if ok != (tt.how != "") || how != tt.how {
				t.Errorf("MountsDevShm() = %q, %v; want %q", how, ok, tt.how)
			}
		})
	}
}

func TestGPUDevices(t *testing.T) {
	devices := []string{
		"/dev/nvidia0", "/dev/nvidia12:/dev/nvidia12:rwm", "/tmp/nvidia0:/dev/nvidia0",
		"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia0:/dev/fake",
		"/dev/kfd", "/dev/dri", "/dev/dri/renderD128", "/dev/dri/card0", "/dev/accel/accel0", "/dev/accel0",
		"/dev/nvidia1:rw", "/dev/snd", "/dev/fuse:/dev/fuse:rwm", "/dev//nvidia3",
		"nvidia.com/gpu=all", "nvidia.com/gpu=0", "amd.com/gpu=1", "habana.ai/gaudi=all", "intel.com/sgx=epc",
		"nvidia.com/gpu=", "=all", "/dev/a:/dev/b:/dev/c:rw",
	}
	want := []string{
		"/dev/nvidia0", "/dev/nvidia12:/dev/nvidia12:rwm", "/tmp/nvidia0:/dev/nvidia0",
		"/dev/kfd", "/dev/dri", "/dev/dri/renderD128", "/dev/accel/accel0", "/dev/accel0",
		"/dev/nvidia1:rw", "/dev//nvidia3",
		"nvidia.com/gpu=all", "nvidia.com/gpu=0", "amd.com/gpu=1", "habana.ai/gaudi=all",
	}
	var args []string
	for _, d := range devices {
		args = append(args, "--device", d)
	}
	r, err := Parse(append(args, "img"))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.GPUDevices(); !slices.Equal(got, want) {
		t.Errorf("GPUDevices()\n got %q\nwant %q", got, want)
	}
	if r, _ := Parse([]string{"img"}); r.GPUDevices() != nil {
		t.Errorf("GPUDevices() without --device = %q", r.GPUDevices())
	}
}

func TestCDIKind(t *testing.T) {
	tests := []struct {
		in            string
		vendor, class string
		ok            bool
	}{
		{"nvidia.com/gpu=all", "nvidia.com", "gpu", true},
		{"nvidia.com/gpu=GPU-0d3e:1", "nvidia.com", "gpu", true},
		{"vendor.com/class=a", "vendor.com", "class", true},
		{"/dev/nvidia0", "", "", false},
		{"nvidia.com/gpu", "", "", false},
		{"gpu=all", "", "", false},
		{"nvidia.com/gpu=", "", "", false},
		{"nvidia.com/gpu=all:", "", "", false},
		{"nvidia.com/gp u=all", "", "", false},
		{"1nvidia.com/gpu=all", "", "", false},
		{"nvidia.com-/gpu=all", "", "", false},
		{"nvidia.com/gpu/x=all", "", "", false},
		{"a/b=c", "a", "b", true},
	}
	for _, tt := range tests {
		v, c, ok := cdiKind(tt.in)
		if v != tt.vendor || c != tt.class || ok != tt.ok {
			t.Errorf("cdiKind(%q) = %q, %q, %v; want %q, %q, %v", tt.in, v, c, ok, tt.vendor, tt.class, tt.ok)
		}
	}
}
