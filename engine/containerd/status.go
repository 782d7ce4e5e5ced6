package containerd

import "encoding/json"

// Running is the configuration a running containerd's CRI plugin reports
// it runs with: the "config" of its verbose CRI Status (crictl info). It
// is what containerd loaded, which may differ from the files Load reads
// when they changed after containerd started.
type Running struct {
	// StateDir is the CRI plugin's state dir
	// (<containerd state>/io.containerd.grpc.v1.cri).
	StateDir string
	// DefaultRuntime is the default runtime handler.
	DefaultRuntime string
	// Runtimes are the runtime handlers it loaded, by name.
	Runtimes map[string]json.RawMessage
}

// runningJSON is the JSON form of the keys Running holds.
type runningJSON struct {
	StateDir   string `json:"stateDir"`
	Containerd struct {
		DefaultRuntimeName string                     `json:"defaultRuntimeName"`
		Runtimes           map[string]json.RawMessage `json:"runtimes"`
	} `json:"containerd"`
}

// ReadRunning reads the info map of a verbose CRI Status response. ok is
// false when it has no "config" that decodes (a runtime other than
// containerd, or one that does not report it).
func ReadRunning(info map[string]string) (r Running, ok bool) {
	raw, ok := info["config"]
	if !ok {
		return r, false
	}
	var j runningJSON
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		return r, false
	}
	return Running{StateDir: j.StateDir, DefaultRuntime: j.Containerd.DefaultRuntimeName, Runtimes: j.Containerd.Runtimes}, true
}
