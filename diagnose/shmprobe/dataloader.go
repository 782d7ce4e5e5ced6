//go:build linux

package shmprobe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/policy"
)

// DataLoaderOptions configures [DataLoader].
type DataLoaderOptions struct {
	// Dir is where the workers create their segments (default /dev/shm).
	Dir string
	// Workers is how many worker processes run at once (default 4).
	Workers int
	// SegmentSize is what each worker maps and touches (default 48 MiB).
	SegmentSize int64
	// Command returns an unstarted command that runs one worker: this
	// program run again so that it calls [RunWorker] with args (Go cannot
	// fork). Required.
	Command func(args []string) *exec.Cmd
}

// Worker is what became of one DataLoader probe worker.
type Worker struct {
	// Index counts from 0; PID is the worker's process id.
	Index int `json:"index"`
	PID   int `json:"pid"`
	// Touched is how many bytes of its segment the worker touched.
	Touched int64 `json:"touched_bytes"`
	// Signal names the signal that killed the worker ("SIGBUS"), if one did.
	Signal string `json:"signal,omitempty"`
	// ExitCode is the worker's exit status, -1 when a signal killed it.
	ExitCode int `json:"exit_code"`
	// Failure is empty for a worker that touched all of its segment.
	Failure Failure `json:"failure,omitempty"`
	// Message is what a failed worker said (its error, or stderr).
	Message string `json:"message,omitempty"`
}

// DataLoaderResult is what [DataLoader] found.
type DataLoaderResult struct {
	Dir         string `json:"dir"`
	FS          FS     `json:"fs"`
	Workers     int    `json:"workers"`
	SegmentSize int64  `json:"segment_bytes"`
	// OK counts the workers that touched all of their segment.
	OK int `json:"ok"`
	// Failure is FailureSIGBUS when any worker died of SIGBUS, else the
	// first other failure, else empty.
	Failure Failure  `json:"failure,omitempty"`
	Results []Worker `json:"results"`
}

// String is the one-line summary the CLI prints.
func (r DataLoaderResult) String() string {
	what := fmt.Sprintf("%s segments in %s (%s)", policy.FormatSize(r.SegmentSize), r.Dir, r.FS)
	if r.Failure == FailureNone {
		return fmt.Sprintf("dataloader: ok: %d of %d workers touched %s", r.OK, r.Workers, what)
	}
	var died []string
	for _, w := range r.Results {
		if w.Failure == FailureNone {
			continue
		}
		how := w.Message
		if w.Signal != "" {
			how = fmt.Sprintf("killed by %s after %s", w.Signal, policy.FormatSize(w.Touched))
		}
		died = append(died, fmt.Sprintf("worker %d (pid %d) %s", w.Index, w.PID, how))
	}
	return fmt.Sprintf("dataloader: %s: %d of %d workers failed touching %s: %s", r.Failure, r.Workers-r.OK, r.Workers, what, strings.Join(died, "; "))
}

// DataLoader runs the DataLoader-like probe: Workers processes at once, each
// creating an unlinked file in Dir, sizing it to SegmentSize with ftruncate,
// mapping it and touching every page, then holding it until every worker
// has finished (as batches wait in the DataLoader's queue). On a tmpfs too
// small for all segments, the workers that run out die of SIGBUS, like
// PyTorch's. Everything is freed when the workers exit, before DataLoader
// returns. The error is for a probe that could not run at all; what the
// workers met is in the result.
func DataLoader(ctx context.Context, o DataLoaderOptions) (DataLoaderResult, error) {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultWorkerSegment
	}
	r := DataLoaderResult{Dir: o.Dir, FS: StatFS(o.Dir), Workers: o.Workers, SegmentSize: o.SegmentSize}
	switch {
	case o.Workers < 0:
		return r, fmt.Errorf("dataloader probe: %d workers", o.Workers)
	case o.SegmentSize < 0:
		return r, fmt.Errorf("dataloader probe: segment size %d", o.SegmentSize)
	case o.Command == nil:
		return r, errors.New("dataloader probe: no worker command")
	}
	if fi, err := os.Stat(o.Dir); err != nil {
		return r, fmt.Errorf("dataloader probe: %w", err)
	} else if !fi.IsDir() {
		return r, fmt.Errorf("dataloader probe: %s is not a directory", o.Dir)
	}

	type running struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout *bufio.Reader
		stderr *cappedBuffer
		line   chan string
	}
	procs := make([]*running, 0, o.Workers)
	stopAll := func() {
		for _, p := range procs {
			p.stdin.Close()
		}
	}
	defer func() {
		// Reap whatever is still running if we return early.
		for _, p := range procs {
			if p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	}()
	for i := range o.Workers {
		cmd := o.Command(WorkerArgs(o.Dir, o.SegmentSize, i))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			stopAll()
			return r, fmt.Errorf("dataloader probe: worker %d: %w", i, err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			stopAll()
			return r, fmt.Errorf("dataloader probe: worker %d: %w", i, err)
		}
		stderr := &cappedBuffer{max: 4096}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			stopAll()
			return r, fmt.Errorf("dataloader probe: start worker %d: %w", i, err)
		}
		p := &running{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), stderr: stderr, line: make(chan string, 1)}
		procs = append(procs, p)
		go func() {
			line, _ := p.stdout.ReadString('\n')
			p.line <- strings.TrimSpace(line)
		}()
	}
	// Every worker reports once it has touched its segment (or dies); only
	// then may they let go, so that all segments are held at once.
	lines := make([]string, len(procs))
	for i, p := range procs {
		select {
		case lines[i] = <-p.line:
		case <-ctx.Done():
			stopAll()
			return r, fmt.Errorf("dataloader probe: %w", ctx.Err())
		}
	}
	stopAll()
	for i, p := range procs {
		err := p.cmd.Wait()
		w := Worker{Index: i, PID: p.cmd.Process.Pid, ExitCode: p.cmd.ProcessState.ExitCode()}
		w.Touched, w.Message = parseReport(lines[i])
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			w.Signal = unix.SignalName(ws.Signal())
			if w.Signal == "" {
				w.Signal = ws.Signal().String()
			}
		}
		switch {
		case w.Signal == "SIGBUS":
			w.Failure = FailureSIGBUS
		case err != nil || !strings.HasPrefix(lines[i], "ok "):
			w.Failure = FailureOther
			if w.Signal != "" {
				w.Message = "killed by " + w.Signal
			}
			if w.Message == "" {
				w.Message = strings.TrimSpace(p.stderr.String())
			}
			if w.Message == "" && err != nil {
				w.Message = err.Error()
			}
		}
		if w.Failure == FailureNone {
			r.OK++
		} else if r.Failure == FailureNone || w.Failure == FailureSIGBUS {
			r.Failure = w.Failure
		}
		r.Results = append(r.Results, w)
	}
	return r, nil
}

// parseReport reads a worker's report line: "ok N", "sigbus N" or
// "error MESSAGE".
func parseReport(line string) (touched int64, message string) {
	verb, rest, _ := strings.Cut(line, " ")
	switch verb {
	case "ok", "sigbus":
		n, _ := strconv.ParseInt(rest, 10, 64)
		return n, ""
	case "error":
		return 0, rest
	}
	return 0, ""
}

// WorkerArgs are the arguments [DataLoader] gives the worker command, and
// [RunWorker] reads: DIR SIZE INDEX.
func WorkerArgs(dir string, size int64, index int) []string {
	return []string{dir, strconv.FormatInt(size, 10), strconv.Itoa(index)}
}

// RunWorker is the body of one DataLoader probe worker, run in a process
// of its own with the arguments [WorkerArgs] made: it creates an unlinked
// file in DIR, maps SIZE bytes of it, touches every page, reports "ok N" on
// out, then holds the segment until in reaches EOF (its parent is done).
// When the tmpfs runs out it reports "sigbus N" and dies of SIGBUS, as a
// PyTorch worker would. Other failures are reported as "error MESSAGE"
// and returned.
func RunWorker(args []string, in io.Reader, out io.Writer) error {
	return runWorker(args, in, out, nil)
}

// runWorker is RunWorker with a hook that runs between mapping and
// touching (tests shrink the file there to provoke a SIGBUS anywhere).
func runWorker(args []string, in io.Reader, out io.Writer, afterMap func(*os.File)) error {
	fail := func(err error) error {
		fmt.Fprintf(out, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return err
	}
	if len(args) != 3 {
		return fail(fmt.Errorf("worker: want DIR SIZE INDEX, got %q", args))
	}
	dir := args[0]
	size, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || size < 0 {
		return fail(fmt.Errorf("worker: bad SIZE %q", args[1]))
	}
	if _, err := strconv.Atoi(args[2]); err != nil {
		return fail(fmt.Errorf("worker: bad INDEX %q", args[2]))
	}
	f, err := openUnlinked(dir, "gpurun-probe-dataloader-"+args[2]+"-")
	if err != nil {
		return fail(err)
	}
	b, err := mapFile(f, size)
	if err == nil && afterMap != nil {
		afterMap(f)
	}
	f.Close() // the mapping keeps the segment
	if err != nil {
		return fail(fmt.Errorf("worker %s: %s: %w", args[2], errnoName(err), err))
	}
	n, fault := touch(b, 0)
	if fault {
		fmt.Fprintf(out, "sigbus %d\n", n)
		dieOf(unix.SIGBUS)
	}
	fmt.Fprintf(out, "ok %d\n", n)
	_, _ = io.Copy(io.Discard, in)
	if b != nil {
		_ = unix.Munmap(b)
	}
	return nil
}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
