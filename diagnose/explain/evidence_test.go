package explain

import (
	"slices"
	"strings"
	"testing"
)

// Each kind of evidence fires on lines whose wording no signature names.
// These lines were written for this test: they are not from real logs
// (the corpus has those), and each is worded differently from the
// messages the signatures quote.
func TestEvidenceKinds(t *testing.T) {
	tests := []struct {
		name     string
		log      string
		want     string     // the finding; "" for none
		conf     Confidence // its confidence
		evidence string     // one of its Evidence
		other    string     // a look-alike note, when want is ""
	}{
		// mention: the shm filesystem next to an error, in new words.
		{"path and a shortage on one line", "arena: cannot grow /dev/shm/arena.7 by 4 MiB: not enough memory\n",
			"shm-mention-space", Likely, "mention", ""},
		{"path, then the error two lines on", "mapping segment /dev/shm/seg.42\nretrying once\nfatal: insufficient room for segment\n",
			"shm-mention-space", Likely, "mention", ""},
		{"the error, then the path", "writer failed: Errno 28\n  while writing into /run/shm/cache\n",
			"shm-mention-space", Likely, "mention", ""},
		{"a size setting", "hint: the shm-size of this container is too small for 8 workers\n",
			"shm-mention-space", Likely, "mention", ""},
		{"a POSIX shm call", "shm_open(\"/queue-3\") returned ENOMEM\n",
			"shm-mention-space", Likely, "mention", ""},
		{"a Kubernetes volume", "eviction: volume dshm used 2Gi, which exceeds its sizeLimit\n",
			"shm-mention-space", Likely, "mention", ""},
		{"df of a full /dev/shm", "Filesystem Size Used Avail Use% Mounted on\ntmpfs 256M 256M 0 100% /dev/shm\n",
			"shm-df-full", Likely, "mention", ""},
		{"permission", "open /dev/shm/lock.1: EACCES\n",
			"shm-mention-denied", Likely, "mention", ""},
		{"existence", "attach /dev/shm/seg-9 failed: ENOENT\n",
			"shm-mention-missing", Possible, "mention", ""},
		{"a semaphore's error before its frames", "OSError: [Errno 28] No space left on device\n" +
			strings.Repeat("  File \"/srv/app/jobs.py\", line 3, in run\n    step()\n", 8) +
			"  File \"/venv/lib/billiard/synchronize.py\", line 72, in __init__\n", "python-semlock-enospc", Likely, "mention", ""},
		{"a semaphore's error after its frame", "  File \"/usr/lib/python3.11/multiprocessing/synchronize.py\", line 57, in __init__\nOSError: [Errno 28] No space left on device\n",
			"python-semlock-enospc", Likely, "mention", ""},
		{"sem_open in C", "lockd: sem_open(\"/jobs.lock\") failed: No space left on device\n", "python-semlock-enospc", Likely, "mention", ""},
		{"a sandbox without /dev/shm", "  File \"/usr/lib/python3.11/multiprocessing/synchronize.py\", line 57, in __init__\nOSError: [Errno 38] Function not implemented\n",
			"posix-ipc-unavailable", Likely, "mention", ""},
		{"sem_open refused", "lockd: sem_open(\"/jobs.lock\"): Permission denied\n", "posix-ipc-unavailable", Likely, "mention", ""},
		{"a file refused next to a lock: nothing", "  File \"/usr/lib/python3.11/multiprocessing/synchronize.py\", line 95, in __enter__\nPermissionError: [Errno 13] Permission denied: '/data/out.bin'\n",
			"", "", "", ""},
		{"a semaphore far from the error: nothing", "  File \"/usr/lib/python3.11/multiprocessing/synchronize.py\", line 57, in __init__\n" +
			strings.Repeat("step\n", 40) + "OSError: [Errno 28] No space left on device\n", "", "", "", ""},
		{"joblib's memmap folder in /dev/shm", "OSError: [Errno 28] No space left on device: '/dev/shm/joblib_memmapping_folder_12_ab/12-x.pkl'\n",
			"shm-path-enospc", Certain, "mention", ""},
		{"joblib's memmap folder on disk: nothing", "  File \"/venv/lib/python3.10/site-packages/joblib/_memmapping_reducer.py\", line 9, in __call__\n" +
			"OSError: [Errno 28] No space left on device: '/tmp/joblib_memmapping_folder_12_ab/12-x.pkl'\n", "", "", "", ""},
		{"a lock next to a full disk elsewhere: nothing", "  File \"/usr/lib/python3.11/multiprocessing/synchronize.py\", line 95, in __enter__\nOSError: [Errno 28] No space left on device: '/data/out.bin'\n",
			"", "", "", ""},
		{"an MPI transport's allocation", "MPIDU_Init_shm_alloc(150): unable to allocate shared memory\n", "shm-mention-create", Likely, "mention", ""},
		{"a file in /dev/shm not created", "ipc: failed to create /dev/shm/ring.0 for the queue\n", "shm-mention-create", Likely, "mention", ""},
		{"a transport segment under /tmp", "[n1:7] btl: sm_segment.n1.3 in /scratch/job.42 could not be created\n", "shm-mention-create", Likely, "mention", ""},
		{"a reason next to it says more", "[n1:7] cannot create /dev/shm/ring.0: Permission denied\n", "shm-mention-denied", Likely, "mention", ""},
		{"a size flag and a daemon's error: nothing", "$ docker run --shm-size=1g img\ndocker: Error response from daemon: failed to create shim task: OCI runtime create failed\n",
			"", "", "", ""},
		{"a counter, not a segment: nothing", "libfabric:9:shm:cntr:smr_cntr_open():42<info> cntr wait not yet supported\nOFI event counter create failed (Function not implemented)\n",
			"", "", "", ""},
		{"far apart: nothing", "mapping segment /dev/shm/seg.42\n" + strings.Repeat("step\n", 10) + "fatal: insufficient room\n",
			"", "", "", ""},
		{"dockerd's mount slots: nothing", "error mounting \"/dev/shm\" to rootfs: no space left on device\n",
			"", "", "", ""},
		// The words "shared memory" or "shm" and a failure, when nothing
		// names the filesystem: possible, and only when nothing else in
		// the log explains it.
		{"shared memory run out", "stager[2]: ran out of shared memory for batch 12, giving up\n", "shared-memory-error", Possible, "mention", ""},
		{"grow the shm", "ipc ring: shm too small for 4 producers; increase it\n", "shared-memory-error", Possible, "mention", ""},
		{"a shared-memory failure", "[svc] failed to map shared-memory arena #3\n", "shared-memory-error", Possible, "mention", ""},
		{"the GPU's shared memory per block: nothing", "kernel fused_attn needs 96 KiB of shared memory per block; cannot launch\n", "", "", "", ""},
		{"System V by name: nothing", "sysv shared memory attach failed (key 0x51)\n", "", "", "", ""},
		{"another reason named: nothing", "could not attach shared memory pool: connection refused\n", "", "", "", ""},
		{"shared memory in passing: nothing", "using shared memory transport for 8 local ranks\n", "", "", "", ""},
		{"shared memory words yield to a finding", "ipc: shm exhausted\nshm 64M 64M 0 100% /dev/shm\n", "shm-df-full", Likely, "mention", ""},

		// sigbus: its spellings, alone and in context.
		{"a supervisor's SIGBUS", "supervisor: child 3 terminated by SIGBUS\n", "sigbus", Possible, "sigbus", ""},
		{"a debugger's stop", "Thread 7 \"loader\" received signal SIGBUS, Bus error.\n", "sigbus", Possible, "sigbus", ""},
		{"a handler's banner", "[host:1] Signal: Bus error (7)\n", "sigbus", Possible, "sigbus", ""},
		{"BUS_ADRERR", "crash at 0x7f00: code BUS_ADRERR\n", "sigbus", Possible, "sigbus", ""},
		{"an agent's exit code", "  exitcode  : -7 (pid: 12)\n", "sigbus", Possible, "sigbus", ""},
		{"a launcher's exit code", "=   EXIT CODE: 135\n", "sigbus", Possible, "sigbus", ""},
		{"a loky worker's SIGBUS", "joblib.externals.loky.process_executor.TerminatedWorkerError: A worker process managed by the executor was unexpectedly terminated.\n\nThe exit codes of the workers are {SIGBUS(-7)}\n",
			"sigbus-in-context", Likely, "context", ""},
		{"an engine's exit code", "worker-3 exited with code 135\n", "sigbus", Possible, "sigbus", ""},
		{"kubectl's exit code", "    Last State:     Terminated\n      Reason:       Error\n      Exit Code:    135\n", "sigbus", Possible, "sigbus", ""},
		{"a CI runner's exit code", "##[error]Process completed with exit code '135'.\n", "sigbus", Possible, "sigbus", ""},
		{"make's error", "make: *** [Makefile:12: test] Error 135\n", "sigbus", Possible, "sigbus", ""},
		{"subprocess's returncode", "CompletedProcess(args=['./sim'], returncode=-7)\n", "sigbus", Possible, "sigbus", ""},
		{"vLLM's worker monitor", "ERROR 01-02 03:04:05 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 77 died, exit code: -7\n",
			"sigbus-in-context", Likely, "context", ""},
		{"torch elastic's record", "failures: {0: ProcessFailure(local_rank=0, pid=9, exitcode=-7, error_file='<N/A>')}\n", "sigbus-in-context", Likely, "context", ""},
		{"a supervisor's signal number", "supervisor: child 4411 died (sig=7)\n", "sigbus", Possible, "sigbus", ""},
		{"a scheduler's rc", "step 3 of job 88 finished, rc=135\n", "sigbus", Possible, "sigbus", ""},
		{"a runtime's signal (7)", "\nsignal (7): unexpected trap\n", "sigbus", Possible, "sigbus", ""},
		{"another exit code: nothing", "worker-3 exited with code 137\nprocess exited with code -70\n", "", "", "", ""},
		{"another signal number: nothing", "child 4411 died (sig=17)\nrc=13\n", "", "", "", ""},
		{"signal 7 with NCCL frames after it", "[w:1] Caught signal 7 (Bus error)\n  3 0x0 ncclSend()  ???:0\n",
			"sigbus-in-context", Likely, "context", ""},
		{"SIGBUS after an MPI launch", "mpiexec -n 4 ./solver\nsolver: SIGBUS while copying halo\n",
			"sigbus-in-context", Likely, "context", ""},
		{"SIGBUS near a shm path", "segment at /dev/shm/psm_1a2b3c4d\nBus error (core dumped)\n",
			"sigbus-in-context", Likely, "sigbus", ""},

		// message: a library's own message, in a form no other
		// signature quotes.
		{"Chromium's crash", "Error: Page crashed!\n", "chromium-shm-crash", Possible, "message", ""},
		{"Chromium's broker without a region", "[31:40:0102/101010.1:ERROR:broker_posix.cc(40)] Received unexpected number of handles\n", "chromium-shm-crash", Possible, "message", ""},
		{"Windows' broker: nothing", "[9:9:0102/101010.1:ERROR:broker_win.cc(60)] Received unexpected number of handles in broker message\n", "", "", "", ""},
		{"agreement raises it", "Error: Page crashed!\nshm 64M 64M 0 100% /dev/shm\n", "chromium-shm-crash", Likely, "agrees with shm-df-full", ""},

		// Look-alikes stay look-alikes.
		{"GPU shared memory", "OutOfResources: out of resource: shared memory, Required: 70000, Hardware limit: 65536\n", "", "", "", "gpu-shared-memory"},
		{"ptxas under XLA", "ptxas error   : Entry function 'fusion_7' uses too much shared data (0xd000 bytes, 0xc000 max)\n", "", "", "", "gpu-shared-memory"},
		{"System V", "shmget failed: Invalid argument (SHMMAX is 32 MiB)\n", "", "", "", "sysv-shm-limit"},
		{"a System V semaphore", "semget(IPC_PRIVATE, 4) failed: No space left on device\n", "", "", "", "sysv-shm-limit"},
		{"a disk elsewhere", "OSError: [Errno 28] No space left on device: '/data/out.bin'\n", "", "", "", ""},
		{"D-Bus", "ERROR:bus.cc(393)] Failed to connect to the bus: No such file or directory\n", "", "", "", ""},
		{"UCX reaching a peer through /proc", "[n1:7:0] mm_posix.c:210 UCX ERROR open(file_name=/proc/4242/fd/31 flags=0x0) failed: No such file or directory\n",
			"", "", "", "cross-process-memory"},
		{"CMA refused", "[n1:7:0] cma_ep.c:81 process_vm_writev(pid=4242 {0x1,64}) returned -1: Operation not permitted\n", "", "", "", "cross-process-memory"},
		{"a checkpoint's error before its frame", "RuntimeError: PytorchStreamWriter failed writing file data/3: file write failed\n  File \"/opt/torch/serialization.py\", line 9, in save\n",
			"", "", "", "checkpoint-write-failed"},
		{"shmem in an OOM kill", "Out of memory: Killed process 7 (python) anon-rss:1kB, shmem-rss:0kB\n", "", "", "", "worker-killed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := scanString(t, tt.log, Options{})
			if tt.want == "" {
				if r.Found() {
					t.Errorf("findings %q, want none", ids(r))
				}
			} else {
				f := finding(t, r, tt.want)
				if f.Confidence != tt.conf || !slices.Contains(f.Evidence, tt.evidence) {
					t.Errorf("%s: %s, evidence %q; want %s with %q", f.Signature, f.Confidence, f.Evidence, tt.conf, tt.evidence)
				}
			}
			if got := otherIDs(r); tt.other != "" && !slices.Contains(got, tt.other) || tt.other == "" && tt.want == "" && len(got) > 0 {
				t.Errorf("look-alike notes %q, want %q", got, tt.other)
			}
		})
	}
}

// Logs as they arrive in the field: JSON records, kubectl's prefix, a
// logger's prefix on a wrapped line, indentation, a traceback flattened
// onto one line. Written for the test.
func TestFieldFormats(t *testing.T) {
	ray1 := "WARNING: The object store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes"
	ray2 := "available. This will harm performance!"
	tests := []struct {
		name     string
		log      string
		wantID   string
		wantLine int
	}{
		{"Docker's json-file record", `{"log":"RuntimeError: DataLoader worker (pid 7) is killed by signal: Bus error.\n","stream":"stderr","time":"2024-01-01T00:00:00Z"}` + "\n",
			"torch-dataloader-bus-error", 1},
		{"a JSON record with escapes", `{"time":"t","message":"open(\"\/dev\/shm\/x\") = -1 ENOSPC (No space left on device)"}` + "\n",
			"shm-path-enospc", 1},
		{"a Loki export's line", "{\"line\":\"\\u001b[31mNCCL WARN Call to posix_fallocate failed : No space left on device\\u001b[0m\",\"ts\":\"1\"}\n",
			"nccl-posix-fallocate", 1},
		{"kubectl logs --prefix", "[pod/train-0/main] step 1\n[pod/train-0/main] " + busError + "\n",
			"torch-dataloader-bus-error", 2},
		{"a logger's prefix on the wrapped part", "2025-10-09 20:16:32,652 " + ray1 + "\n2025-10-09 20:16:32,652 " + ray2 + "\n",
			"ray-object-store-shm", 1},
		{"a compose service's prefix on the wrapped part", "worker_1  | " + ray1 + "\nworker_1  | " + ray2 + "\n",
			"ray-object-store-shm", 1},
		{"an indented continuation", ray1 + "\n      " + ray2 + "\n",
			"ray-object-store-shm", 1},
		{"a traceback flattened onto one line", `Traceback (most recent call last):\n  File "/x/torch/utils/data/dataloader.py", line 1, in _try_get_data\n    data = self._data_queue.get(timeout=timeout)\n_queue.Empty` + "\n",
			"torch-dataloader-queue-empty", 1},
		{"CRLF and colours around a SIGBUS", "step\r\n\x1b[31mBus error (core dumped)\x1b[0m\r\n",
			"sigbus", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := finding(t, scanString(t, tt.log, Options{}), tt.wantID)
			if f.Lines[0].N != tt.wantLine {
				t.Errorf("first line %d, want %d", f.Lines[0].N, tt.wantLine)
			}
		})
	}
}

func TestJSONMessage(t *testing.T) {
	for in, want := range map[string]string{
		`{"log":"a\tb\n","stream":"stderr"}`:       "a\tb\n",
		`{"stream":"stdout","log":"q\"uote\\d"}`:   "q\"uote\\d",
		`{"msg": "caf\u00e9 \/dev\/shm"}`:          "café /dev/shm",
		` {"level":"info","message":"x"} `:         "x",
		`{"log":1}`:                                "",
		`{"log":"unterminated}`:                    "",
		`not json {"log":"x"}`:                     "",
		`{"other":"log","line":"second key wins"}`: "second key wins",
	} {
		got, ok := jsonMessage([]byte(in), nil)
		if string(got) != want || ok != (want != "") {
			t.Errorf("jsonMessage(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestPrefixes(t *testing.T) {
	for _, tt := range []struct {
		line          string
		kubectl, logs int
	}{
		{"[pod/a-0/c] x", len("[pod/a-0/c] "), 0},
		{"[pod/a b/c] x", 0, 0},
		{"plain text", 0, 0},
		{"2021-06-01 06:43:28.473 UTC [101] ERROR:  x", 0, len("2021-06-01 06:43:28.473 UTC [101] ERROR:  ")},
		{"[rank0]:[E1206 18:44:12.71 ProcessGroupNCCL.cpp:607] x", 0, len("[rank0]:[E1206 18:44:12.71 ProcessGroupNCCL.cpp:607] ")},
		{"(pid=4496) Fatal Python error", 0, len("(pid=4496) ")},
		{"worker_1  | started", 0, len("worker_1  | ")},
		{"  indented", 0, 2},
		{"/usr/lib/x.py: y", 0, 0},
	} {
		if got := kubectlPrefix([]byte(tt.line)); got != tt.kubectl {
			t.Errorf("kubectlPrefix(%q) = %d, want %d", tt.line, got, tt.kubectl)
		}
		if got := logPrefix([]byte(tt.line)); got != tt.logs {
			t.Errorf("logPrefix(%q) = %d, want %d", tt.line, got, tt.logs)
		}
	}
}

// The fix names the right setting for the ecosystem the log shows.
func TestEcosystemSteps(t *testing.T) {
	tests := []struct {
		name, log string
		eco       string
		says      []string
	}{
		{"Chromium", "[1:7:0131/235140.910186:FATAL:memory.cc(22)] Out of memory. size=524288\n", "chromium",
			[]string{"--disable-dev-shm-usage", "cost", "/tmp"}},
		{"Open MPI", "mpirun -np 8 ./a.out\n[n1:3] *** Process received signal ***\n[n1:3] Signal: Bus error (7)\n", "mpi",
			[]string{"btl ^vader", "MPIR_CVAR_NOLOCAL=1", "I_MPI_FABRICS=ofi", "FI_PROVIDER=^shm"}},
		{"UCX", "[1] mm_posix.c:206 UCX ERROR Not enough memory to write 1 bytes; check /dev/shm\n", "ucx",
			[]string{"UCX_TLS=^posix", "UCX_POSIX_DIR"}},
		{"Ray", "(raylet) store_runner.cc:83: System memory request exceeds memory available in /dev/shm. The request is for 10 bytes, and the amount available is 9 bytes.\n", "ray",
			[]string{"object store", "--shm-size", "RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := scanString(t, tt.log, Options{})
			if !slices.Contains(r.Ecosystems, tt.eco) || r.Fix == nil {
				t.Fatalf("ecosystems %q, fix %v; want %s", r.Ecosystems, r.Fix, tt.eco)
			}
			var how string
			for _, s := range r.Fix.Steps {
				if s.Where == tt.eco {
					how = s.How
				}
			}
			for _, want := range tt.says {
				if !strings.Contains(how, want) {
					t.Errorf("%s step %q lacks %q", tt.eco, how, want)
				}
			}
		})
	}
	if r := scanString(t, "step 1\n"+busError+"\n", Options{}); slices.Contains(r.Ecosystems, "chromium") || len(r.Fix.Steps) == 0 {
		t.Errorf("a DataLoader log: ecosystems %q", r.Ecosystems)
	}
}
