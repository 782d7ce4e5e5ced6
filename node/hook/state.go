package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// State is the container state an OCI runtime writes to a hook's stdin
// (runtime-spec "state"). Older runtimes call the bundle "bundlePath".
type State struct {
	OCIVersion string `json:"ociVersion"`
	ID         string `json:"id"`
	// Status is "creating" (runc, createRuntime/createContainer/prestart),
	// "created" (crun for the same stages), "running" or "stopped".
	Status string `json:"status"`
	// Pid is the container's init process, as the PID namespace of the
	// process that runs the hook names it.
	Pid int `json:"pid"`
	// Bundle is the absolute path of the bundle directory (config.json).
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// maxState bounds what is read from stdin: a state is a few hundred bytes
// plus the annotations.
const maxState = 4 << 20

// ParseState decodes the state a runtime passes on a hook's stdin. It
// accepts "bundle" (runtime-spec 1.0) and the older "bundlePath", and
// requires a pid and an absolute bundle path: a hook cannot act without
// either. A well-formed state that lacks them is returned with the error.
func ParseState(data []byte) (State, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return State{}, errors.New("container state: stdin is empty (gpurun hook is run by an OCI runtime, with the state JSON on stdin)")
	}
	var raw struct {
		State
		BundlePath string `json:"bundlePath"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return State{}, fmt.Errorf("container state: malformed JSON at byte %d: %w", se.Offset, err)
		}
		return State{}, fmt.Errorf("container state: %w", err)
	}
	st := raw.State
	if st.Bundle == "" {
		st.Bundle = raw.BundlePath
	}
	var missing []string
	if st.Bundle == "" {
		missing = append(missing, `"bundle" (or "bundlePath")`)
	}
	if st.Pid == 0 {
		missing = append(missing, `"pid"`)
	}
	// Invalid states come back too, for the log: the id says which container.
	if len(missing) > 0 {
		return st, fmt.Errorf("container state %q: no %s", st.ID, strings.Join(missing, " and no "))
	}
	if st.Pid < 0 {
		return st, fmt.Errorf("container state %q: invalid pid %d", st.ID, st.Pid)
	}
	if !filepath.IsAbs(st.Bundle) {
		return st, fmt.Errorf("container state %q: bundle %q is not an absolute path", st.ID, st.Bundle)
	}
	st.Bundle = filepath.Clean(st.Bundle)
	return st, nil
}
