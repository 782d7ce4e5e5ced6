// Package shmsweep removes a dead container instance's leftovers from a
// Kubernetes pod's shared /dev/shm when the container restarts.
//
// A pod's /dev/shm (containerd's sandbox tmpfs
// <state>/io.containerd.grpc.v1.cri/sandboxes/<sandbox-id>/shm, CRI-O's and
// Podman's .../userdata/shm, or a kubelet Memory emptyDir bind-mounted at
// /dev/shm) lives as long as the pod. A container killed mid-run (OOM kill,
// SIGKILL) leaves its segments there (NCCL nccl-*, PyTorch torch_*, SGLang
// sgl_shm_*, Ray's files), and the restarted container finds /dev/shm full
// and dies again: a crashloop. Docker gives a restarted container a fresh
// /dev/shm; Kubernetes does not.
//
// # The rules
//
// At each start of a container in a pod, the caller calls [Sweep].
//
//  1. First start (no record for this sandbox id + container name in the
//     state dir): remove nothing; record a snapshot: the inode numbers of
//     every regular file in the pod's /dev/shm now. A record made for
//     another device (the pod's /dev/shm is not the tmpfs it was) counts as
//     none; so does one that cannot be read, which is replaced and reported
//     as an error.
//  2. Restart (a record exists): candidates are regular files (at any depth,
//     on the same device — never descend into another filesystem, never
//     follow a symlink) whose inode is NOT in the earlier instance's start
//     snapshot. So anything there before the earlier instance started (an
//     init container's file, a sibling's file from before) is never a
//     candidate.
//  3. Never remove a file any live process holds: open (/proc/*/fd/*: stat
//     follows the magic link to dev+ino) or mapped (/proc/*/maps: "addr perms
//     offset maj:min inode path", device in hex). Scan all processes under
//     Options.Proc, but only when there is at least one candidate (this runs
//     on every container start of a node: the common path must stay cheap).
//     A process that is there but cannot be read makes the scan fail, and
//     rule 6 applies, when it is in the pod's memory cgroup (or its own
//     cgroup cannot be read either); one outside the pod is ruled out: it
//     could reach the pod's /dev/shm only through the node's path to it,
//     which no runtime, kubelet or agent keeps open, and some sandboxes keep
//     even root from their init's descriptors.
//  4. Attribution — tell the earlier instance's own files from a live
//     sibling container's: tmpfs pages are charged to the memory cgroup of
//     the process that first touched them. For a candidate, find the memcg
//     its first resident page is charged to: open it, lseek(SEEK_DATA) to the
//     first data offset (ENXIO = no data), mmap ONE page there read-only
//     MAP_SHARED, read a byte of it, read /proc/self/pagemap at
//     (vaddr/pagesize)*8 (bit 63 present, bits 0–54 PFN), then
//     /proc/kpagecgroup at PFN*8: the inode number of the memcg directory. A
//     live cgroup reports its own directory's inode; after the cgroup is
//     removed the page reports the removed directory's old inode for a moment
//     and then the nearest live ancestor's. Never fault in a hole (a
//     MAP_SHARED read fault on a tmpfs hole allocates a page): only the
//     offset SEEK_DATA returned is touched, and only after mincore says its
//     page is in memory (a page swapped out counts as no resident page: a
//     read would swap it in and charge it anew). Rule: if the charge is a
//     LIVE cgroup directory of another container of this pod (a child
//     directory of the pod's memory cgroup, or a directory below one, other
//     than the sandbox's (pause) own and other than the starting container's
//     own, which may already exist for an OCI hook), the file is a sibling's:
//     keep it. A container's directory is live when it or a directory below
//     it holds a process (cgroup.procs): the directory of a container that
//     has exited but not yet been deleted holds none. Otherwise (charged to
//     the pod's cgroup itself, or to a directory that no longer exists or
//     holds no process, or elsewhere) it is a dead instance's: remove it.
//  5. A candidate with no resident page (empty, or never written): it frees
//     nothing and has no charge to tell its writer; remove it only when no
//     other container of the pod is live (no child cgroup of the pod other
//     than the sandbox's and the starting container's own holds a process,
//     per cgroup.procs); otherwise keep it ("cannot tell whose").
//  6. When attribution cannot be made at all (kpagecgroup or pagemap
//     unreadable, the pod's memory cgroup directory not found, the
//     cgroupsPath not understood, a process of the pod not readable, a
//     candidate that cannot be read): remove nothing; say why in the result
//     (never guess).
//  7. After the sweep, rewrite this container's record with the snapshot of
//     what is there now (so the next restart compares against this
//     instance's start). Two kinds of file stay out of it, so that the next
//     restart judges them again: one the sweep meant to remove but could
//     not, and one kept because attribution could not be made at all (rule
//     6). The record is not rewritten when it would not change (a restart
//     with nothing new writes nothing).
//  8. Directories, symlinks, sockets, fifos are never removed. Never anything
//     outside ShmDir: every path is reached from ShmDir's descriptor one
//     component at a time without following a symlink, and a file is
//     removed only when its name still holds the inode the sweep judged.
//     Refuse ([ErrRefused], nothing removed) when ShmDir is not a tmpfs
//     (statfs magic TMPFS_MAGIC) or is the same device as the host's
//     /dev/shm as seen at <Proc>/1/root/dev/shm (if that is readable), or
//     as this process's own /dev/shm.
//
// # Where it looks
//
// Options.Proc must show every process of the node (the host's PID
// namespace), and Options.CgroupRoot the host's cgroup hierarchy: a process
// that the sweep cannot see is a holder it cannot respect, and a sibling it
// cannot see is one whose files it would take for a dead instance's.
//
// The pod's memory cgroup comes from the starting container's
// linux.cgroupsPath, in runc's two forms: cgroupfs
// ("/kubepods/burstable/pod<uid>/<container-id>": the pod's cgroup is the
// parent directory) and systemd
// ("kubepods-burstable-pod<uid>.slice:cri-containerd:<container-id>": the
// slice expanded as systemd expands it, the container's unit
// "<prefix>-<name>.scope"). The memory hierarchy is cgroup v2 when
// <CgroupRoot>/cgroup.controllers exists, else v1's <CgroupRoot>/memory. The
// sandbox's (pause) cgroup is the child whose name contains the sandbox id;
// the starting container's own is the one the cgroupsPath names, or one
// whose name contains its container id (CRI-O's crio-conmon-<id>.scope).
//
// # State
//
// Options.StateDir holds <sandbox-id>/<container-name>, the snapshot of one
// container (binary: a magic line, the device, the sorted inode numbers as
// varint deltas; written atomically), and <sandbox-id>/.shmdir, the ShmDir
// the sandbox's records are for, so that [GC] can drop the records of pods
// whose ShmDir is gone. [Forget] drops one sandbox's records.
//
// [Walk] and [Held] are the two mechanisms on their own: the regular files
// of a tmpfs by inode, and which of them some process holds.
package shmsweep
