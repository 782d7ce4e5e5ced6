package runargs

import (
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
