package explain

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpurun/gpurun/policy"
)

// Excerpts in the forms Kubernetes users paste: a job's log with kubectl
// describe pod (its Last State block, Restart Count and Events), kubectl
// get pods and get events, the kubectl logs --previous command, df and ls
// of /dev/shm, the kernel's OOM report and gpurun's own Events. They were
// written for these tests, in the formats those programs print; the
// corpus holds real logs.
const (
	ncclFallocate = "train-0:43:97 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n" +
		"train-0:43:97 [0] NCCL INFO include/shm.h:41 -> 2\n" +
		"train-0:43:97 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-8a1f3c2d9e4b5a60-0-1-0 (size 9637888)\n"
	ncclExtend = "train-0:51:88 [1] misc/shmutils.cc:88 NCCL WARN Error: failed to extend /dev/shm/nccl-Zq3vXa to 9637892 bytes, error: No space left on device (28)\n" +
		"train-0:51:88 [1] misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-Zq3vXa (size 9637888), error: No space left on device (28)\n"
	ncclCreate = "train-0:51:88 [1] misc/shmutils.cc:113 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-YNr3AB (size 9637888)\n" +
		"train-0:51:88 [1] NCCL INFO transport/shm.cc:114 -> 2\n"
	torchWrite = "Traceback (most recent call last):\n" +
		"  File \"/opt/conda/lib/python3.11/site-packages/torch/multiprocessing/reductions.py\", line 569, in reduce_storage\n" +
		"    metadata = storage._share_filename_cpu_()\n" +
		"RuntimeError: unable to write to file </torch_212_1846031187_0>: No space left on device (28)\n"
	torchAlloc = "RuntimeError: unable to allocate shared memory(shm) for file </torch_388_2977043616_5>: Success (0)\n"
	psmExists  = "  File \"/usr/lib/python3.11/multiprocessing/shared_memory.py\", line 104, in __init__\n" +
		"    self._fd = _posixshmem.shm_open(\n" +
		"FileExistsError: [Errno 17] File exists: '/psm_6f5d3c1a'\n"
	sglExists = "FileExistsError: [Errno 17] File exists: '/dev/shm/sgl_shm_mm_77_9c1e0b2a'\n"

	describeRestarts = "    State:          Waiting\n" +
		"      Reason:       CrashLoopBackOff\n" +
		"    Last State:     Terminated\n" +
		"      Reason:       Error\n" +
		"      Exit Code:    1\n" +
		"      Started:      Tue, 14 Oct 2025 09:21:07 +0000\n" +
		"      Finished:     Tue, 14 Oct 2025 09:22:41 +0000\n" +
		"    Ready:          False\n" +
		"    Restart Count:  7\n"
	backOffEvent = "Events:\n" +
		"  Type     Reason   Age                 From     Message\n" +
		"  ----     ------   ----                ----     -------\n" +
		"  Normal   Pulled   3m (x8 over 21m)    kubelet  Container image \"ghcr.io/acme/trainer:1.4\" already present on machine\n" +
		"  Warning  BackOff  2m (x7 over 5m)     kubelet  Back-off restarting failed container trainer in pod train-0_default(6f1c9a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b)\n"
	getPods = "NAME      READY   STATUS             RESTARTS      AGE\n" +
		"train-0   0/1     CrashLoopBackOff   7 (2m ago)    21m\n" +
		"train-1   1/1     Running            0             21m\n"
	lsShm = "$ kubectl exec train-0 -- ls -la /dev/shm\n" +
		"total 73416\n" +
		"drwxrwxrwt 2 root root      140 Oct 14 09:22 .\n" +
		"drwxr-xr-x 5 root root      360 Oct 14 09:01 ..\n" +
		"-rw------- 1 root root  9637888 Oct 14 09:11 nccl-2IXnHu\n" +
		"-rw------- 1 root root  9637888 Oct 14 09:11 nccl-JeAEgn\n" +
		"-rw------- 1 root root 33554432 Oct 14 09:11 torch_212_1846031187_0\n"
	// gpurun's Events as kubectl describe pod prints them, in the words
	// of observe/events.
	evSized    = "  Normal   ShmSized            5m    gpurun   sized /dev/shm to 8GiB (container trainer): 50% of the 16GiB memory limit = 8GiB\n"
	evNotSized = "  Warning  ShmNotSized         5m    gpurun   could not size /dev/shm (container trainer): remount /run/containerd/io.containerd.grpc.v1.cri/sandboxes/8f2c/shm: " +
		"operation not permitted; fix: run the node agent privileged\n"
	evSwept = "  Normal   ShmSwept            40s   gpurun   removed 700MiB in 74 files that the earlier instance of container trainer left in /dev/shm: " +
		"nccl-Zq3vXa, sgl_shm_mm_77_1a2b3c4d, torch_212_1846031187_0, …\n"
	evNear = "  Warning  ShmNearMemoryLimit  2m    gpurun   /dev/shm holds 11GiB and container trainer uses 15.2GiB of its 16GiB memory limit: " +
		"tmpfs pages count against the limit as long as their files exist, and the kernel OOM-kills the container when it reaches the limit; " +
		"fix: raise the memory limit by what /dev/shm needs, or have the job delete the files it no longer needs there (those a crashed rank left stay charged: gpurun stats names them); " +
		"a smaller /dev/shm only turns the OOM kill into \"No space left on device\"\n"
	evOOM = "  Warning  ShmOOMKilled        30s   gpurun   container trainer was OOM-killed with 7.59GiB of its 16GiB memory limit in /dev/shm (at the last sample, 12s before)\n"

	oomBlock = "    Last State:     Terminated\n" +
		"      Reason:       OOMKilled\n" +
		"      Exit Code:    137\n" +
		"      Started:      Tue, 14 Oct 2025 09:21:07 +0000\n" +
		"      Finished:     Tue, 14 Oct 2025 09:40:12 +0000\n"
	dfHeldLine = "$ kubectl exec train-0 -- df -h /dev/shm\n" +
		"Filesystem      Size  Used Avail Use% Mounted on\n" +
		"shm             8.0G  7.6G  410M  95% /dev/shm\n"
)

// kubeCase is one excerpt and what explain must make of it.
type kubeCase struct {
	name string
	log  string
	want []string // the /dev/shm findings, exactly
	// conf is the confidence of the first of want, when it is one of
	// the new signatures.
	conf   Confidence
	others []string // look-alike notes, exactly
}

func runKubeCases(t *testing.T, cases []kubeCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			r := scanString(t, tt.log, Options{})
			if got, want := sorted(ids(r)), sorted(tt.want); !slices.Equal(got, want) {
				t.Errorf("findings %q, want %q", got, want)
			}
			if got, want := sorted(otherIDs(r)), sorted(tt.others); !slices.Equal(got, want) {
				t.Errorf("look-alike notes %q, want %q", got, want)
			}
			if tt.conf != "" && len(tt.want) > 0 {
				if f := finding(t, r, tt.want[0]); f.Confidence != tt.conf {
					t.Errorf("%s is %s, want %s", f.Signature, f.Confidence, tt.conf)
				}
			}
			if r.Found() != (r.Fix != nil) {
				t.Errorf("findings %q but fix %+v", ids(r), r.Fix)
			}
		})
	}
}

// A failure to create or extend a segment next to a restart, or to a
// /dev/shm already full at start, is shm-restart-leftovers; a restart
// alone, or a full /dev/shm alone, is not.
func TestRestartLeftovers(t *testing.T) {
	filler := strings.Repeat("train-0:43:97 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n", podNear+10)
	const leftovers = "shm-restart-leftovers"
	runKubeCases(t, []kubeCase{
		{"NCCL's posix_fallocate, then the kubelet's back-off", ncclFallocate + backOffEvent,
			[]string{leftovers, "nccl-posix-fallocate", "nccl-shm-segment"}, Likely, nil},
		{"describe's Restart Count, then NCCL's failed to extend", describeRestarts + ncclExtend,
			[]string{leftovers, "nccl-shm-extend", "nccl-shm-segment"}, Likely, nil},
		{"kubectl logs --previous, then PyTorch's shared tensor", "$ kubectl logs --previous train-0 -c trainer\n" + torchWrite,
			[]string{leftovers, "torch-shm-file"}, Likely, nil},
		{"kubectl logs -p", "$ kubectl logs -p train-0\n" + torchAlloc, []string{leftovers, "torch-shm-file"}, Likely, nil},
		{"kubectl get pods' RESTARTS", getPods + "\n" + ncclCreate, []string{leftovers, "nccl-shm-segment"}, Likely, nil},
		{"kubectl get pods -A", "NAMESPACE   NAME      READY   STATUS    RESTARTS      AGE\nml          train-0   1/1     Running   3 (40s ago)   9m\n" + ncclCreate,
			[]string{leftovers, "nccl-shm-segment"}, Likely, nil},
		{"SharedMemory's name taken, in CrashLoopBackOff", "train-0   0/1   CrashLoopBackOff   4   6m\n" + psmExists,
			[]string{leftovers, "shm-mention-missing"}, Likely, nil},
		{"SGLang's segment taken, after gpurun's sweep", sglExists + evSwept, []string{leftovers, "shm-mention-missing"}, Likely, nil},
		{"NCCL's segment after gpurun's sweep", evSwept + ncclExtend, []string{leftovers, "nccl-shm-extend", "nccl-shm-segment"}, Likely, nil},
		{"an ls of /dev/shm listing segments", lsShm + ncclExtend, []string{leftovers, "nccl-shm-extend", "nccl-shm-segment"}, Likely, nil},
		{"df at 100% before the start", "shm              64M   64M     0 100% /dev/shm\n" + torchWrite,
			[]string{leftovers, "torch-shm-file"}, Likely, nil},
		{"the kubelet's own log", "E1014 09:22:41.118 2071 pod_workers.go:1301] \"Error syncing pod, skipping\" err=\"failed to \\\"StartContainer\\\" for \\\"trainer\\\" with CrashLoopBackOff: \\\"back-off 5m0s restarting failed container=trainer pod=train-0_default(6f1c9a2e)\\\"\"\n" + ncclFallocate,
			[]string{leftovers, "nccl-posix-fallocate", "nccl-shm-segment"}, Likely, nil},
		{"restartCount in kubectl get pod -o yaml", "    restartCount: 3\n    started: false\n" + ncclCreate, []string{leftovers, "nccl-shm-segment"}, Likely, nil},
		{"a write to /dev/shm, then a back-off", "dd: error writing '/dev/shm/scratch': No space left on device\n" + backOffEvent,
			[]string{leftovers, "shm-path-enospc"}, Likely, nil},

		// Not leftovers.
		{"a restart alone", describeRestarts + backOffEvent + getPods, nil, "", nil},
		{"a full /dev/shm alone", "shm              64M   64M     0 100% /dev/shm\n", []string{"shm-df-full"}, "", nil},
		{"segments listed, no failure", lsShm, nil, "", nil},
		{"a back-off pulling an image", "  Warning  Failed   2m (x4 over 4m)  kubelet  Failed to pull image \"ghcr.io/acme/trainer:1.5\": rpc error: code = NotFound\n" +
			"  Warning  Failed   2m (x4 over 4m)  kubelet  Error: ErrImagePull\n" +
			"  Normal   BackOff  90s (x6 over 4m) kubelet  Back-off pulling image \"ghcr.io/acme/trainer:1.5\"\n" +
			"  Warning  Failed   90s (x6 over 4m) kubelet  Error: ImagePullBackOff\n" + ncclFallocate,
			[]string{"nccl-posix-fallocate", "nccl-shm-segment"}, "", nil},
		{"no restarts in kubectl get pods", "NAME      READY   STATUS    RESTARTS   AGE\ntrain-0   1/1     Running   0          3m\n" + ncclCreate,
			[]string{"nccl-shm-segment"}, "", nil},
		{"Restart Count 0", "    Restart Count:  0\n" + ncclCreate, []string{"nccl-shm-segment"}, "", nil},
		{"kubectl logs of the running instance", "$ kubectl logs train-0 --prefix\n" + ncclCreate, []string{"nccl-shm-segment"}, "", nil},
		{"a restart far from the failure", describeRestarts + filler + ncclCreate, []string{"nccl-shm-segment"}, "", nil},
		{"the failure's own segment name is no listing", ncclExtend, []string{"nccl-shm-extend", "nccl-shm-segment"}, "", nil},
		{"df of another path at 100%", "/dev/nvme0n1p1  200G  200G     0 100% /\n" + torchWrite, []string{"torch-shm-file"}, "", nil},
		{"other files in /dev/shm", "-rw-r--r-- 1 root root 4096 Oct 14 09:11 sem.mp-4f2a\n-rw-r--r-- 1 root root 8 Oct 14 09:11 ncclx.cfg\n" + ncclCreate,
			[]string{"nccl-shm-segment"}, "", nil},
		{"a checkout's nccl-tests, listed", "$ ls\nnccl-tests\nREADME.md\n" + ncclCreate,
			[]string{"nccl-shm-segment"}, "", nil},
		{"a segment refused for CUDA's reason", describeRestarts + "NCCL WARN Cuda failure 'invalid argument'\n" + ncclCreate, nil, "", nil},
		{"an mmap refused, after a restart", describeRestarts + "RuntimeError: unable to mmap 1048576 bytes from file </torch_20233_2497012658_63>: Cannot allocate memory (12)\n",
			nil, "", []string{"mmap-enomem"}},
		{"CUDA out of memory, after a restart", describeRestarts + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n",
			nil, "", []string{"cuda-out-of-memory"}},
	})
}

// A kill for memory next to /dev/shm holding much of it is oom-kill-shm;
// a kill for memory without, or a /dev/shm holding little, stays what it
// was: the look-alike worker-killed, or nothing.
func TestOOMKillShm(t *testing.T) {
	const oom = "oom-kill-shm"
	runKubeCases(t, []kubeCase{
		{"describe's OOMKilled, and df of /dev/shm", oomBlock + dfHeldLine, []string{oom}, Likely, nil},
		{"df first, then the OOMKilled block", dfHeldLine + strings.Repeat("step\n", 40) + oomBlock, []string{oom}, Likely, nil},
		{"Exit Code 137 under Terminated, df in 1K-blocks", "    Last State:     Terminated\n      Reason:       Error\n      Exit Code:    137\n" +
			"Filesystem     1K-blocks     Used Available Use% Mounted on\nshm             16777216 15938355    838861  95% /dev/shm\n", []string{oom}, Likely, nil},
		{"gpurun's ShmOOMKilled Event", evOOM, []string{oom}, Likely, nil},
		{"gpurun's OOM Event, the pod's limit", "  Warning  ShmOOMKilled  30s  gpurun  a process of container trainer was OOM-killed with 5GiB of its pod's 16GiB memory limit in /dev/shm (at the last sample, 3s before)\n",
			[]string{oom}, Likely, nil},
		{"gpurun's OOM Event, no limit named", "  Warning  ShmOOMKilled  30s  gpurun  container trainer was OOM-killed with 7.59GiB in /dev/shm (at the last sample, 12s before)\n",
			[]string{oom}, Likely, nil},
		{"an OOM message in the brief's words", "container trainer OOM-killed with 7.6GiB of its 16GiB limit in /dev/shm\n", []string{oom}, Likely, nil},
		{"gpurun's ShmNearMemoryLimit, then OOMKilled", evNear + oomBlock, []string{oom}, Likely, nil},
		{"the kernel's memory cgroup OOM killer with shmem-rss", "[88123.402615] Memory cgroup out of memory: Killed process 4242 (python) total-vm:98123456kB, anon-rss:6123456kB, " +
			"file-rss:81234kB, shmem-rss:7969176kB, UID:0 pgtables:31244kB oom_score_adj:-997\n", []string{oom}, Likely, nil},
		{"a shell's Killed, exit code 137, gpurun's ShmNearMemoryLimit", "/bin/bash: line 1:    27 Killed                  python train.py --workers 16\n" +
			"command terminated with exit code 137\n" + evNear, []string{oom}, Likely, nil},
		{"the kernel's OOM killer, little shmem mapped, a large /dev/shm", "Out of memory: Killed process 7 (python) total-vm:98123456kB, anon-rss:15123456kB, file-rss:0kB, shmem-rss:1024kB\n" + dfHeldLine,
			[]string{oom}, Likely, nil},
		{"a full, large /dev/shm and OOMKilled", oomBlock + "shm              12G   12G     0 100% /dev/shm\n", []string{oom}, Likely, nil},

		// Not oom-kill-shm.
		{"OOMKilled without /dev/shm", oomBlock + "    Ready:          False\n    Restart Count:  2\n", nil, "", []string{"worker-killed"}},
		{"OOMKilled, /dev/shm holding little", oomBlock + "shm              64M   12M   53M  19% /dev/shm\n", nil, "", []string{"worker-killed"}},
		{"OOMKilled, df of another path", oomBlock + "overlay         100G   61G   40G  61% /\n", nil, "", []string{"worker-killed"}},
		{"the kernel's OOM killer, little shmem", "Out of memory: Killed process 7 (python) total-vm:98123456kB, anon-rss:15123456kB, file-rss:0kB, shmem-rss:1024kB\n" +
			"shm              64M   12M   53M  19% /dev/shm\n", nil, "", []string{"worker-killed"}},
		{"gpurun's OOM Event with little in /dev/shm", "  Warning  ShmOOMKilled  30s  gpurun  container trainer was OOM-killed with 120MiB of its 16GiB memory limit in /dev/shm (at the last sample, 4s before)\n", nil, "", nil},
		{"gpurun's OOM Event, a small share of the host's memory", "  Warning  ShmOOMKilled  30s  gpurun  container trainer was OOM-killed with 7.59GiB of the host's 64GiB of memory in /dev/shm (at the last sample, 4s before)\n", nil, "", nil},
		{"gpurun's OOM Event, nothing in /dev/shm", "  Warning  ShmOOMKilled  30s  gpurun  container trainer was OOM-killed with 0B in /dev/shm (at the last sample, 4s before)\n", nil, "", nil},
		{"CUDA out of memory next to a large /dev/shm", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB\n" + dfHeldLine,
			nil, "", []string{"cuda-out-of-memory"}},
		{"Killed and exit code 137 alone", "./entrypoint.sh: line 28:     7 Killed                  /app/bin/server $ARGS\nserver exited with code 137\n", nil, "", nil},
		{"exit code 137 without a kill next to a large /dev/shm", "worker-3 exited with code 137\n" + dfHeldLine, nil, "", nil},
		{"Exit Code 137 outside a Terminated block", "      Exit Code:    137\n" + dfHeldLine, nil, "", nil},
		{"SIGSEGV's Exit Code 139", "    Last State:     Terminated\n      Reason:       Error\n      Exit Code:    139\n" + dfHeldLine, nil, "", nil},
		{"SIGBUS's Exit Code 135 stays possible", "    Last State:     Terminated\n      Reason:       Error\n      Exit Code:    135\n", []string{"sigbus"}, Possible, nil},
	})
}

// kubectl's own forms: describe's and get events' Event lines (the
// kubelet's and gpurun's), and a --previous log cut off mid-line.
func TestKubectlForms(t *testing.T) {
	sigbus := "Fatal Python error: Bus error\n"
	runKubeCases(t, []kubeCase{
		{"kubectl get events' back-off", "LAST SEEN   TYPE      REASON    OBJECT        MESSAGE\n" +
			"2m          Warning   BackOff   pod/train-0   Back-off restarting failed container trainer in pod train-0_default(6f1c9a2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b)\n" + ncclCreate,
			[]string{"shm-restart-leftovers", "nccl-shm-segment"}, Likely, nil},
		{"gpurun's ShmNotSized is context for a SIGBUS", evNotSized + sigbus, []string{"sigbus-in-context"}, Likely, nil},
		{"gpurun's ShmSized is context for a SIGBUS", evSized + sigbus, []string{"sigbus-in-context"}, Likely, nil},
		{"kubectl get events' ShmNotSized", "5m          Warning   ShmNotSized   pod/train-0   /dev/shm left at its size (container trainer): gpurun planned remount to 8GiB (50% of the 16GiB memory limit) but the pod is hostIPC\n" + sigbus,
			[]string{"sigbus-in-context"}, Likely, nil},
		// An Event's message is no error of the job's, whatever its words.
		{"gpurun's ShmSized alone", evSized, nil, "", nil},
		{"gpurun's ShmNotSized alone", evNotSized, nil, "", nil},
		{"gpurun's ShmSwept alone", evSwept, nil, "", nil},
		{"gpurun's ShmNearMemoryLimit alone", evNear, nil, "", nil},
		{"all of gpurun's Events, no kill", evSized + evNotSized + evSwept + evNear, nil, "", nil},
		{"a --previous log cut mid-line after its failure", "$ kubectl logs --previous train-0\n" + ncclFallocate + "train-0:43:97 [0] NCCL INFO transport/shm.cc:5",
			[]string{"shm-restart-leftovers", "nccl-posix-fallocate", "nccl-shm-segment"}, Likely, nil},
		{"a --previous log cut inside its failure", "$ kubectl logs --previous train-0\ntrain-0:43:97 [0] include/shm.h:28 NCCL WARN Call to posix_fall", nil, "", nil},
		{"a --previous log cut inside a character", "$ kubectl logs -p train-0\n" + torchAlloc + "Epoch 3:  41%|████\xe2\x96", []string{"shm-restart-leftovers", "torch-shm-file"}, Likely, nil},
		{"a --previous log whose last line is the failure, unfinished", "$ kubectl logs -p train-0\n" + strings.TrimSuffix(torchAlloc, "\n"),
			[]string{"shm-restart-leftovers", "torch-shm-file"}, Likely, nil},
	})
}

// The leftovers' finding shows the restart's line, and the OOM kill's the
// line that says how much /dev/shm held.
func TestKubeFindingLines(t *testing.T) {
	r := scanString(t, ncclCreate+backOffEvent, Options{})
	f := finding(t, r, "shm-restart-leftovers")
	if len(f.Lines) != 2 || f.Lines[0].N != 1 || !strings.Contains(f.Lines[1].Text, "Back-off restarting failed container") {
		t.Errorf("leftovers' lines %+v", f.Lines)
	}
	if !slices.Equal(f.Evidence, []string{"message", "restart"}) {
		t.Errorf("evidence %q", f.Evidence)
	}
	r = scanString(t, oomBlock+dfHeldLine, Options{})
	f = finding(t, r, "oom-kill-shm")
	if len(f.Lines) != 2 || !strings.Contains(f.Lines[0].Text, "Exit Code:    137") || !strings.Contains(f.Lines[1].Text, "7.6G") {
		t.Errorf("OOM's lines %+v", f.Lines)
	}
	if !slices.Equal(f.Evidence, []string{"oom-kill", "mention"}) {
		t.Errorf("evidence %q", f.Evidence)
	}
}

// The fixes: gpurun's restart sweep and a new pod for leftovers, never a
// wrapper that deletes segments; a higher memory limit, a smaller
// /dev/shm (the policy's size with its commands when the memory is known)
// and fewer segments for an OOM kill.
func TestKubeFix(t *testing.T) {
	steps := func(fx *Fix) string {
		var b strings.Builder
		for _, s := range fx.Steps {
			b.WriteString(s.Where + ": " + s.How + "\n")
		}
		return b.String()
	}
	r := scanString(t, "$ kubectl logs -p train-0\n"+torchAlloc, Options{})
	all := steps(r.Fix)
	for _, want := range []string{`sweep = "restart"`, "kubectl -n NAMESPACE delete pod POD", "not safe in general", "--shm-size=" + r.Fix.Size, "gpurun doctor"} {
		if !strings.Contains(all, want) {
			t.Errorf("leftovers' fix lacks %q:\n%s", want, all)
		}
	}

	r = scanString(t, oomBlock+dfHeldLine, Options{})
	if r.Fix == nil || r.Fix.Size != "" || r.Fix.SizeBytes != 0 {
		t.Fatalf("OOM's fix %+v: want no size to grow to", r.Fix)
	}
	all = steps(r.Fix)
	for _, want := range []string{"memory limit: raise it", "resources.limits.memory", "smaller shm: or give /dev/shm less", "sizeLimit", "SharedMemory.unlink()", "gpurun doctor"} {
		if !strings.Contains(all, want) {
			t.Errorf("OOM's fix lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "--shm-size=") {
		t.Errorf("OOM's fix with the memory unknown names a size:\n%s", all)
	}

	pol := policy.Default()
	mem := 16 * policy.GiB
	size, _ := pol.Target(policy.Request{MemoryLimit: mem})
	r = scanString(t, oomBlock+dfHeldLine, Options{Memory: mem})
	all = steps(r.Fix)
	for _, want := range []string{"give /dev/shm at most " + policy.FormatDocker(size), "docker run --shm-size=" + policy.FormatDocker(size),
		"sizeLimit: " + policy.FormatQuantity(size)} {
		if !strings.Contains(all, want) {
			t.Errorf("OOM's fix for %s lacks %q:\n%s", policy.FormatSize(mem), want, all)
		}
	}

	var b strings.Builder
	if err := WriteText(&b, scanString(t, ncclFallocate+backOffEvent, Options{Source: "train-0.log"})); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[likely, shm-restart-leftovers]", "evidence: message, restart", "Fix: give /dev/shm ", "  leftovers now:", "  leftovers gpurun:", "  leftovers wrapper:"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// A stream tells of the leftovers as soon as the restart's line arrives
// after the failure, and of the OOM kill as soon as its second line does.
func TestKubeStream(t *testing.T) {
	for _, tt := range []struct {
		log, id string
		line    int
	}{
		{ncclCreate + "step\n" + backOffEvent, "shm-restart-leftovers", 8},
		{oomBlock + dfHeldLine, "oom-kill-shm", 8},
	} {
		told := 0
		_, err := Scan(strings.NewReader(tt.log), Options{OnFinding: func(f Finding) {
			if f.Signature == tt.id {
				told = f.Lines[len(f.Lines)-1].N
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		if told != tt.line {
			t.Errorf("%s told at line %d, want %d", tt.id, told, tt.line)
		}
	}
}
