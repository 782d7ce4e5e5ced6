package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// CrashRun is what RunKilledAt saw of one run of a command.
type CrashRun struct {
	// Steps is how many write steps (see RunKilledAt) the command entered,
	// the one it was killed at included.
	Steps int
	// Killed says the command was killed with SIGKILL as it entered write
	// step number Steps, a system call named At (e.g. "renameat"), before
	// the kernel carried it out.
	Killed bool
	At     string
	// ExitCode is the command's exit status when it was not killed.
	ExitCode int
	// Stdout and Stderr are what it printed.
	Stdout, Stderr string
}

// RunKilledAt runs argv with env under ptrace(2), counting, across all its
// threads and the processes it starts, the system calls that change a file
// — write steps: writes, fsync, rename, unlink, mkdir, chmod, chown,
// truncate, link and the opens that create or write — and sends SIGKILL
// to every one of its processes as it enters write step number k, so the
// step is not carried out: the files are left exactly as a power cut or
// an OOM kill between two steps leaves them. k <= 0 never kills (a run
// that counts the steps).
//
// Unlike strace's fault injection, which counts per thread, the count is
// one order over every thread, so k = 1, 2, ... Steps of an uninterrupted
// run reaches each step of a command whose steps run in one order.
func RunKilledAt(argv, env []string, k int) (CrashRun, error) {
	var res CrashRun
	out, err := os.CreateTemp("", "gpurun-crash-out-")
	if err != nil {
		return res, fmt.Errorf("stdout file: %w", err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	errf, err := os.CreateTemp("", "gpurun-crash-err-")
	if err != nil {
		return res, fmt.Errorf("stderr file: %w", err)
	}
	defer os.Remove(errf.Name())
	defer errf.Close()

	// Every ptrace request must come from the thread that is the tracer:
	// the one that started the command.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, errf
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start %s: %w", argv[0], err)
	}
	pid := cmd.Process.Pid
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return res, fmt.Errorf("wait for %s to stop at exec: %w", argv[0], err)
	}
	const opts = unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEFORK |
		unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_EXITKILL
	if err := unix.PtraceSetOptions(pid, opts); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return res, fmt.Errorf("ptrace options: %w", err)
	}
	if err := unix.PtraceSyscall(pid, 0); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return res, fmt.Errorf("ptrace resume: %w", err)
	}

	inSyscall := map[int]bool{}
	var loopErr error
	for {
		tid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ECHILD) {
			break
		}
		if err != nil {
			loopErr = fmt.Errorf("wait: %w", err)
			_ = unix.Kill(-pid, unix.SIGKILL)
			break
		}
		switch {
		case ws.Exited() || ws.Signaled():
			delete(inSyscall, tid)
			if tid == pid && ws.Exited() {
				res.ExitCode = ws.ExitStatus()
			}
			continue
		case !ws.Stopped():
			continue
		}
		sig := ws.StopSignal()
		resume := 0
		switch {
		case sig == unix.SIGTRAP|0x80: // a system call stop (TRACESYSGOOD)
			entering := !inSyscall[tid]
			inSyscall[tid] = entering
			if entering && !res.Killed {
				if name, ok := writeStep(tid); ok {
					res.Steps++
					if res.Steps == k {
						res.Killed, res.At = true, name
						// The whole process group: the command and
						// whatever it started. A tracee stopped at a
						// system call's entry with SIGKILL pending
						// dies without carrying it out.
						_ = unix.Kill(-pid, unix.SIGKILL)
					}
				}
			}
		case sig == unix.SIGTRAP && ws.TrapCause() > 0: // clone, fork, exec events
		case sig == unix.SIGSTOP:
			// A new thread or child starts stopped; a real SIGSTOP to a
			// running command is not something these commands get.
		default:
			resume = int(sig) // a signal for the command: deliver it
		}
		// ESRCH: killed (or gone) meanwhile; its exit comes next.
		if err := unix.PtraceSyscall(tid, resume); err != nil && !errors.Is(err, unix.ESRCH) {
			loopErr = fmt.Errorf("ptrace resume %d: %w", tid, err)
		}
	}
	data, _ := os.ReadFile(out.Name())
	res.Stdout = string(data)
	data, _ = os.ReadFile(errf.Name())
	res.Stderr = string(data)
	return res, loopErr
}

// writeStep reports whether the thread tid, stopped at a system call's
// entry, is about to change a file, and the call's name.
func writeStep(tid int) (string, bool) {
	nr, args, err := syscallAt(tid)
	if err != nil {
		return "", false
	}
	if name, ok := writeSyscalls[nr]; ok {
		return name, true
	}
	if name, flagArg, ok := openSyscall(nr); ok {
		const writes = unix.O_WRONLY | unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC | unix.O_APPEND
		if flagArg < 0 || args[flagArg]&writes != 0 {
			return name, true
		}
	}
	return "", false
}
