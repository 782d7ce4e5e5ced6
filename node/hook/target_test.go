package hook

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/gpurun/gpurun/engine/remount"
)

func TestNamespacesGrowOrder(t *testing.T) {
	const (
		pid  = 4242 // the state's pid
		self = 0    // the hook's own namespace
		size = 8 << 30
	)
	rootShm := "/run/b/rootfs/dev/shm"
	tests := []struct {
		name    string
		pidNS   string // mount namespace of pid; the hook's is "mnt:[1]"
		stage   string
		ok      map[string]bool // "pid path" pairs where a tmpfs is found
		tried   []string
		where   string
		growErr bool
	}{
		{"createRuntime: the init's namespace, before pivot_root", "mnt:[2]", "createRuntime",
			map[string]bool{fmt.Sprint(pid, " ", rootShm): true},
			[]string{fmt.Sprint(pid, " ", rootShm)}, fmt.Sprintf("pid %d: %s", pid, rootShm), false},
		{"createContainer with its pid in the container's numbering: own namespace next", "mnt:[2]", "",
			map[string]bool{fmt.Sprint(self, " ", rootShm): true},
			[]string{fmt.Sprint(pid, " ", rootShm), fmt.Sprint(self, " ", rootShm)}, "own namespace: " + rootShm, false},
		{"createContainer named by --stage: own namespace first", "mnt:[2]", "createContainer",
			map[string]bool{fmt.Sprint(self, " ", rootShm): true},
			[]string{fmt.Sprint(self, " ", rootShm)}, "own namespace: " + rootShm, false},
		{"a container already pivoted", "mnt:[2]", "poststart",
			map[string]bool{fmt.Sprint(pid, " /dev/shm"): true},
			[]string{fmt.Sprint(pid, " ", rootShm), fmt.Sprint(self, " ", rootShm), fmt.Sprint(pid, " /dev/shm")}, fmt.Sprintf("pid %d: /dev/shm", pid), false},
		{"same namespace as the hook: never its /dev/shm", "mnt:[1]", "",
			map[string]bool{fmt.Sprint(pid, " /dev/shm"): true},
			[]string{fmt.Sprint(pid, " ", rootShm)}, "", true},
		{"nothing found anywhere", "mnt:[2]", "",
			nil,
			[]string{fmt.Sprint(pid, " ", rootShm), fmt.Sprint(self, " ", rootShm), fmt.Sprint(pid, " /dev/shm")}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tried []string
			n := Namespaces{
				MountNS: func(p int) (string, error) {
					if p == 0 {
						return "mnt:[1]", nil
					}
					return tt.pidNS, nil
				},
				GrowIn: func(p int, path string, sz int64) (remount.Result, error) {
					key := fmt.Sprint(p, " ", path)
					tried = append(tried, key)
					if sz != size {
						t.Errorf("size %d, want %d", sz, size)
					}
					if tt.ok[key] {
						return remount.Result{Before: 64 << 20, After: sz, Changed: true}, nil
					}
					return remount.Result{}, fmt.Errorf("%w: %s is not a mount point", remount.ErrUnsafe, path)
				},
			}
			res, where, err := n.Grow(Target{Pid: pid, Rootfs: "/run/b/rootfs", Stage: tt.stage}, size)
			if !reflect.DeepEqual(tried, tt.tried) {
				t.Errorf("tried %q, want %q", tried, tt.tried)
			}
			if tt.growErr {
				if err == nil || !errors.Is(err, remount.ErrUnsafe) {
					t.Fatalf("Grow = %+v %q %v, want an error wrapping every refusal", res, where, err)
				}
				return
			}
			if err != nil || where != tt.where || !res.Changed {
				t.Errorf("Grow = %+v %q %v, want a change at %q", res, where, err, tt.where)
			}
		})
	}
}
