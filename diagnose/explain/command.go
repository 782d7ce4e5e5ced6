package explain

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/policy"
)

// RunOptions are gpurun explain's: the log, the policy and how to print.
type RunOptions struct {
	// Path is the log file; "" or "-" reads In.
	Path string
	In   io.Reader
	Out  io.Writer
	// Err gets the note that standard input is read, when In is a terminal.
	Err io.Writer
	// Policy sizes the fix; Memory is the job's container's memory (0
	// unknown), as in Options.
	Policy *policy.Policy
	Memory int64
	// JSON prints the report as one object, or streaming, one StreamEvent
	// a line.
	JSON bool
	// Stream prints each finding as soon as its line is read and the fix at
	// the end; nil means on for standard input, off for a file.
	Stream *bool
}

// StreamEvent is one line of gpurun explain --json on a stream.
type StreamEvent struct {
	Event   string   `json:"event"` // "finding" or "report"
	Finding *Finding `json:"finding,omitempty"`
	Report  *Report  `json:"report,omitempty"`
}

// Run is gpurun explain: it scans the log and prints the findings and the
// fix. Its error carries the exit status (exitcode): 1 when the log holds
// a /dev/shm failure, 2 when the log cannot be read.
func Run(o RunOptions) error {
	src, in := "-", o.In
	if o.Path != "" && o.Path != "-" {
		f, err := os.Open(o.Path)
		if err != nil {
			return exitcode.New(2, fmt.Errorf("explain: %w", err))
		}
		defer f.Close()
		src, in = o.Path, f
	} else if isTerminal(in) {
		fmt.Fprintln(o.Err, "gpurun explain: reading the log from standard input (end it with Ctrl-D)")
	}
	stream := src == "-"
	if o.Stream != nil {
		stream = *o.Stream
	}
	opts := Options{Source: src, Policy: o.Policy, Memory: o.Memory}
	var writeErr error
	if stream {
		shown := 0
		opts.OnFinding = func(f Finding) {
			if writeErr != nil {
				return
			}
			if o.JSON {
				writeErr = encodeLine(o.Out, StreamEvent{Event: "finding", Finding: &f})
				return
			}
			if f.Kind != KindOther {
				shown++
			}
			writeErr = WriteFinding(o.Out, shown, f)
		}
	}
	rep, err := Scan(in, opts)
	if err != nil {
		return exitcode.New(2, fmt.Errorf("explain: %w", err))
	}
	if err := writeEnd(o.Out, rep, stream, o.JSON, writeErr); err != nil {
		return fmt.Errorf("explain: write: %w", err)
	}
	if rep.Found() {
		return exitcode.New(1, fmt.Errorf("explain: %d /dev/shm finding(s) in %s", len(rep.Findings), logName(src)))
	}
	return nil
}

// writeEnd prints the report, or a stream's end, unless writing the stream
// failed (writeErr).
func writeEnd(out io.Writer, rep *Report, stream, asJSON bool, writeErr error) error {
	switch {
	case writeErr != nil:
		return writeErr
	case stream && asJSON:
		return encodeLine(out, StreamEvent{Event: "report", Report: rep})
	case stream:
		return WriteStreamEnd(out, rep)
	case asJSON:
		return encodeLine(out, rep)
	default:
		return WriteText(out, rep)
	}
}

// encodeLine writes v as one line of JSON.
func encodeLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// logName is how Run's messages name a log.
func logName(src string) string {
	if src == "-" {
		return "standard input"
	}
	return src
}

// isTerminal reports whether r is a terminal (so that a user who typed
// `gpurun explain` alone learns that it waits for input).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
