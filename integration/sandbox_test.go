//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/integration/harness"
)

// sandboxEnv names the job file of a test binary re-executed as a sandbox
// (see runInSandbox). Only this test binary's TestMain reads it; gpurun's
// own binaries know nothing of it.
const sandboxEnv = "GPURUN_TEST_SANDBOX_JOB"

// sandboxJob is what the parent test hands the sandbox.
type sandboxJob struct {
	// Name picks the job (see sandboxRun).
	Name string `json:"name"`
	// Dir is the job's work directory, made (and removed) by the parent.
	Dir string `json:"dir"`
	// Bin holds the gpurun binaries under test.
	Bin string `json:"bin"`
	// CgroupParent is the cgroup the job's containers are created under.
	CgroupParent string `json:"cgroup_parent"`
	// HostMountNS is the parent's mount namespace (readlink of
	// /proc/self/ns/mnt): the sandbox refuses to run in it.
	HostMountNS string `json:"host_mount_ns"`
	// Input is the job's own input.
	Input json.RawMessage `json:"input"`
	// Result is where the sandbox writes the job's result (JSON).
	Result string `json:"result"`
}

// hostShmState is what the machine's own /dev/shm looks like: the sandboxes
// must never change it.
type hostShmState struct {
	Bytes   int64
	Options string // the mount's per-mount and super options
}

func readHostShm(t *testing.T) hostShmState {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil {
		t.Fatalf("statfs /dev/shm: %v", err)
	}
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter("/dev/shm"))
	if err != nil || len(ms) == 0 {
		t.Fatalf("the host's /dev/shm in the mount table: %v", err)
	}
	m := ms[len(ms)-1]
	return hostShmState{Bytes: int64(st.Blocks) * st.Bsize, Options: m.Options + " " + m.VFSOptions}
}

// runInSandbox runs the job name in a copy of this test binary started in
// a new mount namespace (all mounts private) and a new PID namespace, with
// a fresh /proc and a decoy 64 MiB tmpfs over /dev/shm (the machine's
// /run/shm is a link to it; a decoy is mounted there too where it is a
// directory): whatever the front doors under test do there, including
// remounting what they take for the host's /dev/shm, stays in the
// sandbox, and a host pid named in a hostile OCI state cannot reach the
// machine's own processes. The containers the job runs with runc are
// created under a cgroup of the test's own, which the cleanup removes. The
// parent checks that the machine's /dev/shm is unchanged and that nothing
// is left mounted below the work directory, then decodes the job's result
// into result.
func runInSandbox(t *testing.T, name string, input, result any, timeout time.Duration) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gpurun-hs-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cgroup := "/" + filepath.Base(dir)
	t.Cleanup(func() {
		if err := harness.RemoveCgroup(cgroup); err != nil {
			t.Errorf("remove cgroup %s: %v", cgroup, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	job := sandboxJob{Name: name, Dir: filepath.Join(dir, "work"), Bin: filepath.Dir(bin(t, "gpurun")), CgroupParent: cgroup,
		HostMountNS: mustReadlink(t, "/proc/self/ns/mnt"), Input: in, Result: filepath.Join(dir, "result.json")}
	if err := os.Mkdir(job.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	jobPath := filepath.Join(dir, "job.json")
	data, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jobPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "sandbox.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()

	before := readHostShm(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), sandboxEnv+"="+jobPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	begin := time.Now()
	runErr := cmd.Run()
	t.Logf("sandbox %s ran %s", name, time.Since(begin).Round(time.Millisecond))
	if after := readHostShm(t); after != before {
		t.Errorf("the machine's /dev/shm changed while the sandbox ran: %+v -> %+v", before, after)
	}
	if left, err := harness.MountPoints(dir); err != nil || len(left) > 0 {
		t.Errorf("mounts left below %s in the machine's namespace: %v %v", dir, left, err)
	}
	if runErr != nil {
		t.Fatalf("sandbox %s: %v\n%s", name, runErr, tail(readFile(logPath), 60))
	}
	out, err := os.ReadFile(job.Result)
	if err != nil {
		t.Fatalf("sandbox %s wrote no result: %v\n%s", name, err, tail(readFile(logPath), 60))
	}
	if err := json.Unmarshal(out, result); err != nil {
		t.Fatalf("sandbox %s result: %v", name, err)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sandboxMain is the test binary when runInSandbox started it: it sets the
// sandbox up, runs the job and writes its result. It returns the exit
// status.
func sandboxMain(jobPath string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "sandbox: %v\n", err)
		return 3
	}
	data, err := os.ReadFile(jobPath)
	if err != nil {
		return fail(err)
	}
	var job sandboxJob
	if err := json.Unmarshal(data, &job); err != nil {
		return fail(err)
	}
	if err := enterSandbox(job); err != nil {
		return fail(err)
	}
	res, err := sandboxRun(job)
	if err != nil {
		return fail(fmt.Errorf("job %s: %w", job.Name, err))
	}
	out, err := json.Marshal(res)
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(job.Result, out, 0o644); err != nil {
		return fail(err)
	}
	return 0
}

// sandboxRun runs the job job.Name names.
func sandboxRun(job sandboxJob) (any, error) {
	switch job.Name {
	case "corpus":
		return runCorpusJob(job)
	case "race":
		return runRaceJob(job)
	}
	return nil, fmt.Errorf("no sandbox job %q", job.Name)
}

// enterSandbox makes the namespaces this process was started in (a new
// mount and PID namespace, see runInSandbox) a sandbox: every mount
// private, a /proc of the new PID namespace, and a decoy 64 MiB tmpfs at
// /dev/shm. It refuses to do anything in the machine's own mount
// namespace, or outside a PID namespace of its own.
func enterSandbox(job sandboxJob) error {
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	if ns == job.HostMountNS {
		return errors.New("started in the machine's own mount namespace: refusing to mount anything")
	}
	if os.Getpid() != 1 {
		return fmt.Errorf("pid %d: not the first process of a PID namespace of its own", os.Getpid())
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make every mount private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, p := range []string{"/dev/shm", "/run/shm"} {
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue // absent, or a link to /dev/shm
		}
		if err := unix.Mount("shm", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=65536k,mode=1777"); err != nil {
			return fmt.Errorf("decoy %s: %w", p, err)
		}
	}
	if n := tmpfsBytes("/dev/shm"); n != 64<<20 {
		return fmt.Errorf("decoy /dev/shm is %d bytes, not 64 MiB", n)
	}
	return nil
}

// tmpfsBytes returns the size of the filesystem at path, -1 if it cannot.
func tmpfsBytes(path string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return -1
	}
	if st.Bsize > 0 && st.Blocks > uint64(math.MaxInt64/st.Bsize) {
		return math.MaxInt64 // an 8 EiB tmpfs; no overflow
	}
	return int64(st.Blocks) * st.Bsize
}
