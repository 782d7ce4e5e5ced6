package harness

import "golang.org/x/sys/unix"

// writeSyscalls are the system calls that change a file, by number; opens
// are in openSyscall.
var writeSyscalls = map[uint64]string{
	unix.SYS_WRITE: "write", unix.SYS_PWRITE64: "pwrite64", unix.SYS_WRITEV: "writev",
	unix.SYS_PWRITEV: "pwritev", unix.SYS_PWRITEV2: "pwritev2",
	unix.SYS_FSYNC: "fsync", unix.SYS_FDATASYNC: "fdatasync", unix.SYS_SYNC_FILE_RANGE: "sync_file_range",
	unix.SYS_RENAME: "rename", unix.SYS_RENAMEAT: "renameat", unix.SYS_RENAMEAT2: "renameat2",
	unix.SYS_UNLINK: "unlink", unix.SYS_UNLINKAT: "unlinkat", unix.SYS_RMDIR: "rmdir",
	unix.SYS_MKDIR: "mkdir", unix.SYS_MKDIRAT: "mkdirat", unix.SYS_CREAT: "creat",
	unix.SYS_CHMOD: "chmod", unix.SYS_FCHMOD: "fchmod", unix.SYS_FCHMODAT: "fchmodat",
	unix.SYS_CHOWN: "chown", unix.SYS_FCHOWN: "fchown", unix.SYS_LCHOWN: "lchown", unix.SYS_FCHOWNAT: "fchownat",
	unix.SYS_TRUNCATE: "truncate", unix.SYS_FTRUNCATE: "ftruncate", unix.SYS_FALLOCATE: "fallocate",
	unix.SYS_LINK: "link", unix.SYS_LINKAT: "linkat", unix.SYS_SYMLINK: "symlink", unix.SYS_SYMLINKAT: "symlinkat",
	unix.SYS_COPY_FILE_RANGE: "copy_file_range", unix.SYS_SENDFILE: "sendfile",
}

// openSyscall says whether nr opens a file, and which argument holds its
// flags (-1: always counted, as openat2's are in a struct).
func openSyscall(nr uint64) (name string, flagArg int, ok bool) {
	switch nr {
	case unix.SYS_OPEN:
		return "open", 1, true
	case unix.SYS_OPENAT:
		return "openat", 2, true
	case unix.SYS_OPENAT2:
		return "openat2", -1, true
	}
	return "", 0, false
}

// syscallAt reads the number and first arguments of the system call the
// thread tid is stopped at.
func syscallAt(tid int) (uint64, [6]uint64, error) {
	var r unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &r); err != nil {
		return 0, [6]uint64{}, err
	}
	return r.Orig_rax, [6]uint64{r.Rdi, r.Rsi, r.Rdx, r.R10, r.R8, r.R9}, nil
}
