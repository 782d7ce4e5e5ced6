//go:build linux

package shmprobe

import (
	"fmt"
	"os"

	"github.com/gpurun/gpurun/policy"
)

// NCCLOptions configures [NCCL].
type NCCLOptions struct {
	// Dir is where the segments are created (default /dev/shm).
	Dir string
	// SegmentSize is the size of each segment (default NCCLSegmentSize).
	SegmentSize int64
	// Count is how many segments to create (default DefaultNCCLCount).
	Count int
}

// NCCLResult is what [NCCL] found.
type NCCLResult struct {
	Dir         string `json:"dir"`
	FS          FS     `json:"fs"`
	SegmentSize int64  `json:"segment_bytes"`
	Count       int    `json:"count"`
	// Created counts the segments fully reserved before the first failure.
	Created int `json:"created"`
	// Failure is empty when all Count segments were created.
	Failure Failure `json:"failure,omitempty"`
	// Err names the call that failed and how.
	Err string `json:"error,omitempty"`
}

// String is the one-line summary the CLI prints.
func (r NCCLResult) String() string {
	what := fmt.Sprintf("segments of %d bytes (%s) in %s (%s)", r.SegmentSize, policy.FormatSize(r.SegmentSize), r.Dir, r.FS)
	if r.Failure == FailureNone {
		return fmt.Sprintf("nccl: ok: created %d of %d %s", r.Created, r.Count, what)
	}
	return fmt.Sprintf("nccl: %s: created %d of %d %s: %s", r.Failure, r.Created, r.Count, what, r.Err)
}

// NCCL runs the NCCL-like probe: it creates Count files in Dir and reserves
// SegmentSize bytes in each with fallocate mode 0 — what NCCL's SHM
// transport does through posix_fallocate for every channel and peer —
// holding all of them until it stops at the first failure or the last
// segment, then frees them all. On a 64 MiB tmpfs, default-sized segments
// fail with ENOSPC after six (64 MiB / 9,637,888 bytes).
func NCCL(o NCCLOptions) NCCLResult {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = NCCLSegmentSize
	}
	if o.Count == 0 {
		o.Count = DefaultNCCLCount
	}
	r := NCCLResult{Dir: o.Dir, FS: StatFS(o.Dir), SegmentSize: o.SegmentSize, Count: o.Count}
	if o.SegmentSize < 0 || o.Count < 0 {
		r.Failure, r.Err = FailureSetup, fmt.Sprintf("bad segment size %d or count %d", o.SegmentSize, o.Count)
		return r
	}
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for i := range o.Count {
		f, err := openUnlinked(o.Dir, "gpurun-probe-nccl-")
		if err != nil {
			r.Failure, r.Err = FailureSetup, err.Error()
			if i > 0 {
				// Creating the first file worked: the directory is fine, so
				// this is the filesystem running out (inodes, for one).
				r.Failure = classify(err)
			}
			return r
		}
		held = append(held, f)
		if err := fallocate(f, 0, o.SegmentSize); err != nil {
			r.Failure = classify(err)
			r.Err = fmt.Sprintf("posix_fallocate segment %d of %d (%d bytes): %s: %v", i+1, o.Count, o.SegmentSize, errnoName(err), err)
			return r
		}
		r.Created++
	}
	return r
}
