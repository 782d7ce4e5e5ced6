package remedy

import (
	"strings"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

// TestFor: each target gets the ways that fit it, nearest first, in each
// front door's units, and nothing that does not fit it.
func TestFor(t *testing.T) {
	const size = 32 * policy.GiB
	for _, tc := range []struct {
		name   string
		t      Target
		first  string   // the first step's Where
		want   []string // in the steps, in order
		absent []string // nowhere in the steps
	}{
		{"unknown: every front door", Target{}, "gpurun",
			[]string{"gpurun run", "--shm-size=32g", `shm_size: "32gb"`, "gpurun install docker", "sizeLimit: 32Gi", "gpurun install podman", "gpurun resize CONTAINER 32g"}, nil},
		{"a Docker container: grow it now by name", Target{Where: Docker, Ref: "trainer"}, "now",
			[]string{"gpurun resize trainer 32g", "docker run --shm-size=32g", `shm_size: "32gb"`}, []string{"sizeLimit", "--cri"}},
		{"a Docker IPC group: its donor", Target{Where: Docker, Ref: "peer", Donor: "trainer"}, "now",
			[]string{"gpurun resize trainer 32g", "start trainer with --shm-size=32g"}, []string{"gpurun resize peer"}},
		{"a pod from its node", Target{Where: Pod, Ref: "0a1b", Annotation: "gpurun.io/shm-size"}, "now",
			[]string{"gpurun resize --cri 0a1b 32g", `gpurun.io/shm-size: "32Gi"`, "sizeLimit: 32Gi"}, []string{"docker run"}},
		{"a pod, no annotation allowed", Target{Where: Pod}, "now",
			[]string{"gpurun resize --cri ID 32g", "sizeLimit: 32Gi"}, []string{"annotation"}},
		{"Podman", Target{Where: Podman, Ref: "p1"}, "now", []string{"gpurun resize p1 32g", "podman run --shm-size=32g"}, []string{"docker run"}},
		{"containerd without Kubernetes", Target{Where: Containerd}, "recreate", []string{"nerdctl run --shm-size=32g"}, []string{"docker run"}},
		{"the user's own mount: that mount, not --shm-size", Target{Where: Docker, Ref: "x", UserMount: true}, "docker run",
			[]string{"--tmpfs /dev/shm:size=32g", `"/dev/shm:size=32g"`, "sizeLimit: 32Gi"}, []string{"gpurun resize"}},
		{"nothing at /dev/shm", Target{NoShm: true}, "docker run", []string{"drop --ipc none", "ipc: private", "sizeLimit: 32Gi"}, []string{"gpurun resize"}},
		{"nothing at /dev/shm in a pod", Target{Where: Pod, NoShm: true}, "kubernetes", []string{"sizeLimit: 32Gi"}, []string{"docker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := For(tc.t, size)
			if len(steps) == 0 || steps[0].Where != tc.first {
				t.Fatalf("steps %q, want %q first", steps, tc.first)
			}
			all := Text(steps)
			at := 0
			for _, w := range tc.want {
				i := strings.Index(all[at:], w)
				if i < 0 {
					t.Errorf("steps lack %q after position %d:\n%s", w, at, all)
					continue
				}
				at += i
			}
			for _, a := range tc.absent {
				if strings.Contains(all, a) {
					t.Errorf("steps have %q:\n%s", a, all)
				}
			}
		})
	}
}

// TestLines: one line a step, the ways aligned after the widest name.
func TestLines(t *testing.T) {
	got := Lines([]Step{{"now", "a"}, {"kubernetes", "b"}})
	want := []string{"now:        a", "kubernetes: b"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("Lines = %q, want %q", got, want)
	}
	if s := (Step{"now", "a"}).String(); s != "now: a" {
		t.Errorf("String = %q", s)
	}
}
