// Package explain reads a job's log and names the /dev/shm failures in it.
// It recognises three kinds of evidence ([Evidence]): a library's own
// message (PyTorch DataLoader workers killed by SIGBUS, shared tensors that
// did not fit, NCCL segments, Ray's object store, Triton's Python backend,
// PostgreSQL's dynamic shared memory, Chromium's crashes, UCX, ...); a
// mention of the shm filesystem (its path, a size setting, a POSIX shm name
// or call, a shared-memory transport's segment, a POSIX semaphore's
// creation) in or next to an error of space, existence, permission or
// creation, in any wording; and SIGBUS in any of its spellings, possible
// alone and likely near shared memory or a DataLoader, NCCL, MPI, UCX or Ray
// context. Two more tell why such a failure happened, in the forms
// Kubernetes users paste beside a log (kubectl describe pod, get pods, get
// events, logs --previous, df and ls of /dev/shm, the kernel's OOM report,
// gpurun's own Events): a restart of the container in a pod whose
// /dev/shm outlived its earlier instance, and a kill for memory while
// /dev/shm held much of it. Each
// finding says which kinds it rests on, and its confidence follows from
// them. Look-alikes (CUDA out of memory, the GPU's on-chip shared memory,
// System V limits, CMA refused in a container, too many open files, NCCL
// timeouts, ...) are named as
// what they are, apart from the /dev/shm findings.
//
// Every signature lives in one table ([Signatures]); each comes with the
// cause, how much /dev/shm the message implies when it says, and the fix,
// sized by gpurun's policy, with a step for each ecosystem the log shows.
//
// Logs are read as a stream, a line at a time, so a log of any size works
// in constant memory. CRLF line ends, carriage-return progress bars (tqdm),
// ANSI colour codes, gzip-compressed input, JSON records one a line
// (Docker's json-file driver, Loki, CloudWatch), kubectl logs --prefix,
// lines wrapped at a terminal's width (with a logger's prefix or an indent
// on the continuation), tracebacks flattened onto one line and Python
// exception names split over several logger records are all handled.
package explain

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"sort"

	"github.com/gpurun/gpurun/policy"
)

// Confidence says how surely a signature means a /dev/shm problem.
type Confidence string

// The values of Confidence, surest first.
const (
	// Certain: the message itself says /dev/shm (or shared memory) ran out.
	Certain Confidence = "certain"
	// Likely: the message is about shared memory, or the lines around it
	// tie it to /dev/shm, but it has other causes too.
	Likely Confidence = "likely"
	// Possible: the message is a common symptom of a full /dev/shm and of
	// other failures alike.
	Possible Confidence = "possible"
)

func (c Confidence) rank() int {
	switch c {
	case Certain:
		return 0
	case Likely:
		return 1
	}
	return 2
}

// Kind says what fixes a signature's problem.
type Kind string

// The values of Kind.
const (
	// KindSize: /dev/shm is too small; give it more room.
	KindSize Kind = "shm-size"
	// KindPermission: /dev/shm is not writable by the job.
	KindPermission Kind = "shm-permission"
	// KindLeftovers: a restarted container found the pod's /dev/shm full
	// of what its earlier instance left; gpurun's restart sweep, or a new
	// pod, clears it.
	KindLeftovers Kind = "shm-leftovers"
	// KindMemory: /dev/shm's pages, charged to the container's memory
	// limit, left its processes too little; lower /dev/shm or raise the
	// limit.
	KindMemory Kind = "shm-memory"
	// KindOther: a look-alike, a failure that is not about /dev/shm;
	// Report.Others says what it is instead.
	KindOther Kind = "not-shm"
)

// LineRef is one line of the log that a finding rests on.
type LineRef struct {
	// N is the line number, counting from 1 (lines end at "\n").
	N int `json:"line"`
	// Text is the line without colour codes, shortened around the match
	// when long.
	Text string `json:"text"`
}

// Finding is one signature found in a log.
type Finding struct {
	// Signature is the ID of the signature, e.g. "nccl-shm-segment".
	Signature  string     `json:"signature"`
	Title      string     `json:"title"`
	Confidence Confidence `json:"confidence"`
	Kind       Kind       `json:"kind"`
	// Lines are the first matched lines (at most MaxLines); Count is how
	// many matches there were in all.
	Lines []LineRef `json:"lines"`
	Count int       `json:"count"`
	// Cause says what happened.
	Cause string `json:"cause"`
	// ImpliedBytes is the largest size the messages name (an NCCL
	// segment, say), 0 when they name none; Implied says it in words, or
	// says that the messages do not tell.
	ImpliedBytes int64  `json:"implied_bytes,omitempty"`
	Implied      string `json:"implied"`
	// ShmBytes is what the message says /dev/shm had (Ray says so), 0
	// when it does not say.
	ShmBytes int64 `json:"shm_bytes,omitempty"`
	// Fix says what to change for this finding; Report.Fix has the
	// commands.
	Fix string `json:"fix"`
	// Evidence names the kinds of evidence the finding rests on
	// (message, mention, sigbus, context; see Evidence), and "agrees with
	// ID" for another finding whose evidence raised it from possible.
	Evidence []string `json:"evidence,omitempty"`
}

// Report is what Scan found in one log.
type Report struct {
	// Source names the log ("-" for standard input).
	Source string `json:"source"`
	// Lines counts the log's lines.
	Lines int `json:"lines"`
	// Findings are the /dev/shm failures, ordered surest first, then by
	// first line.
	Findings []Finding `json:"findings"`
	// Others are look-alikes: failures that read like /dev/shm ones but
	// are not (CUDA out of memory, too many open files, ...), each saying
	// what it is, in order of first line.
	Others []Finding `json:"not_shm,omitempty"`
	// Ecosystems are the ecosystems whose context the log shows (see
	// Ecosystems); the fix has a step for each.
	Ecosystems []string `json:"ecosystems,omitempty"`
	// Fix is set when a finding calls for one.
	Fix *Fix `json:"fix,omitempty"`
}

// Found reports whether any /dev/shm signature matched (look-alikes do
// not count).
func (r *Report) Found() bool { return len(r.Findings) > 0 }

// Options configures Scan.
type Options struct {
	// Source names the log in the report.
	Source string
	// Policy sizes the fix; nil means gpurun's built-in policy.
	Policy *policy.Policy
	// Memory is the memory the job's container may use, in bytes, to size
	// the fix as gpurun would; 0 when unknown (the policy minimum).
	Memory int64
	// OnFinding, when set, is called as soon as the line that makes a
	// finding has been read, once per signature, before Scan reads on: a
	// log that is still being written (kubectl logs -f) shows its
	// failures at once. The finding holds the lines read so far, and the
	// confidence of its own evidence: the report may raise it when
	// another kind of evidence agrees. A finding that a surer one makes
	// redundant (YieldsTo) may be shown here and left out of the report. Look-alikes come through too, with
	// Kind KindOther.
	OnFinding func(Finding)
}

// MaxLines is how many matched lines a finding keeps.
const MaxLines = 20

// Scan reads a log to its end and reports the /dev/shm failure signatures
// in it. Gzip-compressed input is decompressed. The error is for input that
// cannot be read; a log with no signature gives a report without findings.
func Scan(r io.Reader, o Options) (*Report, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var in io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("read %s: gzip: %w", o.Source, err)
		}
		defer gz.Close()
		in = gz
	}
	s := newScanner(table(), vocabulary())
	s.onFinding = o.OnFinding
	if err := s.run(in); err != nil {
		return nil, fmt.Errorf("read %s: %w", o.Source, err)
	}
	rep := &Report{Source: o.Source, Lines: s.lines, Findings: []Finding{}, Ecosystems: s.ecosystems()}
	for _, f := range s.findings() {
		if f.Kind == KindOther {
			rep.Others = append(rep.Others, f)
		} else {
			rep.Findings = append(rep.Findings, f)
		}
	}
	sort.SliceStable(rep.Others, func(i, j int) bool { return rep.Others[i].Lines[0].N < rep.Others[j].Lines[0].N })
	sort.SliceStable(rep.Findings, func(i, j int) bool {
		a, b := rep.Findings[i], rep.Findings[j]
		if a.Confidence.rank() != b.Confidence.rank() {
			return a.Confidence.rank() < b.Confidence.rank()
		}
		return a.Lines[0].N < b.Lines[0].N
	})
	pol := o.Policy
	if pol == nil {
		pol = policy.Default()
	}
	rep.Fix = suggest(pol, o.Memory, rep.Findings, rep.Ecosystems)
	return rep, nil
}
