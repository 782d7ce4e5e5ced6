//go:build linux

package shmprobe

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/policy"
)

// The test binary doubles as the DataLoader probe's worker: DataLoader
// re-executes it with workerEnv set, as gpurun re-executes itself.
const (
	workerEnv = "GPURUN_SHMPROBE_TEST_WORKER"
	// shrinkEnv names a worker index whose file the worker shrinks to half
	// between mapping and touching, so that its second half raises SIGBUS
	// as a full tmpfs would.
	shrinkEnv = "GPURUN_SHMPROBE_TEST_SHRINK"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		args := os.Args[len(os.Args)-3:]
		var afterMap func(*os.File)
		if os.Getenv(shrinkEnv) == args[2] {
			size, _ := strconv.ParseInt(args[1], 10, 64)
			afterMap = func(f *os.File) {
				if err := f.Truncate(size / 2); err != nil {
					panic(err)
				}
			}
		}
		if err := runWorker(args, os.Stdin, os.Stdout, afterMap); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// workerCommand re-executes the test binary as a worker.
func workerCommand(env ...string) func([]string) *exec.Cmd {
	return func(args []string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
		cmd.Env = append(append(os.Environ(), workerEnv+"=1"), env...)
		return cmd
	}
}

// assertEmpty fails when a probe left files in dir.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("probe left %s in %s", e.Name(), dir)
	}
}

// Fault is what a segment with only its first half backed raises: the
// same SIGBUS a full tmpfs gives, without needing one (or root).
func TestTouchCatchesSIGBUS(t *testing.T) {
	page := int64(os.Getpagesize())
	for _, tt := range []struct {
		name         string
		pages, valid int64
	}{
		{"all backed", 16, 16},
		{"half backed", 16, 8},
		{"none backed", 16, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := openUnlinked(t.TempDir(), "touch-")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			touched, fault, err := touchFile(f, 0, tt.pages*page, func(f *os.File) {
				if err := f.Truncate(tt.valid * page); err != nil {
					t.Fatal(err)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if wantFault := tt.valid < tt.pages; fault != wantFault {
				t.Errorf("fault = %v, want %v", fault, wantFault)
			}
			if touched != tt.valid*page {
				t.Errorf("touched %d bytes, want %d", touched, tt.valid*page)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int64{0, 1, checkChunk, 3*checkChunk + 12345} {
		t.Run(strconv.FormatInt(size, 10), func(t *testing.T) {
			r := Check(dir, size)
			if !r.OK() || r.Allocated != size || r.Requested != size {
				t.Errorf("Check(%d) = %+v", size, r)
			}
			if !strings.HasPrefix(r.String(), "size: ok: allocated "+policy.FormatSize(size)) {
				t.Errorf("String() = %q", r.String())
			}
			assertEmpty(t, dir)
		})
	}
	t.Run("missing dir", func(t *testing.T) {
		missing := filepath.Join(dir, "missing")
		r := Check(missing, policy.MiB)
		if r.Failure != FailureSetup || !strings.Contains(r.Err, missing) || r.Allocated != 0 {
			t.Errorf("Check(missing) = %+v", r)
		}
	})
	t.Run("negative size", func(t *testing.T) {
		if r := Check(dir, -1); r.Failure != FailureSetup {
			t.Errorf("Check(-1) = %+v", r)
		}
	})
}

func TestDataLoader(t *testing.T) {
	seg := 2 * policy.MiB
	tests := []struct {
		name     string
		workers  int
		shrink   int // worker index whose file is half backed; -1 none
		wantFail Failure
	}{
		{"all workers fit", 3, -1, FailureNone},
		{"one worker runs out", 3, 1, FailureSIGBUS},
		{"single worker runs out", 1, 0, FailureSIGBUS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			r, err := DataLoader(context.Background(), DataLoaderOptions{
				Dir: dir, Workers: tt.workers, SegmentSize: seg,
				Command: workerCommand(shrinkEnv + "=" + strconv.Itoa(tt.shrink)),
			})
			if err != nil {
				t.Fatal(err)
			}
			if r.Failure != tt.wantFail {
				t.Errorf("failure %q, want %q: %s", r.Failure, tt.wantFail, r)
			}
			if len(r.Results) != tt.workers {
				t.Fatalf("%d results for %d workers", len(r.Results), tt.workers)
			}
			wantOK := tt.workers
			if tt.shrink >= 0 {
				wantOK--
			}
			if r.OK != wantOK {
				t.Errorf("%d workers ok, want %d: %s", r.OK, wantOK, r)
			}
			for _, w := range r.Results {
				if w.Index == tt.shrink {
					if w.Signal != "SIGBUS" || w.Failure != FailureSIGBUS || w.ExitCode != -1 || w.Touched != seg/2 {
						t.Errorf("shrunk worker %+v; want killed by SIGBUS after %d bytes", w, seg/2)
					}
					if !strings.Contains(r.String(), fmt.Sprintf("worker %d (pid %d) killed by SIGBUS after %s", w.Index, w.PID, policy.FormatSize(seg/2))) {
						t.Errorf("String() = %q does not name worker %d", r.String(), w.Index)
					}
					continue
				}
				if w.Failure != FailureNone || w.Touched != seg || w.ExitCode != 0 || w.PID == 0 {
					t.Errorf("worker %+v; want %d bytes touched, exit 0", w, seg)
				}
			}
			assertEmpty(t, dir)
		})
	}
}

func TestDataLoaderErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		o    DataLoaderOptions
		want string
	}{
		{"no command", DataLoaderOptions{Dir: dir}, "no worker command"},
		{"missing dir", DataLoaderOptions{Dir: filepath.Join(dir, "nope"), Command: workerCommand()}, "no such file"},
		{"negative workers", DataLoaderOptions{Dir: dir, Workers: -1, Command: workerCommand()}, "-1 workers"},
		{"worker binary missing", DataLoaderOptions{Dir: dir, Workers: 1, Command: func(args []string) *exec.Cmd {
			return exec.Command(filepath.Join(dir, "no-such-binary"), args...)
		}}, "start worker 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DataLoader(context.Background(), tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	t.Run("worker fails", func(t *testing.T) {
		r, err := DataLoader(context.Background(), DataLoaderOptions{Dir: dir, Workers: 1, Command: func(args []string) *exec.Cmd {
			// A worker given a directory that does not exist.
			args[0] = filepath.Join(dir, "gone")
			return workerCommand()(args)
		}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Failure != FailureOther || r.OK != 0 || !strings.Contains(r.Results[0].Message, "gone") {
			t.Errorf("result %+v", r)
		}
	})
}

func TestRunWorkerArgs(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{nil, {dir, "x", "0"}, {dir, "-1", "0"}, {dir, "1", "zero"}} {
		var out strings.Builder
		if err := RunWorker(args, strings.NewReader(""), &out); err == nil || !strings.HasPrefix(out.String(), "error worker") {
			t.Errorf("RunWorker(%q) = %v, output %q; want an error line", args, err, out.String())
		}
	}
	var out strings.Builder
	if err := RunWorker(WorkerArgs(dir, 3*int64(os.Getpagesize()), 7), strings.NewReader(""), &out); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("ok %d\n", 3*os.Getpagesize()); out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	assertEmpty(t, dir)
}

func TestNCCL(t *testing.T) {
	if NCCLSegmentSize != 9637888 {
		t.Errorf("NCCLSegmentSize = %d, want the 9637888 of NCCL's 'Error while creating shared memory segment ... (size 9637888)'", NCCLSegmentSize)
	}
	dir := t.TempDir()
	r := NCCL(NCCLOptions{Dir: dir, SegmentSize: policy.MiB, Count: 3})
	if r.Failure != FailureNone || r.Created != 3 || r.Count != 3 {
		t.Errorf("NCCL = %+v", r)
	}
	if !strings.HasPrefix(r.String(), "nccl: ok: created 3 of 3 segments of 1048576 bytes") {
		t.Errorf("String() = %q", r.String())
	}
	assertEmpty(t, dir)
	if r := NCCL(NCCLOptions{Dir: filepath.Join(dir, "missing"), Count: 2}); r.Failure != FailureSetup || r.Created != 0 {
		t.Errorf("NCCL(missing dir) = %+v", r)
	}
	if r := NCCL(NCCLOptions{Dir: dir, Count: -1}); r.Failure != FailureSetup {
		t.Errorf("NCCL(count -1) = %+v", r)
	}
}

func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want Failure
		exit int
	}{
		{nil, FailureNone, 0},
		{unix.ENOSPC, FailureENOSPC, 1},
		{fmt.Errorf("fallocate: %w", unix.ENOSPC), FailureENOSPC, 1},
		{unix.ENOMEM, FailureOther, 1},
		{errors.New("odd"), FailureOther, 1},
	} {
		got := classify(tt.err)
		if got != tt.want || ExitStatus(got) != tt.exit {
			t.Errorf("classify(%v) = %q (exit %d), want %q (exit %d)", tt.err, got, ExitStatus(got), tt.want, tt.exit)
		}
	}
	if ExitStatus(FailureSIGBUS) != 1 || ExitStatus(FailureSetup) != 2 {
		t.Error("ExitStatus: SIGBUS must be 1, setup 2")
	}
	if got := errnoName(fmt.Errorf("x: %w", unix.ENOSPC)); got != "ENOSPC" {
		t.Errorf("errnoName = %q", got)
	}
}

func TestStatFS(t *testing.T) {
	fs := StatFS(t.TempDir())
	if fs.Size <= 0 || fs.Free < 0 || fs.Free > fs.Size {
		t.Errorf("StatFS = %+v", fs)
	}
	if got := StatFS(filepath.Join(t.TempDir(), "missing")); got != (FS{}) || got.String() != "size unknown" {
		t.Errorf("StatFS(missing) = %+v %q", got, got.String())
	}
}
