package explain

import (
	"bytes"
	"regexp"
	"slices"
	"sync"
	"unicode/utf8"
)

// Evidence is a kind of evidence a signature rests on; a finding lists
// the kinds it rests on (Finding.Evidence), and confidence follows from
// which kinds agree.
type Evidence string

// The kinds of evidence.
const (
	// EvidenceMessage: a library's own message about its shared memory
	// (NCCL, PyTorch, Ray, Triton, PostgreSQL, Chromium, ...).
	EvidenceMessage Evidence = "message"
	// EvidenceMention: a mention of the shm filesystem (its path, a size
	// flag or setting of Docker, compose, Kubernetes or a library, a
	// POSIX shm name or call, a shared-memory segment's name wherever its
	// backing file is, a POSIX semaphore's creation) in or next to a line
	// with an error of space, existence, permission or creation.
	EvidenceMention Evidence = "mention"
	// EvidenceSIGBUS: SIGBUS in any of its spellings (a shell's "Bus
	// error (core dumped)", a signal handler's "signal 7", BUS_ADRERR,
	// an exit status of -7 or 135 as a parent, a shell or an engine
	// reports it, a launcher's "killed by signal 7").
	EvidenceSIGBUS Evidence = "sigbus"
	// EvidenceContext: a DataLoader, torch elastic, vLLM, NCCL, MPI, UCX,
	// libfabric, Ray or shared-memory context near the line: frames,
	// paths, launchers.
	EvidenceContext Evidence = "context"
	// EvidenceRestart: the container ran before in the same pod, or its
	// /dev/shm was already full when it started: kubectl logs --previous,
	// the kubelet's Back-off restarting failed container, CrashLoopBackOff,
	// a restart count above 0 (kubectl describe's Restart Count, kubectl
	// get pods' RESTARTS), df showing /dev/shm at 100%, an ls of /dev/shm
	// listing NCCL's, PyTorch's, SGLang's or Python's segments, gpurun's
	// ShmSwept Event.
	EvidenceRestart Evidence = "restart"
	// EvidenceOOM: the container or a process of it was killed for memory:
	// OOMKilled, kubectl describe's Exit Code 137 under Terminated, a
	// shell's Killed with exit code 137, the kernel's OOM killer, gpurun's
	// OOM Event.
	EvidenceOOM Evidence = "oom-kill"
)

// The marks signatures refer to (Signature.Mark, NearMark, Both). The
// evidence vocabulary sets them on the lines it recognises; a signature's
// own matches set its Mark.
const (
	// MarkAnchor: an NCCL shared-memory line or a write to /dev/shm that
	// failed for room (Signature.Anchor sets it).
	MarkAnchor = "anchor"
	// MarkShm: a mention of the shm filesystem.
	MarkShm = "shm"
	// MarkSegment: a shared-memory segment's name or backing file: a
	// POSIX shm call, a library's segment name, a file in /dev/shm, an
	// MPI or UCX shared-memory transport's segment (not a size setting or
	// the bare directory).
	MarkSegment = "segment"
	// MarkSpace, MarkMissing, MarkDenied, MarkCreate: an error of space,
	// of existence, of permission, of creation (that names no reason).
	MarkSpace   = "space"
	MarkMissing = "missing"
	MarkDenied  = "denied"
	MarkCreate  = "create"
	// MarkContext: a shm mention, or a DataLoader, NCCL, MPI, UCX,
	// libfabric, Ray or multiprocessing context.
	MarkContext = "context"
	// MarkPosixIPC: the creation of a POSIX semaphore, lock or
	// shared-memory object, which live in /dev/shm: sem_open, Python
	// multiprocessing's SemLock and its synchronize.py and shared_memory.py
	// frames (billiard's and loky's copies too), joblib's semaphore check.
	MarkPosixIPC = "posix-ipc"
	// MarkShmWords: the words "shared memory" or "shm", whatever memory
	// they name.
	MarkShmWords = "shm-words"
	// MarkFailure: a word of failure or shortage: out of, not enough,
	// failed, unable, could not, increase.
	MarkFailure = "failure"
	// MarkRestart: a restart of the container, or a /dev/shm already full
	// or holding segments when it started (EvidenceRestart).
	MarkRestart = "restart"
	// MarkShmFailed: a segment in /dev/shm that could not be created,
	// extended or written for want of room (the Mark of NCCL's, PyTorch's
	// and shm-path-enospc's signatures), or whose name was already taken
	// (File exists).
	MarkShmFailed = "shm-failed"
	// MarkOOM: a kill for memory (EvidenceOOM).
	MarkOOM = "oom"
	// MarkShmHeld: /dev/shm held a large share of the memory: df showing
	// at least shmHeldMin used on /dev/shm, the kernel's OOM report with
	// at least that much shmem-rss, gpurun's ShmNearMemoryLimit Event, or
	// its OOM Event with a quarter of the limit or more in /dev/shm.
	MarkShmHeld = "shm-held"
	// MarkKilled: a shell's report of a process killed (SIGKILL), and
	// MarkTerminated: kubectl describe's State or Last State: Terminated;
	// the exit code 137 that follows them is a kill for memory.
	MarkKilled     = "killed"
	MarkTerminated = "terminated"
)

// Ecosystems returns the ecosystems explain recognises from a log's
// context, in the order a report lists them (Report.Ecosystems); each
// has its own steps in a fix (fix.go).
func Ecosystems() []string {
	return []string{"pytorch", "nccl", "mpi", "ucx", "ray", "chromium", "joblib", "triton"}
}

// ecosystemIndex is e's index in Ecosystems.
func ecosystemIndex(e string) int {
	i := slices.Index(Ecosystems(), e)
	if i < 0 {
		panic("explain: unknown ecosystem " + e)
	}
	return i
}

// markDef is one word of the evidence vocabulary: a line holding one of
// Keywords that Pattern, when set, matches sets Marks, and
// shows Ecosystem's context. A context needs no pattern: its keywords
// are specific enough, and most lines of a training log hold one.
type markDef struct {
	Marks     []string
	Ecosystem string
	// Keywords and Pattern are in lower case: Pattern is matched against
	// the line in lower case (ASCII), which spares the regexp case
	// folding.
	Keywords []string
	Pattern  *regexp.Regexp
	// Check, when set, must also hold for the whole line in lower case:
	// a number on it that a pattern cannot compare (df's Used column).
	Check func(lower []byte) bool
	// Requires, when set, is a mark that must have been set on this line
	// or within Within lines before it (an exit code under kubectl's
	// Terminated, after a shell's Killed).
	Requires string
	Within   int
	// Event says the word reads gpurun's own Events: on an Event's line
	// (ownEvent) only such words set marks.
	Event bool
}

// vocabulary is the evidence vocabulary: what a line mentions (the shm
// filesystem, an ecosystem's context) and which error it reports. None
// of it is a finding by itself; the signatures combine the marks.
var vocabulary = sync.OnceValue(func() []markDef {
	re := regexp.MustCompile
	return append([]markDef{
		// The shm filesystem: its path, the size settings of Docker,
		// compose and Kubernetes (dshm is the usual name of the emptyDir
		// mounted there), POSIX shm calls and the names of libraries'
		// segments in it. Most are their keywords; a pattern checks the
		// few that need more.
		{
			Marks:    []string{MarkShm, MarkContext},
			Keywords: []string{"/dev/shm", "/run/shm", "--shm-size", "shm_size", "shm-size", "shmsize", "--ipc=host", "--ipc host"},
		},
		{
			Marks:    []string{MarkShm, MarkContext},
			Keywords: []string{"dev/shm", "dshm"},
			Pattern:  re(`(?:^|[\s'"` + "`" + `(])dev/shm\b|\bdshm\b`),
		},
		// The segments themselves: POSIX shm calls, libraries' segment
		// names, and the shared-memory transports of MPI and UCX, whose
		// backing files may be elsewhere than /dev/shm (Open MPI's
		// session directory, UCX_POSIX_DIR).
		{
			Marks: []string{MarkShm, MarkContext, MarkSegment},
			Keywords: []string{"shm_open", "shm_unlink", "posix shm", "posix shared memory", "nccl-shm", "triton_python_backend_shm",
				"mm_posix", "md posix", "posix/memory", "ucx_shm_posix", "mm_iface", "uct_mm_", "intel_mpi_", "vader_segment", "sm_segment", "shmem: mmap",
				"shmem: posix", "shmem_mmap", "shmem_posix", "mpl_shm", "mpidu_shm", "mpidu_init_shm", "mpiu_shmw", "mpidi_ch3i_seg", "psm2_shm"},
		},
		{
			Marks:    []string{MarkShm, MarkContext, MarkSegment},
			Keywords: []string{"torch_", "psm_", "postgresql."},
			Pattern:  re(`/torch_\d+_|\bpsm_[0-9a-f]{6,}|/postgresql\.\d+`),
		},
		{
			Marks:    []string{MarkSegment},
			Keywords: []string{"/dev/shm/", "/run/shm/"},
			Pattern:  re(`/(?:dev|run)/shm/[\w.-]`),
		},
		// POSIX semaphores and shared-memory objects being created:
		// their calls and the frames that create them. A traceback may
		// print its error before these frames or after them.
		{
			Marks: []string{MarkPosixIPC},
			Keywords: []string{"sem_open", "named semaphore", "named_semaphore", "semlock", "synchronize.py", "shared_memory.py",
				"_multiprocessing_helpers"},
		},
		// The words shared memory and shm, and the words of a failure:
		// shared-memory-error wants both on one line.
		{
			Marks:    []string{MarkShmWords},
			Keywords: []string{"shared mem", "shared-mem", "sharedmem"},
		},
		{
			Marks:    []string{MarkShmWords},
			Keywords: []string{"shm"},
			Pattern:  re(`\bshm\b`),
		},
		{
			Marks: []string{MarkFailure},
			Keywords: []string{"out of", "run out", "ran out", "runs out", "exhausted", "not enough", "insufficient", "increase", "too small",
				"is full", "no space", "exceed", "fail", "unable", "cannot", "can't", "could not", "couldn't"},
		},
		// An error of space: the tmpfs is full or too small.
		{
			Marks: []string{MarkSpace},
			Keywords: []string{"no space left", "enospc", "[errno 28]", "error code 28", "(28)", "out of space", "ran out of space",
				"ran out of memory", "insufficient", "exceed", "filling up", "cannot allocate memory", "enomem", "out of memory", "too small"},
		},
		// A size requirement not met: "needs to be at least 1G".
		{
			Marks:    []string{MarkSpace},
			Keywords: []string{"at least"},
			Pattern:  re(`\b(?:needs?|must|has|have|should) (?:to )?be at least\b|\brequires? at least\b|\bat least \S+ (?:is |are )?(?:required|needed)\b`),
		},
		{
			Marks:    []string{MarkSpace},
			Keywords: []string{"errno", "enough", "is full"},
			Pattern:  re(`errno[ =:]*28\b|\benough\b[^.;:]{0,40}\b(?:space|memory|room)\b|\bis full\b`),
		},
		// An error of creation that names no reason: a segment could not
		// be created or allocated.
		{
			Marks: []string{MarkCreate},
			Keywords: []string{"could not be created", "could be created", "could not create", "couldn't create", "cannot create", "can't create",
				"unable to create", "failed to create", "error creating", "creation failed", "unable to allocate", "failed to allocate",
				"could not allocate", "allocation failed"},
		},
		// An error of existence: /dev/shm or a segment in it is not there
		// (not mounted, removed early) or already is.
		{
			Marks:    []string{MarkMissing},
			Keywords: []string{"no such file or directory", "enoent", "[errno 2]", "filenotfounderror", "file exists", "eexist", "does not exist", "not mounted"},
		},
		{
			Marks:    []string{MarkMissing},
			Keywords: []string{"errno"},
			Pattern:  re(`errno[ =:]*2\b`),
		},
		// An error of permission: /dev/shm is not writable.
		{
			Marks: []string{MarkDenied},
			Keywords: []string{"permission denied", "eacces", "operation not permitted", "eperm", "read-only file system", "erofs",
				"[errno 13]", "[errno 30]", "lack of access"},
		},
		// A security module's refusal: AppArmor's and SELinux's audit
		// records.
		{
			Marks:    []string{MarkDenied},
			Keywords: []string{"apparmor=", "avc:"},
			Pattern:  re(`apparmor="denied"|\bavc:\s+denied\b`),
		},
		{
			Marks:    []string{MarkDenied},
			Keywords: []string{"errno"},
			Pattern:  re(`errno[ =:]*(?:13|30)\b`),
		},

		// Ecosystems: their frames, paths and launchers are context for a
		// SIGBUS, and pick the steps of the fix.
		{
			Marks: []string{MarkContext}, Ecosystem: "pytorch",
			Keywords: []string{"dataloader", "utils/data", "utils.data", "torch.multiprocessing", "share_memory", "torch.distributed", "torchrun", "elastic.multiprocessing", "childfailederror",
				// torch elastic's record of a dead worker, and the engines
				// and launchers that run ranks of one node side by side.
				"local_rank", "vllm", "sglang", "deepspeed"},
		},
		{
			Marks: []string{MarkContext}, Ecosystem: "nccl",
			Keywords: []string{"nccl"},
		},
		{
			Marks: []string{MarkContext}, Ecosystem: "mpi",
			Keywords: []string{"mpirun", "mpiexec", "mpi_", "libmpi", "openmpi", "open mpi", "mpich", "intel mpi", "mca_", "vader", "hydra_", "bad termination", "libfabric",
				"shmem: mmap", "shmem: posix", "mpl_shm", "mpidu_", "mpiu_shmw", "psm2"},
		},
		// Open MPI's own prefix, not the "ompi" in "compiled".
		{
			Marks: []string{MarkContext}, Ecosystem: "mpi",
			Keywords: []string{"ompi"},
			Pattern:  re(`(?:^|[^a-z])ompi(?:[^a-z]|$)`),
		},
		{
			Marks: []string{MarkContext}, Ecosystem: "ucx",
			Keywords: []string{"ucx", "uct_", "ucp_", "ucs_"},
		},
		{
			Marks: []string{MarkContext}, Ecosystem: "ray",
			Keywords: []string{"raylet", "ray::", "/ray/", "plasma", "object store", "rayworker"},
		},
		{
			Marks: []string{MarkContext}, Ecosystem: "joblib",
			Keywords: []string{"joblib", "loky", "pandarallel"},
		},
		{
			// Python's multiprocessing: its locks, queues and
			// shared_memory blocks live in /dev/shm; so do the batches of
			// DALI's parallel external source.
			Marks:    []string{MarkContext},
			Keywords: []string{"multiprocessing", "semlock", "shared_memory", "nvidia.dali", "nvidia/dali"},
		},
		{
			Marks: []string{MarkContext}, Ecosystem: "chromium",
			Keywords: []string{"chrome", "chromium", "selenium", "puppeteer", "playwright", "electron", "cypress", "webdriver", "tab crashed", "page crash"},
		},
		{
			Marks: []string{MarkContext}, Ecosystem: "triton",
			Keywords: []string{"triton_python_backend", "tritonserver", "python backend"},
		},
	}, kubeVocabulary()...)
})

// jsonMessage reads the message out of a JSON record, one a line, as
// Docker's json-file driver ({"log":"...","stream":"stderr",...}) and log
// exports (Loki, CloudWatch: "line", "message", "msg") write them. It
// appends the unescaped message to buf; ok is false for any other line.
func jsonMessage(line, buf []byte) (msg []byte, ok bool) {
	t := bytes.TrimSpace(line)
	if len(t) < 8 || t[0] != '{' || t[len(t)-1] != '}' {
		return nil, false
	}
	for _, key := range [...]string{`"log"`, `"message"`, `"msg"`, `"line"`, `"MESSAGE"`} {
		i := bytes.Index(t, []byte(key))
		if i < 0 {
			continue
		}
		v := bytes.TrimLeft(t[i+len(key):], " \t")
		if len(v) == 0 || v[0] != ':' {
			continue
		}
		v = bytes.TrimLeft(v[1:], " \t")
		if len(v) == 0 || v[0] != '"' {
			continue
		}
		if msg, ok := unquoteJSON(v[1:], buf); ok {
			return msg, true
		}
	}
	return nil, false
}

// unquoteJSON appends to buf the JSON string that starts at s (after its
// opening quote) and ends at the first unescaped quote.
func unquoteJSON(s, buf []byte) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return buf, true
		case c != '\\':
			buf = append(buf, c)
			continue
		}
		if i++; i >= len(s) {
			return nil, false
		}
		switch s[i] {
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'b', 'f':
			buf = append(buf, ' ')
		case 'u':
			if i+4 >= len(s) {
				return nil, false
			}
			r := rune(0)
			for _, h := range s[i+1 : i+5] {
				switch {
				case '0' <= h && h <= '9':
					r = r<<4 | rune(h-'0')
				case 'a' <= h && h <= 'f':
					r = r<<4 | rune(h-'a'+10)
				case 'A' <= h && h <= 'F':
					r = r<<4 | rune(h-'A'+10)
				default:
					return nil, false
				}
			}
			buf = utf8.AppendRune(buf, r)
			i += 4
		default: // \" \\ \/
			buf = append(buf, s[i])
		}
	}
	return nil, false
}

// kubectlPrefix is the length of the prefix kubectl logs --prefix puts
// before each line ("[pod/name/container] "), 0 when there is none.
func kubectlPrefix(line []byte) int {
	if !bytes.HasPrefix(line, []byte("[pod/")) {
		return 0
	}
	i := bytes.IndexByte(line, ']')
	if i < 0 || bytes.IndexByte(line[:i], ' ') >= 0 {
		return 0
	}
	if i+1 < len(line) && line[i+1] == ' ' {
		i++
	}
	return i + 1
}

// logPrefix is the length of the prefix a logger puts before a line:
// timestamps, bracketed fields ("[rank0]:", "[2021-06-01 ...]"), a
// process tag ("(pid=4496)"), a compose service ("worker_1  | "), a
// syslog head ("Jun  1 06:43:28 host proc[9262]: ") and a level name. A
// line wrapped by such a logger carries it again on its continuation; an
// indented continuation's spaces count too.
func logPrefix(line []byte) int {
	i := 0
	for i < len(line) {
		j := i
		for j < len(line) && (line[j] == ' ' || line[j] == '\t') {
			j++
		}
		k := prefixField(line[j:])
		if k == 0 {
			return j
		}
		i = j + k
	}
	return i
}

// prefixField is the length of one logger field at the start of b, 0 when
// b does not start with one.
func prefixField(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	switch b[0] {
	case '[', '(', '<':
		closer := map[byte]byte{'[': ']', '(': ')', '<': '>'}[b[0]]
		end := bytes.IndexByte(b, closer)
		if end < 0 || end > 64 || bytes.ContainsAny(b[1:end], "/\\\"'") && !digitsFirst(b[1:end]) {
			return 0
		}
		end++
		if end < len(b) && b[end] == ':' {
			end++
		}
		return end
	}
	// A field of digits and date or time punctuation: 2021-06-01,
	// 06:43:28.473, 20211130-10:51:00, 1591868130.001133.
	n := 0
	for n < len(b) && (b[n] >= '0' && b[n] <= '9' || bytes.IndexByte([]byte("-:.,/TZ+"), b[n]) >= 0) {
		n++
	}
	if n >= 6 && digitsFirst(b[:n]) {
		return n
	}
	for _, lvl := range [...]string{"ERROR", "WARNING", "WARN", "INFO", "DEBUG", "CRITICAL", "FATAL", "UTC"} {
		if bytes.HasPrefix(b, []byte(lvl)) && (len(b) == len(lvl) || bytes.IndexByte([]byte(" :]|-"), b[len(lvl)]) >= 0) {
			n := len(lvl)
			for n < len(b) && bytes.IndexByte([]byte(":]|-"), b[n]) >= 0 {
				n++
			}
			return n
		}
	}
	// A compose service: "name  | ".
	if end := bytes.Index(b, []byte(" | ")); end > 0 && end < 64 && bytes.IndexByte(bytes.TrimRight(b[:end], " "), ' ') < 0 {
		return end + 3
	}
	return 0
}

// digitsFirst reports whether b starts with two digits.
func digitsFirst(b []byte) bool {
	return len(b) >= 2 && b[0] >= '0' && b[0] <= '9' && b[1] >= '0' && b[1] <= '9'
}
