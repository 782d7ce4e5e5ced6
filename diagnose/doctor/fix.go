package doctor

import "github.com/gpurun/gpurun/policy/remedy"

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

// remedy is what doctor knows of the container, as remedy's target.
func (t fixTarget) remedy() remedy.Target {
	engine, pod := t.mode.engine()
	return remedy.Target{Where: remedy.WhereFor(engine, pod), Ref: t.ref, Donor: t.donor, UserMount: t.userMount}
}

// engine is the engine a report's one container runs under, as
// remedy.WhereFor takes it, and whether it is a pod's: "" and false where
// the report is not on one container seen from its host.
func (m Mode) engine() (name string, pod bool) {
	switch m {
	case ModeDocker:
		return remedy.EngineDocker, false
	case ModeCRI:
		return "", true
	}
	return "", false
}

// sizeFix returns the ways to give a container a /dev/shm of size bytes:
// how to grow it now, and how to start it right (remedy.For).
func sizeFix(t fixTarget, size int64) string {
	return remedy.Text(remedy.For(t.remedy(), size))
}

// noShmFix is the fix for a container with nothing at /dev/shm.
func noShmFix(t fixTarget, size int64) string {
	r := t.remedy()
	r.NoShm = true
	return remedy.Text(remedy.For(r, size))
}

// recreateFix is how to start the container again with a /dev/shm of
// size, for a size that must outlive a restart: its door's "recreate"
// way, else every way.
func recreateFix(t fixTarget, size int64) string {
	for _, st := range remedy.For(t.remedy(), size) {
		if st.Where == "recreate" {
			return "to keep the size across restarts, recreate it: " + st.How
		}
	}
	return sizeFix(t, size)
}

// startFix is the ways to start the container with its own /dev/shm of
// size: its door's, without growing the one it has now (which, for a
// container in the host's IPC namespace, is the host's).
func startFix(t fixTarget, size int64) string {
	var steps []remedy.Step
	for _, st := range remedy.For(t.remedy(), size) {
		if st.Where != "now" {
			steps = append(steps, st)
		}
	}
	return remedy.Text(steps)
}
