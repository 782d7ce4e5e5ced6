//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/node/nri"
	"github.com/gpurun/gpurun/policy"
)

// TestHostileRace races the check of a host tmpfs against its use, for
// real: while a front door grows the pod's own sandbox tmpfs (the one
// containerd named), a goroutine swaps the pod's sandbox directory with a
// symbolic link to /dev as fast as it can (renameat2 RENAME_EXCHANGE), so
// that <sandbox>/shm is the pod's tmpfs one moment and the host's
// /dev/shm the next. The shim (the gpurun-runtime binary, handing over to
// /bin/true: the race is in what it does before), the hook (the gpurun
// binary) and the NRI plugin (in this process) each run many times in the
// sandbox of runInSandbox, whose /dev/shm is a decoy. Each run may grow
// the pod's tmpfs or refuse; the decoy /dev/shm must never change. The
// test fails unless both outcomes were seen for every front door (the race
// was really run) and the decoy never grew.
func TestHostileRace(t *testing.T) {
	var res []raceResult
	runInSandbox(t, "race", raceInput{Runs: map[string]int{"shim": 150, "hook": 150, "nri": 3000}}, &res, 10*time.Minute)
	if len(res) != 3 {
		t.Fatalf("race results for %d front doors, want 3", len(res))
	}
	for _, r := range res {
		line := fmt.Sprintf("hostile race: %-4s %4d runs while the sandbox dir flipped %d times between a directory and a link to /dev: grew the pod's tmpfs %d, refused %d, grew the (decoy) host /dev/shm %d",
			r.Door, r.Runs, r.Exchanges, r.Grown, r.Refused, r.DecoyGrown)
		fmt.Println(line)
		t.Log(line)
		if r.DecoyGrown > 0 {
			t.Errorf("%s: the host's /dev/shm (the sandbox's decoy) was remounted %d times (the first: %v)", r.Door, r.DecoyGrown, r.Outside)
		}
		if r.Grown == 0 || r.Refused == 0 || r.Exchanges < r.Runs {
			t.Errorf("%s: the race was not run: %+v", r.Door, r)
		}
		if r.Errors != "" {
			t.Errorf("%s: %s", r.Door, r.Errors)
		}
	}
}

// raceInput is the race job's input: runs per front door.
type raceInput struct {
	Runs map[string]int
}

// raceResult is what one front door did in the race.
type raceResult struct {
	Door                                        string
	Runs, Exchanges, Grown, Refused, DecoyGrown int
	Outside                                     []string
	Errors                                      string
}

// runRaceJob runs the race in the sandbox, for each front door in turn.
func runRaceJob(job sandboxJob) (any, error) {
	var in raceInput
	if err := json.Unmarshal(job.Input, &in); err != nil {
		return nil, err
	}
	var out []raceResult
	for _, door := range []string{"shim", "hook", "nri"} {
		r, err := raceDoor(job, door, in.Runs[door])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", door, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// raceDoor races one front door.
func raceDoor(job sandboxJob, door string, runs int) (raceResult, error) {
	res := raceResult{Door: door, Runs: runs}
	dir := filepath.Join(job.Dir, "race-"+door)
	defer func() { _ = harness.UnmountAll(dir); _ = os.RemoveAll(dir) }()
	state := filepath.Join(dir, "state")
	sid, cid := hexID(1, 1), hexID(1, 2)
	sandboxes := filepath.Join(state, "io.containerd.grpc.v1.cri", "sandboxes")
	sandbox := filepath.Join(sandboxes, sid)
	shm := filepath.Join(sandbox, "shm")
	bundle := filepath.Join(state, "io.containerd.runtime.v2.task", "k8s.io", cid)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return res, err
	}
	if err := mountShm(shm); err != nil {
		return res, err
	}
	// The tmpfs, held open so that it can be put back to 64 MiB whatever
	// name its directory has at the moment.
	fd, err := unix.Open(shm, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return res, err
	}
	defer unix.Close(fd)
	viaFD := "/proc/self/fd/" + strconv.Itoa(fd)
	reset := func() error {
		return unix.Mount("", viaFD, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=65536k")
	}
	swap := filepath.Join(sandboxes, sid+".swap")
	if err := os.Symlink("/dev", swap); err != nil {
		return res, err
	}
	logFile := filepath.Join(dir, "gpurun.log")
	polPath := filepath.Join(dir, "config.toml")
	polText := fmt.Sprintf("log_file = %q\nruntime = \"true\"\n", logFile)
	if err := os.WriteFile(polPath, []byte(polText), 0o644); err != nil {
		return res, err
	}
	config := fmt.Sprintf(`{"ociVersion": "1.0.2", "process": {"args": ["true"], "env": [%q], "cwd": "/"}, "root": {"path": "/"},
"mounts": [{"destination": "/dev/shm", "type": "bind", "source": %q, "options": ["rbind", "rw"]}],
"annotations": {"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": %q}}`, hostileGPUEnv, shm, sid)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(config), 0o644); err != nil {
		return res, err
	}
	state0 := fmt.Sprintf(`{"ociVersion": "1.0.2", "id": %q, "status": "creating", "pid": %d, "bundle": %q}`, cid, os.Getpid(), bundle)
	var one func() error
	switch door {
	case "shim":
		env := append(os.Environ(), policy.ConfigEnv+"="+polPath)
		one = func() error {
			_, stderr, err := command(time.Minute, nil, env, filepath.Join(job.Bin, "gpurun-runtime"), "--root", filepath.Join(dir, "runc"), "create", "--bundle", bundle, cid)
			if err != nil {
				return fmt.Errorf("%v: %s", err, stderr)
			}
			return nil
		}
	case "hook":
		one = func() error {
			_, stderr, err := command(time.Minute, []byte(state0), os.Environ(), filepath.Join(job.Bin, "gpurun"), "hook", "--config", polPath)
			if err != nil {
				return fmt.Errorf("%v: %s", err, stderr)
			}
			return nil
		}
	case "nri":
		pol, err := policy.Parse(polPath, []byte(polText))
		if err != nil {
			return res, err
		}
		p := nri.New(nri.Config{Policy: pol, Logger: slog.New(slog.DiscardHandler)})
		// The pod's sandbox, whose /dev/shm is the tmpfs: containerd gives
		// NRI its pid, and the state dir is not under engine_roots.
		pid, stopSandbox, err := podSandbox(shm)
		if err != nil {
			return res, err
		}
		defer stopSandbox()
		pod := &api.PodSandbox{Id: sid, Name: "race", Namespace: "default", Pid: uint32(pid)}
		ctr := &api.Container{Id: cid, PodSandboxId: sid, Name: "race", Env: []string{hostileGPUEnv},
			Mounts: []*api.Mount{{Destination: "/dev/shm", Type: "bind", Source: shm, Options: []string{"rbind", "rw"}}}}
		one = func() error {
			_, _, err := p.CreateContainer(context.Background(), pod, ctr)
			return err
		}
	}

	var exchanges atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // a thread of its own, flipping
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, sandbox, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE); err != nil {
				done <- fmt.Errorf("exchange %s and %s: %w", sandbox, swap, err)
				return
			}
			exchanges.Add(1)
		}
	}()
	var runErr error
	for i := 0; i < runs; i++ {
		if err := reset(); err != nil {
			runErr = fmt.Errorf("reset the pod's tmpfs: %w", err)
			break
		}
		if err := one(); err != nil {
			runErr = fmt.Errorf("run %d: %w", i, err)
			break
		}
		if n := tmpfsBytes("/dev/shm"); n != 64<<20 {
			res.DecoyGrown++
			if len(res.Outside) < 5 {
				res.Outside = append(res.Outside, fmt.Sprintf("run %d: /dev/shm %d bytes", i, n))
			}
			_ = unix.Mount("", "/dev/shm", "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=65536k")
		}
		var st unix.Statfs_t
		if err := unix.Fstatfs(fd, &st); err != nil {
			runErr = err
			break
		}
		if int64(st.Blocks)*st.Bsize > 64<<20 {
			res.Grown++
		} else {
			res.Refused++
		}
	}
	close(stop)
	if err := <-done; err != nil && runErr == nil {
		runErr = err
	}
	res.Exchanges = int(exchanges.Load())
	if runErr != nil {
		res.Errors = runErr.Error()
	}
	return res, nil
}
