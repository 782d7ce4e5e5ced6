package doctor

import (
	"strings"
	"testing"
)

// TestStartAndRecreateFix: a fix that must outlive a restart names the
// door's way to start the container again, and a container in the host's
// IPC namespace is never told to grow the /dev/shm it has (the host's).
func TestStartAndRecreateFix(t *testing.T) {
	const size = 32 << 30
	for _, tc := range []struct {
		name    string
		got     string
		want    []string
		wantNot []string
	}{
		{"recreate a docker container", recreateFix(fixTarget{mode: ModeDocker, ref: "trainer"}, size), []string{"to keep the size across restarts, recreate it: docker run --shm-size=32g"}, []string{"gpurun resize"}},
		{"start a docker container without --ipc host", startFix(fixTarget{mode: ModeDocker, ref: "trainer"}, size), []string{"docker run --shm-size=32g", "shm_size: \"32gb\""}, []string{"gpurun resize"}},
		{"start a pod's container without hostIPC", startFix(fixTarget{mode: ModeCRI, ref: "abc"}, size), []string{"sizeLimit: 32Gi"}, []string{"gpurun resize"}},
		{"inside a container: every door's way but growing it", startFix(fixTarget{mode: ModeContainer}, size), []string{"docker run --shm-size=32g", "sizeLimit: 32Gi"}, []string{"gpurun resize"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range tc.want {
				if !strings.Contains(tc.got, w) {
					t.Errorf("%q lacks %q", tc.got, w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(tc.got, w) {
					t.Errorf("%q has %q", tc.got, w)
				}
			}
		})
	}
}
