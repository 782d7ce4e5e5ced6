package doctor

import (
	"fmt"
	"strings"

	"github.com/gpurun/gpurun/policy"
)

// fixTarget says which fixes apply and how to name the container in them.
type fixTarget struct {
	mode Mode
	// ref names the container for gpurun resize ("" inside a container).
	ref string
	// donor is the Docker container whose IPC namespace this one joined.
	donor string
	// userMount: /dev/shm is the user's own mount, which engines' size
	// settings do not touch.
	userMount bool
}

// sizeFix returns the ways to give a container a /dev/shm of size bytes:
// how to start it right, and how to grow it now.
func sizeFix(t fixTarget, size int64) string {
	d := policy.FormatDocker(size)
	if t.userMount {
		return fmt.Sprintf("the container mounts its own /dev/shm, which --shm-size and shm_size do not change: make that mount bigger\n"+
			"docker run: --tmpfs /dev/shm:size=%s (or --mount type=tmpfs,dst=/dev/shm,tmpfs-size=%d)\n"+
			"compose:    tmpfs: [\"/dev/shm:size=%s\"]\n"+
			"kubernetes: the emptyDir at /dev/shm: {medium: Memory, sizeLimit: %s}", d, size, d, policy.FormatQuantity(size))
	}
	docker := fmt.Sprintf("docker run: docker run --shm-size=%s ...  (or start it with gpurun run ..., which adds it)", d)
	compose := fmt.Sprintf("compose:    shm_size: %q in the service", policy.FormatCompose(size))
	k8s := fmt.Sprintf("kubernetes: runtimeClassName: gpurun on a node set up with `gpurun install containerd`, or an emptyDir {medium: Memory, sizeLimit: %s} mounted at /dev/shm", policy.FormatQuantity(size))
	var lines []string
	switch t.mode {
	case ModeDocker:
		if t.donor != "" {
			lines = append(lines,
				fmt.Sprintf("now:        gpurun resize %s %s  (grows the shared /dev/shm of %s and every container joined to it; no restart)", t.donor, d, t.donor),
				fmt.Sprintf("recreate:   start %s with --shm-size=%s (docker ignores --shm-size on a container that joins another's IPC namespace)", t.donor, d))
			return strings.Join(lines, "\n")
		}
		lines = append(lines,
			fmt.Sprintf("now:        gpurun resize %s %s  (no restart; Docker's record keeps the old size)", t.ref, d),
			fmt.Sprintf("recreate:   docker run --shm-size=%s ...  (or gpurun run ...)", d),
			compose)
	case ModeCRI:
		lines = append(lines,
			fmt.Sprintf("now:        gpurun resize --cri %s %s  (grows the pod's /dev/shm; no restart)", t.ref, d),
			k8s)
	default:
		lines = append(lines, docker, compose, k8s,
			fmt.Sprintf("now:        on the host, gpurun resize CONTAINER %s (or --cri ID) grows it without a restart", d))
	}
	return strings.Join(lines, "\n")
}

// noShmFix is the fix for a container with nothing at /dev/shm.
func noShmFix(t fixTarget, size int64) string {
	d := policy.FormatDocker(size)
	switch t.mode {
	case ModeCRI:
		return fmt.Sprintf("mount an emptyDir {medium: Memory, sizeLimit: %s} at /dev/shm", policy.FormatQuantity(size))
	default:
		return fmt.Sprintf("docker run: drop --ipc none, or use --ipc private --shm-size=%s\ncompose:    ipc: private and shm_size: %q\nkubernetes: mount an emptyDir {medium: Memory, sizeLimit: %s} at /dev/shm",
			d, policy.FormatCompose(size), policy.FormatQuantity(size))
	}
}
