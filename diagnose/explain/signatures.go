package explain

import (
	"regexp"
	"slices"
	"sync"
)

// Signature is one kind of /dev/shm failure and how to recognise it in a
// log. A line matches when one of Patterns matches it and the conditions
// (After, Unless, Near) hold, or, for a signature with Both marks, when
// both marks were seen close enough.
type Signature struct {
	// ID is stable; docs/troubleshooting.md has a section for each.
	ID    string
	Title string
	// Confidence and Kind apply to every match (a possible finding that
	// another kind of evidence agrees with is raised to likely).
	Confidence Confidence
	Kind       Kind
	// Evidence names the kinds of evidence the signature rests on.
	Evidence []Evidence
	// Ecosystem, when set, is the ecosystem (Ecosystems) whose message
	// this is: the fix gets its step.
	Ecosystem string
	// Cause says what happened; Fix what to change (Report.Fix has the
	// commands).
	Cause string
	Fix   string
	// Implied describes a size the message names, with %s standing for it
	// ("9.19MiB (9637888 bytes)"); a pattern names a size with a group
	// called "bytes" (a count of bytes), "gb" (decimal gigabytes) or "gib"
	// (binary ones). NoSize is said when the message names none. A group
	// called "have" (bytes) or "havegb" names what /dev/shm had, which the
	// finding adds. A group called "errno" adds the error number's name
	// (28: ENOSPC).
	Implied string
	NoSize  string
	// Keywords are lower-case strings one of which every match contains: a
	// cheap test before the patterns run.
	Keywords []string
	// Patterns are tried in order; the first that matches counts.
	Patterns []*regexp.Regexp
	// Generic signatures only count on a line no other signature matched
	// (a Near signature's match, which may wait for its mark in vain,
	// does not count).
	Generic bool
	// After, when set, must have matched this line or one of the
	// AfterWithin lines before it (a traceback frame, say); with
	// AfterAround, or one of the AfterWithin lines after it (a traceback
	// that a logger or Sentry prints error first).
	After         *regexp.Regexp
	AfterKeywords []string
	AfterWithin   int
	AfterAround   bool
	// Unless, when set, must not have matched this line or one of the
	// UnlessWithin lines before it.
	Unless         *regexp.Regexp
	UnlessKeywords []string
	UnlessWithin   int
	// Near > 0: the line counts only within Near lines (before or after)
	// of a line with NearMark (MarkAnchor when empty: a line that an
	// Anchor signature found).
	Near     int
	NearMark string
	Anchor   bool
	// Mark, when set, is set on the lines the signature matches.
	Mark string
	// Both, when set, are two marks (evidence.go): the signature matches
	// when both were seen within BothWithin lines, on the line of the
	// later one; Patterns are not used. Unless, when set, must not have
	// matched from UnlessWithin lines before the earlier mark on.
	Both       [2]string
	BothWithin int
	// YieldsTo names signatures that, found anywhere in the log, make
	// this one's finding redundant: it is left out of the report (a
	// stream has already shown it, as the first sign).
	YieldsTo []string
	// Fallback signatures rest on the weakest evidence: any other
	// finding in the log, a look-alike's too, makes theirs redundant, so
	// theirs is known only at the end: a stream does not tell it as it
	// arrives, the report holds it.
	Fallback bool
}

// Signatures returns the table every scan uses, in the order it is tried.
func Signatures() []Signature { return slices.Clone(table()) }

// Fix sentences shared by several signatures.
const (
	fixDataLoader = "Give the container a /dev/shm that holds num_workers x prefetch_factor batches (see Fix). " +
		"num_workers=0 avoids /dev/shm but leaves the GPU waiting for data."
	fixNCCL = "Give the container a /dev/shm with room for NCCL's segments (see Fix). " +
		"NCCL_SHM_DISABLE=1 also silences it, but sends the traffic between the GPUs through sockets instead."
	noSizeDataLoader = "the message does not say how much; a DataLoader holds about num_workers x prefetch_factor batches in /dev/shm"
	impliedNCCL      = "%s per segment; NCCL's SHM transport makes one per channel for each pair of GPUs on the node, so a job needs many"
	fixNotGPU        = " gpurun sizes GPU containers by default: for this container set match = \"all\" in /etc/gpurun/config.toml (then gpurun run and the node modes size it too), or give it shm_size / --shm-size directly."
	notShm           = "not a /dev/shm problem"
)

// table is the one signature table. The order matters only for Generic
// signatures, which yield to any other match on the same line.
var table = sync.OnceValue(func() []Signature {
	sigs := signatures()
	// A mention of /dev/shm with an error is redundant when a library's
	// own message that is more than possible explains the failure.
	// A message that itself yields to the mention is left out: two
	// findings must not make each other redundant.
	var messages []Signature
	for _, sig := range sigs {
		if sig.Kind != KindOther && sig.Confidence != Possible && slices.Equal(sig.Evidence, []Evidence{EvidenceMessage}) {
			messages = append(messages, sig)
		}
	}
	for i := range sigs {
		if !slices.Equal(sigs[i].Evidence, []Evidence{EvidenceMention}) || sigs[i].ID == "shm-path-enospc" {
			continue
		}
		for _, m := range messages {
			if !slices.Contains(m.YieldsTo, sigs[i].ID) {
				sigs[i].YieldsTo = append(sigs[i].YieldsTo, m.ID)
			}
		}
		sigs[i].YieldsTo = append(sigs[i].YieldsTo, "shm-path-enospc")
	}
	return sigs
})

// sigbusKeywords are the keywords of SIGBUS's spellings: the signal's
// names, and the words that introduce an exit status.
func sigbusKeywords() []string {
	return []string{"sigbus", "bus error", "bus_", "signal 7", "signal: 7", "exit code", "exit_code", "exitcode", "exit status",
		"exit_status", "exited with", "return code", "return_code", "returncode", "error 135", "sig=", "sig(", "signal=", "signal(", "signal (",
		"signum", "signo", "rc=", "rc:", "rc ="}
}

// sigbusPatterns are SIGBUS's spellings: Python's and a shell's "Bus
// error", a signal handler's "signal 7" and BUS_ADRERR, a debugger's
// SIGBUS, and an exit status that says a process died of signal 7: -7
// where the parent reads the signal (an elastic agent, a launcher,
// Python's subprocess, vLLM's worker monitor), 135 (128+7) where a shell
// or an engine reports it (docker, kubectl's Exit Code, CI runners,
// make's "Error 135").
func sigbusPatterns() []*regexp.Regexp {
	re := regexp.MustCompile
	status := `\b(?:exit(?:ed)?(?: with)?[ _]?(?:code|status)|exitcode|return(?:ed)?[ _]?code|returncode)\s*[:=]?\s*['"(]?`
	return []*regexp.Regexp{
		re(`(?i)\bSIGBUS\b`),
		re(`(?i)\bBus error\b`),
		re(`\bBUS_(?:ADRERR|ADRALN|OBJERR)\b`),
		re(`(?i)\bsignal:? 7\b|\bsig(?:nal|num|no)?\s*[=(]\s*7\b`),
		re(`(?i)\brc\s*[:=]\s*(?:-7|135)\b`),
		re(`(?i)` + status + `-7\b`),
		re(`(?i)` + status + `135\b|\*\*\* \[[^\]]*\] Error 135\b`),
	}
}

// crossProcess matches a process reaching another's memory and refused:
// CMA (process_vm_readv/writev, Open MPI's "Read -1, expected N, errno =
// 1") or UCX's open of /proc/PID/fd/N.
func crossProcess() *regexp.Regexp {
	return regexp.MustCompile(`(?i)process_vm_(?:readv|writev)\b.*\b(?:returned -1|delivered|Operation not permitted|Permission denied)|` +
		`\b(?:Read|Wrote|Write) -1, expected \d+, errno ?= ?1\b|open\(file_name=/proc/\d+/fd/\d+`)
}

// crossProcessKeywords are crossProcess's keywords.
func crossProcessKeywords() []string {
	return []string{"vm_readv", "vm_writev", "-1, expected", "/proc/"}
}

// mmapENOMEM is an mmap(2) that failed with ENOMEM: a mapping refused
// (vm.max_map_count, the address space), not a full tmpfs.
const mmapENOMEM = `\bunable to mmap\b.*(?:Cannot allocate memory|ENOMEM)|\bmmap\w*(?:\(\))?:? (?:failed|error)\b.*(?:Cannot allocate memory|ENOMEM)`

// otherSharedMemory names the memories called shared that are not
// /dev/shm: the GPU's on-chip shared memory and launch limits, System V
// segments, PostgreSQL's lock table; and the other reasons a line may
// name for a failure of shared memory: CUDA's, a mount's, the network's,
// an invalid argument.
const otherSharedMemory = `out of resource|per[- ]block|hardware limit|\bsmem\b|ptxas|\bregisters\b|num_stages|outofresources|launch_bounds|` +
	`__shared__|on-chip|threadgroup|groupshared|\bshm(?:get|at|ctl|max|all|mni)\b|\bipcs\b|system v|\bsysv\b|semget|ipcmemorycreate|` +
	`max_locks_per_transaction|lock table|cuda failure|cuda error|\bmount|connection|timed out|timeout|invalid argument`

// otherSharedMemoryKeywords are otherSharedMemory's keywords: each of
// its words holds one.
func otherSharedMemoryKeywords() []string {
	return []string{"out of resource", "per block", "per-block", "hardware limit", "smem", "ptxas", "registers", "num_stages", "outofresources",
		"launch_bounds", "__shared__", "on-chip", "threadgroup", "groupshared", "shmget", "shmat", "shmctl", "shmmax", "shmall", "shmmni",
		"ipcs", "system v", "sysv", "semget", "ipcmemorycreate", "max_locks_per_transaction", "lock table", "cuda failure", "cuda error",
		"mount", "connection", "timed out", "timeout", "invalid argument"}
}

// signatures builds the table.
func signatures() []Signature {
	re := regexp.MustCompile
	return []Signature{
		{
			ID:         "torch-dataloader-bus-error",
			Title:      "PyTorch DataLoader worker killed by SIGBUS: /dev/shm is full",
			Confidence: Certain,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "pytorch",
			Cause: "DataLoader workers hand batches to the main process as files in /dev/shm. " +
				"When the tmpfs is full, the kernel answers a write to a page it cannot allocate with SIGBUS, which kills the worker. " +
				"Containers get a 64 MiB /dev/shm unless told otherwise.",
			Fix:      fixDataLoader,
			NoSize:   noSizeDataLoader,
			Keywords: []string{"bus error", "out of shared memory", "insufficient shared memory"},
			Patterns: []*regexp.Regexp{
				re(`(?i)DataLoader worker \([^)]*\) is killed by signal: Bus error`),
				re(`(?i)Unexpected bus error encountered in worker`),
				re(`(?i)insufficient shared memory \(shm\)`),
				re(`(?i)dataloader'?s workers are out of shared memory`),
			},
		},
		{
			ID:         "torch-shm-file",
			Title:      "PyTorch could not fill a shared-memory file in /dev/shm",
			Confidence: Certain,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "pytorch",
			Cause: "PyTorch shares a tensor between processes (DataLoader workers, torch.multiprocessing) by putting it in a POSIX shared-memory " +
				"object, a file /torch_... in /dev/shm, and could not make that file as large as the tensor: the tmpfs is full.",
			Fix:      fixDataLoader + " torch.multiprocessing.set_sharing_strategy(\"file_system\") does not help: it uses /dev/shm too.",
			NoSize:   "the message does not say how much",
			Keywords: []string{"torch_", "shared memory(shm)"},
			Patterns: []*regexp.Regexp{
				re(`(?i)unable to write to file </?torch_[^>]*>(?::\s[^()]*\((?P<errno>\d+)\))?`),
				re(`(?i)unable to allocate shared memory\(shm\) for file(?: </?torch_[^>]*>)?(?::\s[^()]*\((?P<errno>\d+)\))?`),
			},
			// A restart near it is shm-restart-leftovers.
			Mark: MarkShmFailed,
		},
		{
			ID:         "torch-dataloader-queue-empty",
			Title:      "DataLoader queue ran dry (_queue.Empty) after its worker died",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "pytorch",
			Cause: "The main process waited for a batch that never came: the worker or multiprocessing manager process that should have sent it died, " +
				"most often killed by SIGBUS when /dev/shm filled up, and queue.get() gave up with _queue.Empty. " +
				"The worker's own error is not in this traceback.",
			Fix:           fixDataLoader + " Look above the traceback for the worker's own error.",
			NoSize:        noSizeDataLoader,
			Keywords:      []string{"empty"},
			Patterns:      []*regexp.Regexp{re(`(?:^|[^\w.])(?:_queue|queue|Queue)\.Empty\b`)},
			After:         re(`(?i)torch[/\\]utils[/\\]data|dataloader|multiprocessing[/\\](?:managers|queues)\.py`),
			AfterKeywords: []string{"torch", "dataloader", "multiprocessing"},
			AfterWithin:   40,
			AfterAround:   true,
		},
		{
			ID:         "torch-dataloader-worker-exited",
			Title:      "DataLoader worker exited unexpectedly",
			Confidence: Possible,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "pytorch",
			Cause: "A DataLoader worker died without saying why; the main process only saw it vanish. " +
				"In a container the usual reason is SIGBUS at a full /dev/shm (look for \"Bus error\" nearby); " +
				"it can also be the kernel's OOM killer (dmesg shows it) or a crash in the dataset code. " +
				"An ordinary exit code (1) means the worker raised: a failed shared-memory write in it ends the same way.",
			Fix: "If a Bus error or an shm message comes with it, give /dev/shm room (see Fix). Otherwise check dmesg for the OOM killer, " +
				"and rerun with num_workers=0 to see the worker's own error.",
			NoSize:   noSizeDataLoader,
			Keywords: []string{"unexpectedly"},
			Patterns: []*regexp.Regexp{
				re(`(?i)DataLoader worker \(pid\(?s?\)?[^)]*\) exited unexpectedly`),
				re(`(?i)DataLoader worker exited unexpectedly`),
				re(`(?i)DataLoader \d+ workers? exits? unexpectedly`),
			},
		},
		{
			ID:         "nccl-posix-fallocate",
			Title:      "NCCL could not reserve a shared-memory segment: /dev/shm is full",
			Confidence: Certain,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "nccl",
			Cause: "NCCL's SHM transport passes data between GPUs of one node through segments in /dev/shm, reserved with posix_fallocate; " +
				"No space left on device means the tmpfs is full. Without NCCL_DEBUG=INFO the job only exits with an NCCL error.",
			Fix:      fixNCCL,
			NoSize:   "this line does not say how much; NCCL's next warning names the segment size",
			Keywords: []string{"posix_fallocate"},
			Patterns: []*regexp.Regexp{re(`(?i)posix_fallocate failed\s*:?\s*No space left on device`)},
			Anchor:   true,
			// A restart near it is shm-restart-leftovers.
			Mark: MarkShmFailed,
		},
		{
			ID:         "nccl-shm-extend",
			Title:      "NCCL could not extend its segment in /dev/shm",
			Confidence: Certain,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "nccl",
			Cause: "NCCL (2.12 and later) creates its SHM transport segments as files /dev/shm/nccl-XXXXXX and could not make one as large as it needs: " +
				"the tmpfs is full.",
			Fix:      fixNCCL,
			Implied:  impliedNCCL,
			Keywords: []string{"failed to extend"},
			Patterns: []*regexp.Regexp{re(`(?i)failed to extend \S*(?:/dev/shm|nccl)\S* to (?P<bytes>\d+) bytes`)},
			Anchor:   true,
			// A restart near it is shm-restart-leftovers.
			Mark: MarkShmFailed,
		},
		{
			ID:         "nccl-shm-segment",
			Title:      "NCCL could not create a shared-memory segment",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "nccl",
			Cause: "NCCL's SHM transport could not create the segment named here in /dev/shm. The warning just before it says why: " +
				"posix_fallocate or \"failed to extend\" with No space left on device means /dev/shm is full (by far the most common case in containers).",
			Fix:      fixNCCL,
			Implied:  impliedNCCL,
			Keywords: []string{"shared memory segment"},
			Patterns: []*regexp.Regexp{re(`(?i)Error while creating shared memory segment (?P<name>\S+) \(size (?P<bytes>\d+)\)`)},
			// Other reasons NCCL gives for the same warning; not the size.
			Unless:         re(`(?i)Cuda failure|Permission denied|Operation not permitted`),
			UnlessKeywords: []string{"cuda failure", "permission denied", "not permitted"},
			UnlessWithin:   3,
			Anchor:         true,
			// A restart near it is shm-restart-leftovers.
			Mark: MarkShmFailed,
		},
		{
			ID:         "nccl-shm-permission",
			Title:      "NCCL may not create files in /dev/shm",
			Confidence: Certain,
			Kind:       KindPermission,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "nccl",
			Cause: "shm_open in /dev/shm was refused: the job's user may not create files there. " +
				"This is not a size problem; a larger /dev/shm does not help.",
			Fix: "Make /dev/shm writable for everyone, sticky, as engines create it (mode 1777, drwxrwxrwt): " +
				"check what is mounted over it (a volume, an emptyDir, a host path) and its mode.",
			NoSize:   "not a size problem",
			Keywords: []string{"permission denied"},
			Patterns: []*regexp.Regexp{re(`(?i)shm_open failed\s*:?\s*Permission denied`)},
		},
		{
			ID:         "nccl-error-near-shm",
			Title:      "NCCL error caused by /dev/shm",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage, EvidenceContext},
			Ecosystem:  "nccl",
			Cause: "NCCL's error code only says that a system call failed; the NCCL warnings next to it show the call: " +
				"creating a segment in /dev/shm, which was full.",
			Fix:      fixNCCL,
			NoSize:   "the error does not say; see the NCCL shm lines next to it",
			Keywords: []string{"ncclsystemerror", "ncclinternalerror", "unhandled system error", "internal error"},
			Patterns: []*regexp.Regexp{
				re(`ncclSystemError|ncclInternalError`),
				re(`(?i)NCCL error.*(?:unhandled system error|internal error)`),
				re(`(?i)unhandled system error|internal error - please report`),
			},
			Near: 12,
		},
		{
			ID:         "python-semlock-enospc",
			Title:      "A POSIX semaphore, lock or shared_memory block could not be created: /dev/shm is full",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMention},
			Cause: "POSIX semaphores are files in /dev/shm: Python's multiprocessing locks, queues and semaphores (billiard's and loky's too, " +
				"and joblib's check that multiprocessing works) are made with sem_open, and multiprocessing.shared_memory blocks are files there as well. " +
				"No space left on device while one is created means the tmpfs is full, " +
				"usually of something else (DataLoader batches, files a crashed job left behind) or of semaphores a pool leaked.",
			Fix:      "Give the container room in /dev/shm (see Fix); ls /dev/shm shows what fills it (sem.* files are semaphores).",
			NoSize:   "a semaphore needs only a page; what fills /dev/shm is something else, often shared tensors or leaked semaphores",
			Keywords: []string{"errno 28", "no space left", "enospc"},
			// The error names no path: a path in /dev/shm is shm-path-enospc's
			// (certain), a path elsewhere another disk.
			Patterns: []*regexp.Regexp{re(`(?i)(?:\[Errno 28\] |\b)No space left on device(?:$|[^:])|\bENOSPC\b`)},
			// The error comes after the frames that create the object, or
			// before them (a logger or Sentry that prints it first).
			Near:     30,
			NearMark: MarkPosixIPC,
		},
		{
			ID:         "posix-ipc-unavailable",
			Title:      "POSIX semaphores cannot be created: /dev/shm is missing or not writable",
			Confidence: Likely,
			Kind:       KindPermission,
			Evidence:   []Evidence{EvidenceMention},
			Cause: "POSIX semaphores (Python's multiprocessing locks and queues, sem_open) are files in /dev/shm. glibc answers sem_open with " +
				"ENOSYS (\"Function not implemented\") when no tmpfs is mounted at /dev/shm — sandboxes, VMs and runtimes that mount none, " +
				"AWS Lambda — and with EACCES or EROFS when it is not writable. It is not a size problem.",
			Fix: "Mount a writable tmpfs at /dev/shm, mode 1777 (drwxrwxrwt), as container engines do; where the platform has none " +
				"(AWS Lambda), use threads instead of processes.",
			NoSize:   "not a size problem",
			Keywords: []string{"function not implemented", "enosys", "permission denied", "eacces", "read-only file system", "erofs"},
			// The error names no path: one that does is about that file.
			Patterns: []*regexp.Regexp{re(`(?i)(?:Function not implemented|\bENOSYS\b|Permission denied|\bEACCES\b|Read-only file system|\bEROFS\b)(?:$|[^:])`)},
			Near:     30,
			NearMark: MarkPosixIPC,
		},
		{
			ID:         "python-shm-write-enospc",
			Title:      "joblib, loky or pandarallel could not write to /dev/shm",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "joblib",
			Cause: "joblib and loky memory-map large arguments in a folder in /dev/shm (when it has room at the start), and pandarallel " +
				"passes every chunk through files in /dev/shm by default; [Errno 28] right after their frames means the tmpfs is full.",
			Fix:      "Give the container room in /dev/shm (see Fix), or see the joblib step to put those files on disk.",
			NoSize:   "the message does not say how much; joblib memory-maps each large argument, pandarallel each chunk",
			Keywords: []string{"errno 28"},
			// No path: see python-semlock-enospc.
			Patterns:      []*regexp.Regexp{re(`(?i)\[Errno 28\] No space left on device(?:$|[^:])`)},
			After:         re(`joblib|loky|pandarallel`),
			AfterKeywords: []string{"joblib", "loky", "pandarallel"},
			AfterWithin:   6,
			YieldsTo:      []string{"python-semlock-enospc"},
		},
		{
			ID:         "shm-path-enospc",
			Title:      "No space left on /dev/shm",
			Confidence: Certain,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMention},
			Cause:      "A write to a file in /dev/shm failed because the tmpfs is full.",
			Fix: "Give the container room in /dev/shm (see Fix), and look at what fills it (du -sh /dev/shm/*): " +
				"files a crashed job left behind count too.",
			NoSize:   "the message does not say how much",
			Keywords: []string{"/dev/shm"},
			Patterns: []*regexp.Regexp{
				re(`(?i)/dev/shm\S*.*(?:No space left on device|ENOSPC|error code 28|errno 28|\(28\))`),
				re(`(?i)(?:No space left on device|ENOSPC).*/dev/shm`),
			},
			Generic: true,
			// "mounting shm tmpfs ... no space left on device" is dockerd out
			// of mount slots, not a full /dev/shm.
			Unless:         re(`(?i)\bmount`),
			UnlessKeywords: []string{"mount"},
			Anchor:         true,
			// A restart near it is shm-restart-leftovers.
			Mark: MarkShmFailed,
		},
		{
			ID:         "nccl-unhandled-system-error",
			Title:      "NCCL failed on a system call, and the log does not say which",
			Confidence: Possible,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "nccl",
			Cause: "NCCL's \"unhandled system error\" (ncclSystemError) only says that a system call failed. Without NCCL_DEBUG=INFO the log does not name it; " +
				"in a container with the default 64 MiB /dev/shm it is most often the shared-memory segment NCCL creates for GPUs of one node " +
				"(vLLM, DeepSpeed and torchrun jobs then just exit 1). It can also be a socket or an InfiniBand call.",
			Fix: "Rerun with NCCL_DEBUG=INFO: NCCL then names the failing call (\"Error while creating shared memory segment\" is /dev/shm). " +
				"Or run gpurun doctor in the container: it measures /dev/shm and says whether NCCL's segments fit. If /dev/shm is the 64 MiB default, give it room (see Fix).",
			NoSize:   "the error does not say; with NCCL_DEBUG=INFO, NCCL names each segment's size",
			Keywords: []string{"unhandled system error", "ncclsystemerror"},
			Patterns: []*regexp.Regexp{
				re(`(?i)unhandled system error`),
				re(`ncclSystemError`),
			},
			// The network or CUDA named before it: another cause.
			Unless:         re(`(?i)NCCL WARN.*(?:socket|connect|NET/IB|NET/Socket|Net\s*:|Cuda failure|timed out)|Watchdog caught collective`),
			UnlessKeywords: []string{"socket", "connect", "net/ib", "net :", "net:", "cuda failure", "timed out", "watchdog caught"},
			UnlessWithin:   500,
			YieldsTo:       []string{"nccl-posix-fallocate", "nccl-shm-extend", "nccl-shm-segment", "nccl-shm-permission", "nccl-error-near-shm"},
		},
		{
			ID:         "ray-object-store-shm",
			Title:      "Ray's object store does not fit in /dev/shm",
			Confidence: Certain,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "ray",
			Cause: "Ray keeps its object store (plasma) in /dev/shm. /dev/shm is smaller than the store, so Ray either put the store in /tmp on disk " +
				"(\"This will harm performance\": every object put and get goes through the disk) or refused to start. " +
				"Containers get a 64 MiB /dev/shm unless told otherwise.",
			Fix:      "Give the container a /dev/shm larger than Ray's object store: Ray asks for more than 30% of the memory (see Fix, and the size Ray names).",
			Implied:  "%s for Ray's object store",
			NoSize:   "Ray names what /dev/shm had, not what it needs; the store defaults to 30% of the memory",
			Keywords: []string{"object store", "exceeds memory available in /dev/shm"},
			Patterns: []*regexp.Regexp{
				re(`(?i)object store is using /tmp instead of /dev/shm because /dev/shm has only (?P<have>\d+) bytes available(?:.*?--shm-size=(?P<gib>\d+(?:\.\d+)?)gb)?`),
				re(`(?i)configured object store size \((?P<gb>\d+(?:\.\d+)?) GB\) exceeds /dev/shm size \((?P<havegb>\d+(?:\.\d+)?) GB\)`),
				re(`(?i)System memory request exceeds memory available in /dev/shm\. The request is for (?P<bytes>\d+) bytes, and the amount available is (?P<have>\d+) bytes`),
			},
		},
		{
			ID:         "triton-python-backend-shm",
			Title:      "Triton's Python backend could not grow its shared-memory region",
			Confidence: Certain,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "triton",
			Cause: "NVIDIA Triton's Python backend passes tensors between the server and each model instance's stub process through a region in /dev/shm " +
				"(64 MiB per instance by default, grown as needed). No space left on device: /dev/shm is full.",
			Fix:      "Give the container room in /dev/shm for every Python model instance (see Fix); --backend-config=python,shm-default-byte-size only lowers the first allocation.",
			Implied:  "%s asked for one model instance's region; every Python model instance has its own",
			NoSize:   "the message does not say how much",
			Keywords: []string{"shared memory pool", "shared memory key"},
			Patterns: []*regexp.Regexp{
				re(`(?i)(?:Failed to increase the shared memory pool size for key '[^']*' to (?P<bytes>\d+) bytes|Unable to initialize shared memory key '[^']*' to requested size \((?P<bytes>\d+) bytes\)).*?Error: No space left on device`),
			},
		},
		{
			ID:         "postgres-dsm-resize",
			Title:      "PostgreSQL could not size a dynamic shared-memory segment in /dev/shm",
			Confidence: Certain,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Cause: "PostgreSQL (dynamic_shared_memory_type = posix, the default on Linux) gives parallel queries, VACUUM and index builds " +
				"segments /PostgreSQL.N in /dev/shm. No space left on device: the container's /dev/shm (64 MiB by default) is full.",
			Fix:      "Give the database container room in /dev/shm (see Fix)." + fixNotGPU,
			Implied:  "%s in one segment; each parallel worker of a query can ask for one",
			NoSize:   "the message does not say how much",
			Keywords: []string{"could not resize shared memory segment"},
			Patterns: []*regexp.Regexp{
				re(`(?i)could not resize shared memory segment "?[^"\s]*"? to (?P<bytes>\d+) bytes: No space left on device`),
			},
		},
		{
			ID:         "oracle-memory-target",
			Title:      "Oracle Database: MEMORY_TARGET does not fit in /dev/shm (ORA-00845)",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Cause: "With Automatic Memory Management (MEMORY_TARGET, MEMORY_MAX_TARGET) Oracle Database on Linux keeps the SGA in files in /dev/shm, " +
				"and refuses to start (ORA-00845) when /dev/shm is smaller than MEMORY_TARGET or not mounted: a container's 64 MiB is far below any " +
				"database's; Oracle XE's images ask for at least 1 GiB.",
			Fix:      "Give the database container a /dev/shm larger than MEMORY_TARGET (see Fix), or lower MEMORY_TARGET." + fixNotGPU,
			NoSize:   "the message does not say how much: /dev/shm must exceed MEMORY_TARGET",
			Keywords: []string{"ora-00845", "memory_target not supported"},
			Patterns: []*regexp.Regexp{re(`(?i)ORA-00845|MEMORY_TARGET not supported on this system`)},
		},
		{
			ID:         "oracle-shm-noexec",
			Title:      "Oracle Database may not map native code from /dev/shm (noexec)",
			Confidence: Likely,
			Kind:       KindPermission,
			Evidence:   []Evidence{EvidenceMessage},
			Cause: "Oracle maps natively compiled PL/SQL and parts of its SGA from files in /dev/shm with execute rights; engines mount a container's " +
				"/dev/shm noexec, so the mmap fails with errno 1 (Operation not permitted): ORA-00600 [pesldl03_MMap], ORA-04030 or ORA-07445 around it.",
			Fix: "Mount /dev/shm without noexec for the database container (docker run --mount type=tmpfs,destination=/dev/shm,tmpfs-mode=1777,tmpfs-size=SIZE " +
				"is exec by default; Kubernetes' Memory emptyDir is too), or set plsql_code_type=INTERPRETED." + fixNotGPU,
			NoSize:   "not a size problem",
			Keywords: []string{"pesldl03_mmap"},
			Patterns: []*regexp.Regexp{re(`(?i)pesldl03_MMap: errno 1\b`)},
		},
		{
			ID:         "triton-shm-region",
			Title:      "Triton's Python backend could not set up its shared-memory region",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "triton",
			Cause: "NVIDIA Triton's Python backend could not create or grow the region in /dev/shm it shares with a model instance's stub process " +
				"(64 MiB per instance by default). The message is cut off before its reason or names none; in a container it is most often a /dev/shm too small for every instance.",
			Fix:      "Give the container room in /dev/shm for every Python model instance (see Fix); --backend-config=python,shm-default-byte-size only lowers the first allocation.",
			NoSize:   "the message is cut off before the size; each Python model instance asks for 64 MiB by default",
			Keywords: []string{"shared memory pool", "shared memory key"},
			Patterns: []*regexp.Regexp{re(`(?i)Failed to increase the shared memory pool size|Unable to initialize shared memory key`)},
			// A reason that is not room.
			Unless:         re(`(?i)\bError: (?:Connection|Timed out|Timeout|Invalid argument)`),
			UnlessKeywords: []string{"error: "},
			YieldsTo:       []string{"triton-python-backend-shm"},
		},
		{
			ID:         "chromium-shm-crash",
			Title:      "A browser (Chrome, Electron, Puppeteer, Playwright, Selenium, Firefox) crashed in a container",
			Confidence: Possible,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "chromium",
			Cause: "Chromium keeps its renderers' and GPU process's shared memory in /dev/shm. In a container with the default 64 MiB, " +
				"a large page fills it: the allocation fails (FATAL:memory.cc \"Out of memory\"; a renderer whose broker could not hand it a " +
				"shared-memory region logs \"Received unexpected number of handles\"), the tab or page crashes, and a driver reports a crashed page. " +
				"A page can also crash for its own reasons (memory of the whole container, a GPU driver).",
			Fix:    "Give the container 1-2 GiB of /dev/shm (see Fix), or launch Chromium with --disable-dev-shm-usage (see the chromium step for its cost).",
			NoSize: "the message does not say how much; Chromium's own advice is 1-2 GiB",
			Keywords: []string{"memory.cc", "page crash", "tab crashed", "render", "unexpected number of handles", "target crashed",
				"not reachable", "has disconnected", "marionette", "devtoolsactiveport", "aw, snap", "process gone", "process-gone", "capture screenshot", "err_insufficient_resources"},
			Patterns: []*regexp.Regexp{
				re(`FATAL:memory\.cc\(\d+\)\] Out of memory\. size=`),
				re(`(?i)session deleted because of page crash|from tab crashed|Page crashed!|\brender(?:er)?(?: process)? (?:has |had |just )?(?:crashed|died|gone away)\b`),
				// The browser process itself died, as its driver reports it:
				// Chrome's DevTools, chromedriver, Puppeteer, geckodriver.
				re(`(?i)\bTarget crashed\b|chrome not reachable|browser has disconnected|Failed to decode response from marionette|` +
					`DevToolsActivePort file doesn't exist|\bAw, Snap\b|render(?:er)?[- ]process[- ]gone|` +
					// A frame the compositor could not produce; a resource the
					// network service had no shared memory for.
					`Unable to capture screenshot|net::ERR_INSUFFICIENT_RESOURCES`),
				// Mojo's broker (broker_posix.cc) got no handle for the
				// shared-memory region it asked the browser for; Windows'
				// broker says "... in broker message", and has no /dev/shm.
				re(`Received unexpected number of handles\s*$`),
			},
		},
		{
			ID:         "chromium-shm-small",
			Title:      "Chromium warns that /dev/shm is too small for its shared memory",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "chromium",
			Cause: "Chromium keeps the shared memory of its renderers in files in a temporary directory, /dev/shm unless --disable-dev-shm-usage, " +
				"and warns when that directory has less room than it wants: with Docker's 64 MiB its pages crash or freeze under load.",
			Fix:      "Give the container 1-2 GiB of /dev/shm (see Fix), or launch Chromium with --disable-dev-shm-usage (see the chromium step for its cost).",
			NoSize:   "Chromium wants at least the room the warning names",
			Keywords: []string{"temporary directory for shared memory"},
			Patterns: []*regexp.Regexp{re(`(?i)Less than \d+\s*MB of free space in temporary directory for shared memory files`)},
		},
		{
			ID:         "ucx-no-resources",
			Title:      "UCX found no transport it could use",
			Confidence: Possible,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMessage},
			Ecosystem:  "ucx",
			Cause: "UCX (under Open MPI, MPICH, NCCL's UCX plugin or a library of its own) found no transport for its workers. " +
				"It leaves its shared-memory transport out when /dev/shm is smaller than UCX_POSIX_SHM_MIN_SIZE, and in a container with a small /dev/shm " +
				"nothing may be left; a missing network device does the same.",
			Fix:      "Give the container room in /dev/shm (see Fix), or see the ucx step; ucx_info -d lists the transports UCX sees.",
			NoSize:   "the message does not say how much",
			Keywords: []string{"no resources are available to initiate"},
			// UCX's name anywhere on the line: its own records, JUCX's
			// UcxException, a ucx_ frame.
			Patterns: []*regexp.Regexp{re(`(?i)ucx.*No resources are available to initiate the operation|No resources are available to initiate the operation.*ucx`)},
		},
		{
			ID:         "shm-df-full",
			Title:      "df shows /dev/shm full",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMention},
			Cause:      "A df listing shows /dev/shm at 100%: nothing more fits in it, and the next write to it fails (ENOSPC, or SIGBUS for memory mapped from it).",
			Fix: "Give the container room in /dev/shm (see Fix), and look at what fills it (du -sh /dev/shm/*): " +
				"files a crashed job left behind count too.",
			NoSize:   "df says what /dev/shm had, not what the job needs",
			Keywords: []string{"100%"},
			Patterns: []*regexp.Regexp{re(`\b100%\s+(?:/dev/shm|/run/shm)\b`)},
			// A kill for memory with it: more room would not help.
			YieldsTo: []string{"oom-kill-shm"},
		},
		{
			ID:         "shm-mention-space",
			Title:      "An error of space next to a mention of /dev/shm",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMention},
			Cause: "A line names the shm filesystem (/dev/shm, a shm size setting, a POSIX shared-memory name or call) and it or a line next to it reports no space, " +
				"not enough memory, or a size exceeded: the tmpfs is full or too small for what the job puts there.",
			Fix: "Give the container room in /dev/shm (see Fix), and look at what fills it (du -sh /dev/shm/*): " +
				"files a crashed job left behind count too.",
			NoSize:     "the lines do not say how much",
			Both:       [2]string{MarkShm, MarkSpace},
			BothWithin: 3,
			// dockerd out of mount slots, the GPU's own memory, the OOM
			// killer (oom-kill-shm, worker-killed), and an mmap refused for
			// want of mappings (mmap-enomem).
			Unless:         re(`(?i)\bmounting\b|CUDA out of memory|CUDA error: out of memory|out of memory: Kill(?:ed)? process|` + mmapENOMEM),
			UnlessKeywords: []string{"mounting", "out of memory", "mmap"},
		},
		{
			ID:         "shm-mention-denied",
			Title:      "An error of permission next to a mention of /dev/shm",
			Confidence: Likely,
			Kind:       KindPermission,
			Evidence:   []Evidence{EvidenceMention},
			Cause: "A line names the shm filesystem and it or a line next to it reports permission denied, an operation not permitted or a read-only file system: " +
				"the job may not create files in /dev/shm. A larger /dev/shm does not help.",
			Fix: "Make /dev/shm a writable tmpfs, mode 1777 (drwxrwxrwt), as engines create it: check what is mounted over it " +
				"(a volume, an emptyDir, a host path, a read-only root) and its mode.",
			NoSize:     "not a size problem",
			Both:       [2]string{MarkShm, MarkDenied},
			BothWithin: 3,
			// A peer's memory reached through /proc or CMA: not /dev/shm
			// (cross-process-memory).
			Unless:         crossProcess(),
			UnlessKeywords: crossProcessKeywords(),
		},
		{
			ID:         "shm-mention-create",
			Title:      "A shared-memory segment could not be created",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMention},
			Cause: "A line names a shared-memory segment or its backing file — a POSIX shm object, a file in /dev/shm, the segment of an MPI or UCX " +
				"shared-memory transport (Open MPI's sm_segment or vader_segment, MPICH's shm allocation, UCX's posix transport) — and it or the next " +
				"line says it could not be created or allocated, without saying why. These segments live in /dev/shm, or in a backing directory set " +
				"for the transport (Open MPI's session directory under /tmp in some builds, UCX_POSIX_DIR); the usual reason in a container is " +
				"that it is too small, full or not writable.",
			Fix: "Give the container room in /dev/shm and check that the job may write there (mode 1777) (see Fix). If the transport keeps its " +
				"segments in another directory, that directory needs the room: Open MPI's btl_sm_backing_directory (4.x: btl_vader_backing_directory), " +
				"UCX_POSIX_DIR. The mpi and ucx steps say how to leave the shared-memory transport out.",
			NoSize:     "the message does not say how much",
			Both:       [2]string{MarkSegment, MarkCreate},
			BothWithin: 1,
			// NCCL's segments have their own signatures (its cuMem segments
			// fail for CUDA's reasons, in NCCL WARN lines too); dockerd's
			// shm mount.
			Unless:         re(`(?i)NCCL WARN|\bmount`),
			UnlessKeywords: []string{"nccl warn", "mount"},
			UnlessWithin:   3,
			// A reason named next to it says more.
			YieldsTo: []string{"shm-mention-space", "shm-mention-denied", "shm-mention-missing"},
		},
		{
			ID:         "shm-mention-missing",
			Title:      "An error of existence next to a mention of /dev/shm",
			Confidence: Possible,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMention},
			Cause: "A line names the shm filesystem and it or a line near it reports no such file or directory (or a file that already exists): " +
				"/dev/shm is not mounted or is hidden by another mount, a segment was removed while in use (a cleaner, a restart), or two processes " +
				"chose the same name. It is a /dev/shm failure less surely than one of space: libraries also report their own bugs this way.",
			Fix: "Check that /dev/shm is a mounted tmpfs with room in the container (gpurun doctor); give it room (see Fix). " +
				"If it is there and has room, look for what removes its files (systemd's RemoveIPC, a cleanup job) and for a library bug.",
			NoSize:         "the lines do not say how much",
			Both:           [2]string{MarkShm, MarkMissing},
			BothWithin:     8,
			Unless:         crossProcess(),
			UnlessKeywords: crossProcessKeywords(),
		},
		{
			ID:         "shm-restart-leftovers",
			Title:      "A restarted container found the pod's /dev/shm full of what its earlier instance left",
			Confidence: Likely,
			Kind:       KindLeftovers,
			Evidence:   []Evidence{EvidenceMessage, EvidenceRestart},
			Cause: "A pod's /dev/shm (the sandbox's tmpfs, or a Memory emptyDir) lives as long as the pod, not the container: the segments a killed " +
				"container left there — NCCL's nccl-*, PyTorch's torch_*, SGLang's sgl_shm_*, Python SharedMemory's psm_* — are still there when the kubelet " +
				"restarts it, so the new instance finds less room (No space left on device) or a name already taken (File exists), dies, and leaves more. " +
				"The log shows both such a failure and a restart (or a /dev/shm already full or holding segments). Docker gives a restarted container a " +
				"fresh /dev/shm; Kubernetes does not. The first instance may have failed for want of room of its own: then see the size fix too.",
			Fix: "gpurun's restart sweep clears it: on nodes set up by gpurun, sweep = \"restart\" (the default) removes, before a container starts again, " +
				"the files its earlier instance left that no live process holds (see Fix). Without gpurun on the node, kubectl delete pod gives the pod a " +
				"fresh /dev/shm. A larger /dev/shm only puts the next failure off.",
			NoSize: "the message does not say how much the earlier instance left; ls -la /dev/shm in the container shows it",
			// A segment that could not be created, extended or written
			// (the Mark of NCCL's, PyTorch's and shm-path-enospc's
			// signatures) or whose name was taken, near a restart.
			Both:       [2]string{MarkShmFailed, MarkRestart},
			BothWithin: podNear,
		},
		{
			ID:         "oom-kill-shm",
			Title:      "Killed for memory while /dev/shm held a large share of it",
			Confidence: Likely,
			Kind:       KindMemory,
			Evidence:   []Evidence{EvidenceOOM, EvidenceMention},
			Cause: "The container (or a process of it) was killed for memory — OOMKilled, exit code 137, the kernel's memory cgroup OOM killer — " +
				"while /dev/shm held a large share of that memory (df, the kernel's shmem-rss, gpurun's Events say how much). tmpfs pages count against " +
				"the memory limit of the container that wrote them and stay counted while the files exist: a full /dev/shm sized at half the limit " +
				"leaves the processes only the other half. The kill itself says nothing about /dev/shm.",
			Fix:        "Lower /dev/shm's size or raise the memory limit so that both fit, and free the segments the job no longer needs (see Fix).",
			NoSize:     "the kill names no size; the lines with it say how much /dev/shm held",
			Both:       [2]string{MarkOOM, MarkShmHeld},
			BothWithin: podNear,
		},
		{
			ID:         "sigbus-in-context",
			Title:      "SIGBUS next to shared memory, a DataLoader, NCCL or MPI",
			Confidence: Likely,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceSIGBUS, EvidenceContext},
			Cause: "A process died of SIGBUS, and the lines around it show shared memory, a PyTorch DataLoader or torchrun, NCCL, MPI, UCX, libfabric or Ray: " +
				"they all map memory from /dev/shm, which the kernel creates lazily, so the first page that does not fit in a full tmpfs kills the process with SIGBUS " +
				"instead of returning an error. A file mapped from a disk that was truncated or failed does the same.",
			Fix: "Give the container room in /dev/shm (see Fix); gpurun doctor in the container shows what fills it. " +
				"The ecosystem's step in Fix says how to make it use less or none.",
			NoSize:   "a SIGBUS names no size",
			Keywords: sigbusKeywords(),
			Patterns: sigbusPatterns(),
			Generic:  true,
			Near:     30,
			NearMark: MarkContext,
			YieldsTo: []string{"torch-dataloader-bus-error"},
		},
		{
			ID:         "sigbus",
			Title:      "A process died of SIGBUS",
			Confidence: Possible,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceSIGBUS},
			Cause: "A process was killed by SIGBUS (a shell's \"Bus error (core dumped)\", a signal handler's \"signal 7\", BUS_ADRERR, exit code -7 or 135). " +
				"In a container the usual cause is a full /dev/shm: shared memory is created at full size but filled lazily, " +
				"and the first page that does not fit kills the process. A file mapped from a disk that was truncated or failed does the same.",
			Fix:      "Run gpurun doctor in the container: it measures /dev/shm and what fills it. If /dev/shm is small or full, give it room (see Fix).",
			NoSize:   "a SIGBUS names no size",
			Keywords: sigbusKeywords(),
			Patterns: sigbusPatterns(),
			Generic:  true,
			YieldsTo: []string{"sigbus-in-context", "torch-dataloader-bus-error"},
		},

		{
			ID:         "shared-memory-error",
			Title:      "An error about shared memory, in words no other signature names",
			Confidence: Possible,
			Kind:       KindSize,
			Evidence:   []Evidence{EvidenceMention},
			Cause: "A line speaks of shared memory (\"shared memory\", \"shm\") and of a failure: run out of, not enough, could not allocate, " +
				"increase its size. On Linux a library's shared memory between processes is a file in /dev/shm (POSIX shm), and in a container " +
				"that tmpfs is 64 MiB unless told otherwise. The words also fit other memories called shared — the GPU's on-chip shared memory, " +
				"System V segments, a database's own shared memory — which the look-alikes below name when their words are there; hence *possible*.",
			Fix:        "Run gpurun doctor in the container: it measures /dev/shm and what fills it. If /dev/shm is small or full, give it room (see Fix).",
			NoSize:     "the line does not say how much",
			Both:       [2]string{MarkShmWords, MarkFailure},
			BothWithin: 0,
			Fallback:   true,
			// The GPU's on-chip shared memory, System V segments and a
			// database's lock table use the same words; so do NCCL's
			// segments that CUDA refused, and dockerd's shm mount.
			Unless:         re(`(?i)(?:` + otherSharedMemory + `)`),
			UnlessKeywords: otherSharedMemoryKeywords(),
			UnlessWithin:   3,
		},

		// Look-alikes: failures read as /dev/shm ones, which they are not.
		// They are reported apart, as what they are.
		{
			ID:    "cuda-out-of-memory",
			Title: "CUDA out of memory: the GPU's memory, not /dev/shm",
			Kind:  KindOther,
			Cause: "The GPU's own memory ran out. /dev/shm is host memory shared between processes; a larger one does not help.",
			Fix: "A smaller batch, gradient checkpointing or sharding, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation, " +
				"or a GPU with more memory.",
			NoSize:   notShm,
			Keywords: []string{"out of memory"},
			Patterns: []*regexp.Regexp{re(`(?i)CUDA out of memory|CUDA error: out of memory|OutOfMemoryError: CUDA`)},
		},
		{
			ID:    "too-many-open-files",
			Title: "Too many open files: the descriptor limit, not /dev/shm's size",
			Kind:  KindOther,
			Cause: "With the default sharing strategy (file_descriptor) each tensor a DataLoader worker or torch.multiprocessing sends is an open file descriptor; " +
				"the process reached its open-files limit (ulimit -n). /dev/shm's size is not the limit.",
			Fix: "Raise the limit (ulimit -n, docker run --ulimit nofile=1048576:1048576), or torch.multiprocessing.set_sharing_strategy(\"file_system\"), " +
				"or keep fewer shared tensors alive (do not hold on to every batch).",
			NoSize:   notShm,
			Keywords: []string{"too many open files", "ancdata"},
			Patterns: []*regexp.Regexp{re(`(?i)Too many open files|received 0 items of ancdata`)},
		},
		{
			ID:       "worker-segfault",
			Title:    "A worker crashed with a segmentation fault",
			Kind:     KindOther,
			Cause:    "A DataLoader worker died of SIGSEGV: a crash in native code (a dataset library, a decoder, PyTorch itself). A full /dev/shm gives SIGBUS, not SIGSEGV.",
			Fix:      "Rerun with num_workers=0 to get the crash in the main process; check the versions of the native libraries the dataset uses.",
			NoSize:   notShm,
			Keywords: []string{"segmentation fault"},
			Patterns: []*regexp.Regexp{re(`(?i)Unexpected segmentation fault encountered in worker|DataLoader worker \([^)]*\) is killed by signal: Segmentation fault`)},
		},
		{
			ID:    "worker-killed",
			Title: "A process was killed (SIGKILL): memory, not /dev/shm",
			Kind:  KindOther,
			Cause: "SIGKILL from the kernel's OOM killer or the container's memory limit (OOMKilled): the host or container ran out of memory. " +
				"/dev/shm's pages count against the container's memory limit, but a full /dev/shm itself gives SIGBUS or ENOSPC, not SIGKILL.",
			Fix:      "dmesg (or kubectl describe pod: OOMKilled) confirms it; lower num_workers, the batch size or cached data, or raise the memory limit.",
			NoSize:   notShm,
			Keywords: []string{"killed", "kill process"},
			Patterns: []*regexp.Regexp{re(`(?i)is killed by signal: Killed|\bOOMKilled\b|Out of memory: Kill(?:ed)? process`)},
			// With /dev/shm holding much of the memory, the kill is
			// oom-kill-shm's.
			YieldsTo: []string{"oom-kill-shm"},
		},
		{
			ID:            "checkpoint-write-failed",
			Title:         "torch.save could not write a checkpoint: that disk, not /dev/shm",
			Kind:          KindOther,
			Cause:         "Saving a checkpoint failed on the file system of its path: full, read-only, over quota or failing. /dev/shm is not involved.",
			Fix:           "df -h on the checkpoint directory; free space, or save elsewhere.",
			NoSize:        notShm,
			Keywords:      []string{"pytorchstreamwriter", "failed with", "cannot be opened"},
			Patterns:      []*regexp.Regexp{re(`PytorchStreamWriter failed writing file|write\(\): fd \d+ failed with|RuntimeError: File \S+ cannot be opened`)},
			After:         re(`torch[/\\]serialization\.py`),
			AfterKeywords: []string{"serialization.py"},
			AfterWithin:   12,
			AfterAround:   true,
		},
		{
			ID:    "nccl-timeout",
			Title: "An NCCL collective timed out",
			Kind:  KindOther,
			Cause: "A collective did not finish in time: a rank hung, died or fell far behind (data loading, uneven work), or the network stalled. " +
				"A timeout is not a /dev/shm failure by itself; if a rank died of one, that rank's own error comes first in its log.",
			Fix:      "Find the rank that stopped first (its log, NCCL_DEBUG=INFO); raise the timeout only when the work is legitimately slow.",
			NoSize:   notShm,
			Keywords: []string{"watchdog caught", "before timing out"},
			Patterns: []*regexp.Regexp{re(`(?i)Watchdog caught collective operation timeout|ran for \d+ milliseconds before timing out`)},
		},
		{
			ID:       "nccl-network",
			Title:    "NCCL lost or could not reach a peer over the network",
			Kind:     KindOther,
			Cause:    "NCCL's socket or InfiniBand transport failed between nodes (interface choice, firewall, fabric errors). /dev/shm is only used between GPUs of one node.",
			Fix:      "Set NCCL_SOCKET_IFNAME to the interface the nodes share, check firewalls and the fabric (ibstat), rerun with NCCL_DEBUG=INFO.",
			NoSize:   notShm,
			Keywords: []string{"nccl warn"},
			Patterns: []*regexp.Regexp{re(`(?i)NCCL WARN\s+(?:NET/\w+\s*:|Net\s*:|socket\w*\s*:|Connect to \S+ failed|Call to connect)`)},
		},
		{
			ID:    "vllm-shm-broadcast-wait",
			Title: "vLLM's shared-memory broadcast queue is waiting for a worker",
			Kind:  KindOther,
			Cause: "vLLM's broadcast queue (a ring buffer in /dev/shm) found no free block: a worker is busy (compilation, quantization) or hung. " +
				"It is not a size problem by itself; if a worker died, its own error (a SIGBUS from a full /dev/shm, say) comes before.",
			Fix:      "Look above for a worker's error; if workers are alive, they are busy or stuck. gpurun doctor in the container rules /dev/shm out.",
			NoSize:   notShm,
			Keywords: []string{"shared memory broadcast block"},
			Patterns: []*regexp.Regexp{re(`(?i)No available shared memory broadcast block found in \d+ seconds?`)},
		},
		{
			ID:    "mmap-enomem",
			Title: "mmap refused with ENOMEM: the process's mappings or address space, not /dev/shm's room",
			Kind:  KindOther,
			Cause: "mmap(2) itself failed with Cannot allocate memory (ENOMEM): the process reached vm.max_map_count (each shared tensor, " +
				"each memory-mapped file is one mapping) or its address-space limit (ulimit -v), or overcommit refused it. A full /dev/shm does not fail " +
				"mmap: it fails the write that fills a page (SIGBUS) or the allocation of the file (No space left on device).",
			Fix: "sysctl vm.max_map_count (a few times its 65530 default; kubelet's allowed sysctls or a privileged init container in Kubernetes), " +
				"ulimit -v unlimited, or keep fewer tensors shared at once.",
			NoSize:   notShm,
			Keywords: []string{"mmap"},
			Patterns: []*regexp.Regexp{re(`(?i)` + mmapENOMEM)},
		},
		{
			ID:    "gpu-shared-memory",
			Title: "The GPU's on-chip shared memory or launch limits, not /dev/shm",
			Kind:  KindOther,
			Cause: "A GPU kernel asked for more on-chip shared memory (or registers, or threads) per block than the GPU has: " +
				"Triton's compiler says \"out of resource: shared memory\", CUDA \"too many resources requested for launch\", " +
				"ptxas (under XLA/JAX too) \"uses too much shared data\", XLA \"Shared memory requested exceeds device resources\". " +
				"This shared memory is on the GPU; /dev/shm is not involved.",
			Fix:      "Smaller block sizes or fewer pipeline stages (num_stages) for that GPU, a kernel built for it, or a GPU with more shared memory per block.",
			NoSize:   notShm,
			Keywords: []string{"out of resource", "too many resources", "launch_out_of_resources", "too much shared data", "exceeds device resources"},
			Patterns: []*regexp.Regexp{re(`(?i)out of resource: shared memory|too many resources requested for launch|ERROR_LAUNCH_OUT_OF_RESOURCES|` +
				`uses too much shared data|Shared memory requested exceeds device resources`)},
		},
		{
			ID:    "cross-process-memory",
			Title: "A process may not reach another's memory (CMA, /proc/PID/fd): ptrace rules or PID namespaces, not /dev/shm",
			Kind:  KindOther,
			Cause: "MPI's and UCX's shared-memory transports copy large messages straight from the peer process's memory (cross-memory attach, " +
				"process_vm_readv/writev, which needs ptrace rights), and UCX's posix transport opens the peer's segment through /proc/PID/fd. " +
				"A container without CAP_SYS_PTRACE, kernel.yama.ptrace_scope, a user namespace or a PID namespace of its own refuses both: " +
				"Permission denied, Operation not permitted, errno 1, or No such file or directory. /dev/shm's size is not involved.",
			Fix: "Open MPI: --mca btl_vader_single_copy_mechanism none (5.x: btl_sm_single_copy_mechanism), or run the container with --cap-add=SYS_PTRACE; " +
				"UCX: UCX_POSIX_USE_PROC_LINK=n, or leave cma out of UCX_TLS; libfabric: FI_SHM_DISABLE_CMA=1; " +
				"or let the ranks share a PID namespace (one container or pod per node).",
			NoSize:   notShm,
			Keywords: crossProcessKeywords(),
			Patterns: []*regexp.Regexp{crossProcess()},
		},
		{
			ID:    "sysv-shm-limit",
			Title: "System V IPC limits (shmget, semget, SHMMAX, SEMMNI), not /dev/shm",
			Kind:  KindOther,
			Cause: "shmget(2) or semget(2) failed: System V shared-memory segments and semaphores are bounded by the kernel's kernel.shmmax, shmall, shmmni " +
				"and kernel.sem (SEMMNI, SEMMNS), and live outside /dev/shm, whose size does not matter here. " +
				"No space left on device from semget means the system's semaphore sets are used up, often by ones a crashed program left.",
			Fix: "Raise the limit the message names (sysctl kernel.shmmax / shmall / shmmni / kernel.sem; ipcs -l shows them), " +
				"remove what crashed programs left (ipcs, ipcrm), or ask for a smaller segment.",
			NoSize:   notShm,
			Keywords: []string{"shmget", "shmmax", "shmall", "shmmni", "kernel.shm", "ipcs -l", "ipcmemorycreate", "semget", "sem_get(", "semmni", "semmns", "kernel.sem", "ipcs -s"},
			Patterns: []*regexp.Regexp{re(`(?i)\bshmget\b|\bSHM(?:MAX|ALL|MNI)\b|kernel\.shm(?:max|all|mni)|ipcs -[ls]|IpcMemoryCreate|\bsemget\b|\bsem_get\(|\bSEMMN[IS]\b|kernel\.sem\b`)},
		},
		{
			ID:       "postgres-lock-table",
			Title:    "PostgreSQL's lock table is full (\"out of shared memory\")",
			Kind:     KindOther,
			Cause:    "PostgreSQL ran out of lock-table entries in its main shared memory, which max_locks_per_transaction sizes. It is not /dev/shm.",
			Fix:      "Raise max_locks_per_transaction (the HINT says so), or take fewer locks per transaction.",
			NoSize:   notShm,
			Keywords: []string{"out of shared memory"},
			Patterns: []*regexp.Regexp{re(`(?i)\b(?:ERROR|WARNING|FATAL):\s+out of shared memory\s*$`)},
		},
	}
}
