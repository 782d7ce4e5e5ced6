// Package remedy says how to give a container a /dev/shm of a given size:
// the setting in each front door's own words (docker run's --shm-size,
// compose's shm_size, a Kubernetes Memory emptyDir, gpurun resize for a
// running container, gpurun's installers for a host), chosen by what is
// known of where the container runs, and one way to print them. doctor,
// explain and stats all give their fixes through it, so a user reads the
// same advice, in the same words, whichever of them found the problem.
package remedy

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpurun/gpurun/policy"
)

// Where says where a container runs, as far as the one who asks knows.
type Where string

// The values of Where.
const (
	// Anywhere: not known (a log, doctor inside a container): every way.
	Anywhere Where = ""
	// Docker is a Docker container seen from its host.
	Docker Where = "docker"
	// Pod is a Kubernetes pod's container seen from its node (CRI).
	Pod Where = "pod"
	// Podman is a Podman container.
	Podman Where = "podman"
	// Containerd is a container of containerd without Kubernetes (nerdctl).
	Containerd Where = "containerd"
)

// The engines' names, as stats (shmstats.Container.Engine) gives them and
// WhereFor takes them.
const (
	EngineDocker     = "docker"
	EngineContainerd = "containerd"
	EnginePodman     = "podman"
)

// WhereFor says where a container runs from what its observer knows: the
// name of the engine that started it (EngineDocker, EngineContainerd,
// EnginePodman, "" unknown) and whether it is a Kubernetes pod's container,
// which its pod's spec sizes whatever the engine. It is the one mapping of
// engines to front doors; doctor (its Mode) and stats (Container.Engine)
// both ask it.
func WhereFor(engine string, pod bool) Where {
	switch {
	case pod:
		return Pod
	case engine == EngineDocker:
		return Docker
	case engine == EnginePodman:
		return Podman
	case engine == EngineContainerd:
		return Containerd
	}
	return Anywhere
}

// Target is the container a remedy is for.
type Target struct {
	Where Where
	// Ref names the container for gpurun resize (a Docker name or id, a
	// CRI container id); "" when not known.
	Ref string
	// Donor names the Docker container whose IPC namespace, and so whose
	// /dev/shm, this one shares (--ipc shareable and its container:
	// peers); "" for none.
	Donor string
	// UserMount says /dev/shm is the user's own mount (a tmpfs, a volume,
	// an emptyDir), which the engines' size settings do not touch.
	UserMount bool
	// NoShm says nothing is mounted at /dev/shm (docker --ipc none).
	NoShm bool
	// Annotation is the pod annotation the policy lets a pod ask for a
	// size with (the first of allowed_annotations), "" for none.
	Annotation string
}

// Step is one way to apply a remedy.
type Step struct {
	// Where names the way: "docker run", "compose", "kubernetes", "now", …
	Where string `json:"where"`
	// How is what to write or run.
	How string `json:"how"`
}

// String is the step in one line: "where: how".
func (s Step) String() string { return s.Where + ": " + s.How }

// For returns the ways to give t a /dev/shm of size bytes, the nearest
// first: how to grow it now where a running container is named, how to
// start it right in its own front door, and — where nothing is known of it
// — every front door's way.
func For(t Target, size int64) []Step {
	d, c, q := policy.FormatDocker(size), policy.FormatCompose(size), policy.FormatQuantity(size)
	emptyDir := fmt.Sprintf("an emptyDir {medium: Memory, sizeLimit: %s} mounted at /dev/shm", q)
	switch {
	case t.UserMount:
		return []Step{
			{"docker run", fmt.Sprintf("--tmpfs /dev/shm:size=%s (or --mount type=tmpfs,dst=/dev/shm,tmpfs-size=%d): the container mounts its own /dev/shm, which --shm-size and shm_size do not change", d, size)},
			{"compose", fmt.Sprintf("tmpfs: [\"/dev/shm:size=%s\"]", d)},
			{"kubernetes", fmt.Sprintf("the emptyDir at /dev/shm: {medium: Memory, sizeLimit: %s}", q)},
		}
	case t.NoShm && t.Where == Pod:
		return []Step{{"kubernetes", "mount " + emptyDir}}
	case t.NoShm:
		return []Step{
			{"docker run", fmt.Sprintf("drop --ipc none, or use --ipc private --shm-size=%s", d)},
			{"compose", fmt.Sprintf("ipc: private and shm_size: %q", c)},
			{"kubernetes", "mount " + emptyDir},
		}
	case t.Where == Docker && t.Donor != "":
		return []Step{
			{"now", fmt.Sprintf("gpurun resize %s %s  (grows the shared /dev/shm of %s and every container joined to it; no restart)", t.Donor, d, t.Donor)},
			{"recreate", fmt.Sprintf("start %s with --shm-size=%s (docker ignores --shm-size on a container that joins another's IPC namespace; compose: shm_size: %q on that service)", t.Donor, d, c)},
		}
	case t.Where == Docker:
		return []Step{
			{"now", fmt.Sprintf("gpurun resize %s %s  (no restart; Docker's record keeps the old size)", ref(t.Ref, "CONTAINER"), d)},
			{"recreate", fmt.Sprintf("docker run --shm-size=%s ...  (or gpurun run ..., which adds it)", d)},
			{"compose", fmt.Sprintf("shm_size: %q in the service", c)},
		}
	case t.Where == Pod:
		steps := []Step{{"now", fmt.Sprintf("gpurun resize --cri %s %s  (grows the pod's /dev/shm; no restart)", ref(t.Ref, "ID"), d)}}
		if t.Annotation != "" {
			steps = append(steps, Step{"annotation", fmt.Sprintf("pod annotation %s: %q (the runtime must pass it to the spec: containerd's pod_annotations)", t.Annotation, q)})
		}
		return append(steps, kubernetes(emptyDir))
	case t.Where == Podman:
		return []Step{
			{"now", fmt.Sprintf("gpurun resize %s %s  (no restart)", ref(t.Ref, "CONTAINER"), d)},
			{"recreate", fmt.Sprintf("podman run --shm-size=%s ...", d)},
		}
	case t.Where == Containerd:
		return []Step{{"recreate", fmt.Sprintf("nerdctl run --shm-size=%s ...", d)}}
	}
	return []Step{
		{"gpurun", "gpurun run <your docker run arguments>  (gives every GPU container the policy's /dev/shm)"},
		{"docker run", fmt.Sprintf("docker run --shm-size=%s ...", d)},
		{"compose", fmt.Sprintf("shm_size: %q in the service, or gpurun compose migrate --write (adds it to every GPU service)", c)},
		{"docker host", "sudo gpurun install docker --set-as-default --reload  (every GPU container the daemon starts)"},
		kubernetes(emptyDir),
		{"podman/cri-o", "sudo gpurun install podman  (or crio: the hook sizes GPU containers)"},
		{"now", fmt.Sprintf("on the host, gpurun resize CONTAINER %s (or --cri ID for a pod) grows it without a restart", d)},
	}
}

// kubernetes is the Kubernetes way: the emptyDir, or a gpurun mode that
// sizes every GPU pod.
func kubernetes(emptyDir string) Step {
	return Step{"kubernetes", emptyDir + ", or runtimeClassName: gpurun on nodes set up by gpurun (kubectl apply -k deploy/kubernetes/overlays/runtime-class; default-runtime, nri or webhook size every GPU pod)"}
}

func ref(r, placeholder string) string {
	if r == "" {
		return placeholder
	}
	return r
}

// Lines renders steps, one a line: "where:" padded to the widest, then how.
func Lines(steps []Step) []string {
	width := 0
	for _, s := range steps {
		width = max(width, len(s.Where))
	}
	out := make([]string, 0, len(steps))
	for _, s := range steps {
		out = append(out, fmt.Sprintf("%-*s %s", width+1, s.Where+":", s.How))
	}
	return out
}

// Text is Lines joined by newlines.
func Text(steps []Step) string { return strings.Join(Lines(steps), "\n") }

// Write prints steps with Lines, each line after indent.
func Write(w io.Writer, indent string, steps []Step) error {
	for _, l := range Lines(steps) {
		if _, err := fmt.Fprintf(w, "%s%s\n", indent, l); err != nil {
			return err
		}
	}
	return nil
}
