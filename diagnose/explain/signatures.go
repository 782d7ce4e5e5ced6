package explain

import (
	"regexp"
	"slices"
	"sync"
)

// Signature is one kind of /dev/shm failure and how to recognise it in a
// log. A line matches when one of Patterns matches it and the conditions
// (After, Unless, Near) hold.
type Signature struct {
	// ID is stable; docs/troubleshooting.md has a section for each.
	ID    string
	Title string
	// Confidence and Kind apply to every match.
	Confidence Confidence
	Kind       Kind
	// Cause says what happened; Fix what to change (Report.Fix has the
	// commands).
	Cause string
	Fix   string
	// Implied describes a size the message names, with %s standing for it
	// ("9.19MiB (9637888 bytes)"); a pattern names a size with a group
	// called "bytes". NoSize is said when the message names none. A group
	// called "errno" adds the error number's name (28: ENOSPC).
	Implied string
	NoSize  string
	// Keywords are lower-case strings one of which every match contains: a
	// cheap test before the patterns run.
	Keywords []string
	// Patterns are tried in order; the first that matches counts.
	Patterns []*regexp.Regexp
	// Generic signatures only count on a line no other signature matched.
	Generic bool
	// After, when set, must have matched this line or one of the
	// AfterWithin lines before it (a traceback frame, say).
	After         *regexp.Regexp
	AfterKeywords []string
	AfterWithin   int
	// Unless, when set, must not have matched this line or one of the
	// UnlessWithin lines before it.
	Unless         *regexp.Regexp
	UnlessKeywords []string
	UnlessWithin   int
	// Near > 0: the line counts only within Near lines (before or after)
	// of a line that an Anchor signature found.
	Near   int
	Anchor bool
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
)

// table is the one signature table. The order matters only for Generic
// signatures, which yield to any other match on the same line.
var table = sync.OnceValue(func() []Signature {
	re := regexp.MustCompile
	return []Signature{
		{
			ID:         "torch-dataloader-bus-error",
			Title:      "PyTorch DataLoader worker killed by SIGBUS: /dev/shm is full",
			Confidence: Certain,
			Kind:       KindSize,
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
			Cause: "PyTorch shares a tensor between processes (DataLoader workers, torch.multiprocessing) by putting it in a POSIX shared-memory " +
				"object, a file /torch_... in /dev/shm, and could not make that file as large as the tensor: the tmpfs is full.",
			Fix:      fixDataLoader + " torch.multiprocessing.set_sharing_strategy(\"file_system\") does not help: it uses /dev/shm too.",
			NoSize:   "the message does not say how much",
			Keywords: []string{"torch_", "shared memory(shm)"},
			Patterns: []*regexp.Regexp{
				re(`(?i)unable to write to file </?torch_[^>]*>(?::\s[^()]*\((?P<errno>\d+)\))?`),
				re(`(?i)unable to allocate shared memory\(shm\) for file(?: </?torch_[^>]*>)?(?::\s[^()]*\((?P<errno>\d+)\))?`),
			},
		},
		{
			ID:         "torch-dataloader-queue-empty",
			Title:      "DataLoader queue ran dry (_queue.Empty) after its worker died",
			Confidence: Likely,
			Kind:       KindSize,
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
		},
		{
			ID:         "torch-dataloader-worker-exited",
			Title:      "DataLoader worker exited unexpectedly",
			Confidence: Possible,
			Kind:       KindSize,
			Cause: "A DataLoader worker died without saying why; the main process only saw it vanish. " +
				"In a container the usual reason is SIGBUS at a full /dev/shm (look for \"Bus error\" nearby); " +
				"it can also be the kernel's OOM killer (dmesg shows it) or a crash in the dataset code.",
			Fix: "If a Bus error or an shm message comes with it, give /dev/shm room (see Fix). Otherwise check dmesg for the OOM killer, " +
				"and rerun with num_workers=0 to see the worker's own error.",
			NoSize:   noSizeDataLoader,
			Keywords: []string{"unexpectedly"},
			Patterns: []*regexp.Regexp{
				re(`(?i)DataLoader worker \(pid\(?s?\)?[^)]*\) exited unexpectedly`),
				re(`(?i)DataLoader worker exited unexpectedly`),
				re(`(?i)DataLoader \d+ workers? exits? unexpectedly`),
			},
			// "with exit code 1": the worker raised an exception; no signal.
			Unless:         re(`(?i)exited unexpectedly with exit code`),
			UnlessKeywords: []string{"exit code"},
		},
		{
			ID:         "nccl-posix-fallocate",
			Title:      "NCCL could not reserve a shared-memory segment: /dev/shm is full",
			Confidence: Certain,
			Kind:       KindSize,
			Cause: "NCCL's SHM transport passes data between GPUs of one node through segments in /dev/shm, reserved with posix_fallocate; " +
				"No space left on device means the tmpfs is full. Without NCCL_DEBUG=INFO the job only exits with an NCCL error.",
			Fix:      fixNCCL,
			NoSize:   "this line does not say how much; NCCL's next warning names the segment size",
			Keywords: []string{"posix_fallocate"},
			Patterns: []*regexp.Regexp{re(`(?i)posix_fallocate failed\s*:?\s*No space left on device`)},
			Anchor:   true,
		},
		{
			ID:         "nccl-shm-extend",
			Title:      "NCCL could not extend its segment in /dev/shm",
			Confidence: Certain,
			Kind:       KindSize,
			Cause: "NCCL (2.12 and later) creates its SHM transport segments as files /dev/shm/nccl-XXXXXX and could not make one as large as it needs: " +
				"the tmpfs is full.",
			Fix:      fixNCCL,
			Implied:  impliedNCCL,
			Keywords: []string{"failed to extend"},
			Patterns: []*regexp.Regexp{re(`(?i)failed to extend \S*(?:/dev/shm|nccl)\S* to (?P<bytes>\d+) bytes`)},
			Anchor:   true,
		},
		{
			ID:         "nccl-shm-segment",
			Title:      "NCCL could not create a shared-memory segment",
			Confidence: Likely,
			Kind:       KindSize,
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
		},
		{
			ID:         "nccl-shm-permission",
			Title:      "NCCL may not create files in /dev/shm",
			Confidence: Certain,
			Kind:       KindPermission,
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
			Title:      "Python multiprocessing could not create a lock: /dev/shm is full",
			Confidence: Likely,
			Kind:       KindSize,
			Cause: "Python's multiprocessing locks, queues and semaphores (and joblib's) are POSIX semaphores, files in /dev/shm; " +
				"[Errno 28] while creating one means the tmpfs is full, usually of other shared memory, such as DataLoader batches.",
			Fix:           "Give the container room in /dev/shm (see Fix).",
			NoSize:        "a semaphore needs only a page; what fills /dev/shm is something else, often shared tensors",
			Keywords:      []string{"errno 28"},
			Patterns:      []*regexp.Regexp{re(`(?i)\[Errno 28\] No space left on device`)},
			After:         re(`SemLock|synchronize\.py|joblib`),
			AfterKeywords: []string{"semlock", "synchronize.py", "joblib"},
			AfterWithin:   6,
		},
		{
			ID:         "shm-path-enospc",
			Title:      "No space left on /dev/shm",
			Confidence: Certain,
			Kind:       KindSize,
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
		},
	}
})
