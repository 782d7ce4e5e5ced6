package explain

import (
	"bytes"
	"regexp"
	"strconv"

	"github.com/gpurun/gpurun/policy"
)

// What Kubernetes users paste beside a job's log: kubectl describe pod
// (its Last State block, its Restart Count, its Events), kubectl get pods
// and get events, the kubectl logs --previous command, df and ls of
// /dev/shm, the kernel's OOM report, and gpurun's own Events. None of it
// is a /dev/shm failure by itself: it tells that the container ran before
// in the same pod (whose /dev/shm outlives it), or that it was killed for
// memory while /dev/shm held much of it.

const (
	// podNear is how many lines apart the evidence about one pod may be:
	// kubectl describe's Last State block and its Events, a pasted
	// --previous log and the commands' output around it.
	podNear = 500
	// shmHeldMin is how much /dev/shm must hold, as df or the kernel's
	// OOM report say it, to count as a large share of a container's
	// memory (MarkShmHeld): the report names no limit to compare with.
	shmHeldMin = policy.GiB
)

// kubeVocabulary is the evidence vocabulary of Kubernetes and of
// gpurun's Events (see evidence.go's vocabulary). A word with Requires
// comes after the word that sets its mark: the marks of one line are set
// in this order.
func kubeVocabulary() []markDef {
	re := regexp.MustCompile
	// A segment's name in a listing: NCCL's nccl-XXXXXX (mkstemp's six
	// characters; before 2.12 nccl-shm-recv-… and nccl-shm-send-…),
	// PyTorch's torch_PID_RANDOM_N, SGLang's sgl_shm_…, Python
	// SharedMemory's psm_XXXXXXXX; ls -l's columns or du's size before it.
	name := `(?:/dev/shm/)?(?:nccl-(?:[a-z0-9]{6}|shm-(?:recv|send)-[\w-]+)|torch_\d+_\d+(?:_\d+)?|sgl_shm_[\w.-]+|psm_[0-9a-f]{8})`
	lsl := `[-l][-rwxst]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+[\d.,]+[kmgtp]?\s+\S+\s+\d+\s+[\d:]+\s+`
	du := `[\d.,]+[kmgtp]?\s+`
	// gpurun's ShmOOMKilled Event: "container trainer was OOM-killed with
	// 7.59GiB of its 16GiB memory limit in /dev/shm (at the last sample,
	// 12s before)"; "of its pod's 16GiB memory limit", "of the 16GiB memory
	// limit of cgroup …", "of the host's 64GiB of memory", or no limit.
	oom := re(`oom-killed with (\S+) (?:of (?:its (?:pod's )?|the (?:host's )?)(\S+) (?:memory limit|limit|of memory)\b.*?)?in /dev/shm`)
	return []markDef{
		// A restart: the kubelet's back-off, CrashLoopBackOff, a restart
		// count above 0, the command that prints the earlier instance's
		// log. Each pattern starts with a literal, which the regexp finds
		// at once.
		{Marks: []string{MarkRestart}, Keywords: []string{"restart"}, Pattern: re(`back-off (?:\S+ )?restarting failed container`)},
		{Marks: []string{MarkRestart}, Keywords: []string{"restart"}, Pattern: re(`restart ?count"?:\s*[1-9]`)},
		{Marks: []string{MarkRestart}, Keywords: []string{"crashloop"}},
		{Marks: []string{MarkRestart}, Keywords: []string{"kubectl logs"}, Pattern: re(`kubectl logs\b[^|;&]*\s(?:--previous|-p)\b`)},
		// gpurun's Events (ownEvent): facts about the pod's /dev/shm. On
		// their lines only these words set marks. ShmSwept: an earlier
		// instance left files there; ShmNearMemoryLimit: /dev/shm holds
		// much of the memory; ShmOOMKilled: the kill, and how much
		// /dev/shm held then.
		{Marks: []string{MarkRestart}, Keywords: []string{"shmswept"}, Event: true},
		{Marks: []string{MarkShmHeld}, Keywords: []string{"shmnearmemorylimit"}, Event: true},
		{Marks: []string{MarkShmHeld}, Keywords: []string{"killed"}, Pattern: oom, Check: func(l []byte) bool { return gpurunOOMHeld(oom, l) }, Event: true},
		{Marks: []string{MarkOOM}, Keywords: []string{"killed"}, Pattern: re(`oom(?:killed|-killed with)\b`), Event: true},
		// A segment's name already taken: a File exists that names it.
		{
			Marks:    []string{MarkShmFailed},
			Keywords: []string{"file exists", "eexist"},
			Pattern: re(`(?:file exists|\beexist\b).*(?:/dev/shm/|/psm_|/torch_|\bnccl-|\bsgl_shm_)|` +
				`(?:/dev/shm/|/psm_|\bsgl_shm_)\S*.*(?:file exists|\beexist\b)`),
		},
		// /dev/shm already holding segments: an ls or du of them, or df
		// at 100%.
		{
			Marks:    []string{MarkRestart},
			Keywords: []string{"nccl-", "torch_", "psm_"},
			Pattern:  re(`^\s*(?:` + lsl + `|` + du + `)?` + name + `(?:\s+` + name + `)*\s*$`),
		},
		{Marks: []string{MarkRestart}, Keywords: []string{"100%"}, Pattern: re(`\b100%\s+/(?:dev|run)/shm/?\s*$`)},
		// /dev/shm holding much of the memory: df's Used column, the
		// kernel's shmem-rss (gpurun's Events above).
		{
			Marks:    []string{MarkShmHeld},
			Keywords: []string{"/dev/shm", "/run/shm"},
			Pattern:  re(`%\s+/(?:dev|run)/shm/?\s*$`),
			Check:    dfHeld,
		},
		{Marks: []string{MarkShmHeld}, Keywords: []string{"killed"}, Pattern: re(`killed process \d+.*\bshmem-rss:\s*[\d,]+\s*kb`), Check: shmemRSSHeld},
		// A kill for memory: the kubelet's OOMKilled (above, with
		// gpurun's), the kernel's OOM killer (Node Problem Detector's
		// OOMKilling Event quotes it); exit code 137 under kubectl's
		// Terminated or after a shell's Killed.
		{Marks: []string{MarkOOM}, Keywords: []string{"killed", "kill process"}, Pattern: re(`out of memory: kill(?:ed)? process\b`)},
		{Marks: []string{MarkTerminated}, Keywords: []string{"terminated"}, Pattern: re(`state:\s+terminated\b`)},
		{Marks: []string{MarkOOM}, Keywords: []string{"exit code"}, Pattern: re(`^\s*exit code:\s+137\s*$`), Requires: MarkTerminated, Within: 3},
		{Marks: []string{MarkKilled}, Keywords: []string{"killed"}, Pattern: re(`killed(?:\s|$)`)},
		{
			Marks:    []string{MarkOOM},
			Keywords: []string{"exit code", "exited with", "exit status"},
			Pattern:  re(`exit(?:ed with)? (?:code|status):?\s*137\b`),
			Requires: MarkKilled,
			Within:   3,
		},
	}
}

// dfHeld reports whether a df line of /dev/shm (in lower case) shows at
// least shmHeldMin used. Its Used column is two before Use%, whatever
// comes first (a filesystem, df -T's type, nothing when df wrapped a long
// name onto the line before).
func dfHeld(lower []byte) bool {
	f := bytes.Fields(lower)
	pct := len(f) - 2
	if pct < 2 || !bytes.HasSuffix(f[pct], []byte("%")) {
		return false
	}
	used, ok := dfSize(f[pct-2])
	return ok && used >= shmHeldMin
}

// dfSize reads a df column: a number with a unit (df -h: "7.6g"), or a
// bare count of 1K-blocks (df's default).
func dfSize(col []byte) (int64, bool) {
	if n, err := strconv.ParseInt(string(col), 10, 64); err == nil {
		return n * policy.KiB, n >= 0 && n < 1<<53
	}
	return sizeWord(col)
}

// sizeWord reads a size as tools print it, in lower case: "7.6g",
// "16gib", "700mi", "64m".
func sizeWord(w []byte) (int64, bool) {
	s := string(bytes.TrimRight(w, ",.;)"))
	if len(s) > 0 && s[len(s)-1] == 'i' {
		s += "b" // 16gi: ParseSize wants Kubernetes' Gi, or GiB in any case
	}
	n, err := policy.ParseSize(s)
	return n, err == nil
}

// shmemRSSHeld reports whether the kernel's OOM report (in lower case)
// names at least shmHeldMin of shmem-rss: shared memory the killed
// process had mapped, /dev/shm's files among it.
func shmemRSSHeld(lower []byte) bool {
	_, after, ok := bytes.Cut(lower, []byte("shmem-rss:"))
	if !ok {
		return false
	}
	var kb int64
	for _, c := range bytes.TrimLeft(after, " ") {
		switch {
		case c >= '0' && c <= '9':
			kb = kb*10 + int64(c-'0')
			if kb > 1<<40 {
				return true
			}
		case c == ',':
		default:
			return kb*policy.KiB >= shmHeldMin
		}
	}
	return kb*policy.KiB >= shmHeldMin
}

// gpurunOOMHeld reports whether gpurun's OOM Event (in lower case), which
// oom matches, says /dev/shm held a quarter of the memory limit or more,
// or shmHeldMin when it names no limit.
func gpurunOOMHeld(oom *regexp.Regexp, lower []byte) bool {
	m := oom.FindSubmatch(lower)
	if m == nil {
		return false
	}
	held, ok := sizeWord(m[1])
	if !ok {
		return false
	}
	if m[2] == nil {
		return held >= shmHeldMin
	}
	limit, ok := sizeWord(m[2])
	return ok && limit > 0 && held >= limit/4
}

// gpurunReasons are the reasons of gpurun's Events on pods, in lower
// case (observe/events), and the keywords of their lines.
func gpurunReasons() (reasons, keywords []string) {
	return []string{"shmsized", "shmnotsized", "shmswept", "shmnearmemorylimit", "shmoomkilled"},
		[]string{"sized", "shmswept", "shmnearmemorylimit", "killed"}
}

// ownEvent reports whether a line (in lower case) is one of gpurun's
// Events, as kubectl describe and get events print them: its reason as a
// word. Their messages name /dev/shm, its size, and fixes ("a smaller
// /dev/shm only turns the OOM kill into No space left on device"): they
// are read for the facts they state (the Event words of the vocabulary),
// never as a job's error.
func ownEvent(lower []byte) bool {
	reasons, _ := gpurunReasons()
	for _, r := range reasons {
		for at := 0; ; {
			i := bytes.Index(lower[at:], []byte(r))
			if i < 0 {
				break
			}
			i += at
			end := i + len(r)
			if (i == 0 || !isWordByte(lower[i-1])) && (end == len(lower) || !isWordByte(lower[end])) {
				return true
			}
			at = end
		}
	}
	return false
}

// isWordByte reports whether c is an ASCII letter, digit or underscore.
func isWordByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// restartsTable follows kubectl get pods' table on line n: its header
// names the RESTARTS column, and each row after it whose count is above
// 0 is a restart (MarkRestart). It is called for a line with the keyword
// "restart" and for the line after a header or a row.
func (s *scanner) restartsTable(n int, text []byte) {
	f := bytes.Fields(text)
	if col := restartsColumn(f); col >= 0 {
		s.rtCol, s.rtLine = col, n
		return
	}
	if s.rtLine != n-1 || len(f) <= s.rtCol+1 {
		s.rtLine = never
		return
	}
	count, err := strconv.Atoi(string(f[s.rtCol]))
	if err != nil {
		s.rtLine = never
		return
	}
	s.rtLine = n
	if count > 0 {
		s.mark(s.markIndex[MarkRestart], n, text)
	}
}

// restartsColumn is the index of kubectl get pods' RESTARTS column when
// f is its header (NAME ... STATUS RESTARTS ...), -1 otherwise.
func restartsColumn(f [][]byte) int {
	col, name, status := -1, false, false
	for i, w := range f {
		switch string(w) {
		case "NAME":
			name = true
		case "STATUS":
			status = true
		case "RESTARTS":
			col = i
		}
	}
	if !name || !status {
		return -1
	}
	return col
}
