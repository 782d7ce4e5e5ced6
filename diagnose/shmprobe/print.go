package shmprobe

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/gpurun/gpurun/internal/exitcode"
)

// Print writes a probe's result r to w: its line, or with asJSON one JSON
// object. It returns an error for the probe's failure, carrying the exit
// status ExitStatus gives it (exitcode), or for a write that failed; nil
// when the probe allocated everything.
func Print(w io.Writer, r fmt.Stringer, failure Failure, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("shm-probe: %w", err)
		}
	} else if _, err := fmt.Fprintln(w, r.String()); err != nil {
		return fmt.Errorf("shm-probe: %w", err)
	}
	if code := ExitStatus(failure); code != 0 {
		return exitcode.New(code, fmt.Errorf("shm-probe: %s", failure))
	}
	return nil
}
