package shmsweep

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// verdict is what the sweep makes of one candidate: why it is kept, ""
// to remove it, or gone (removed or replaced by someone else meanwhile).
type verdict struct {
	ino  uint64
	why  string
	gone bool
}

// sweep judges the candidates (rules 3–6), removes those of a dead
// instance and fills res. It returns the inodes to leave out of the next
// snapshot: removed, gone, meant to be removed and not (so that the next
// restart tries again), and kept unattributed (so that the next restart
// judges them, when attribution may work).
func (r shmRoot) sweep(o Options, s Start, cands map[uint64]File, res *Result) (map[uint64]bool, error) {
	drop := map[uint64]bool{}
	if len(cands) == 0 {
		return drop, nil
	}
	var errs []error
	for _, v := range r.judge(o, s, cands, res, drop) {
		f := cands[v.ino]
		switch {
		case v.gone:
			drop[v.ino] = true
		case v.why != "":
			res.keep(f, v.why)
			drop[v.ino] = v.why == KeptUnattributed
		default:
			drop[v.ino] = true
			removed, err := removeAt(r.fd, r.dev, v.ino, f.rel())
			if err != nil {
				errs = append(errs, fmt.Errorf("remove %s: %w", f.Name, err))
			}
			if removed {
				res.Swept = append(res.Swept, f)
				res.SweptBytes += f.Bytes
			}
		}
	}
	slices.SortFunc(res.Swept, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(res.Kept, func(a, b Kept) int { return strings.Compare(a.Name, b.Name) })
	return drop, errors.Join(errs...)
}

// size fills the candidates' Bytes (the walk stats none), and moves those
// gone or replaced since the walk from cands to drop.
func (r shmRoot) size(cands map[uint64]File, drop map[uint64]bool) error {
	for ino, f := range cands {
		n, err := statAt(r.fd, r.dev, ino, f.rel())
		if errors.Is(err, errChanged) {
			delete(cands, ino)
			drop[ino] = true
			continue
		}
		if err != nil {
			return fmt.Errorf("candidate %s: %w", f.Name, err)
		}
		f.Bytes = n
		cands[ino] = f
	}
	return nil
}

// judge returns a verdict for every candidate still there (those gone
// since the walk go to drop). When attribution cannot be made at all, it
// keeps every candidate not held and says why in res.NoAttribution.
func (r shmRoot) judge(o Options, s Start, cands map[uint64]File, res *Result, drop map[uint64]bool) []verdict {
	err := r.size(cands, drop)
	var held map[ID]bool
	if err == nil {
		held, err = Held(o.Proc, map[uint64]map[uint64]File{r.dev: cands})
		var unread *UnreadError
		if errors.As(err, &unread) {
			err = outsidePod(o, s, unread)
		}
	}
	if err != nil {
		res.NoAttribution = err.Error()
		return keepAll(sortedKeys(cands), KeptUnattributed)
	}
	var out []verdict
	var open []uint64
	for _, ino := range sortedKeys(cands) {
		if held[ID{r.dev, ino}] {
			out = append(out, verdict{ino: ino, why: KeptHeld})
		} else {
			open = append(open, ino)
		}
	}
	if len(open) == 0 {
		return out
	}
	vs, err := r.attribute(o, s, cands, open)
	if err != nil {
		res.NoAttribution = err.Error()
		for _, v := range vs {
			if v.gone {
				out = append(out, v)
			} else {
				out = append(out, verdict{ino: v.ino, why: KeptUnattributed})
			}
		}
		return out
	}
	return append(out, vs...)
}

// keepAll keeps every inode, for why.
func keepAll(inos []uint64, why string) []verdict {
	out := make([]verdict, len(inos))
	for i, ino := range inos {
		out[i] = verdict{ino: ino, why: why}
	}
	return out
}

// sortedKeys returns the inodes of files, sorted.
func sortedKeys(files map[uint64]File) []uint64 {
	out := make([]uint64, 0, len(files))
	for ino := range files {
		out = append(out, ino)
	}
	slices.Sort(out)
	return out
}

// attribute judges the candidates no process holds (rules 4 and 5). On an
// error (rule 6) it still returns a verdict for each, to be kept, and
// which of them are gone.
func (r shmRoot) attribute(o Options, s Start, cands map[uint64]File, open []uint64) ([]verdict, error) {
	vs := keepAll(open, KeptUnattributed)
	p, err := loadPod(o, s)
	if err != nil {
		return vs, err
	}
	read, done, err := r.chargeReader(o)
	if err != nil {
		return vs, err
	}
	defer done()
	for i := range vs {
		memcg, resident, err := read(vs[i].ino, cands[vs[i].ino])
		if errors.Is(err, fs.ErrNotExist) {
			vs[i].gone = true
			continue
		}
		if err != nil {
			return vs, fmt.Errorf("%s: %w", cands[vs[i].ino].Name, err)
		}
		vs[i].why = p.judge(memcg, resident)
	}
	return vs, nil
}

// judge returns why a candidate with that charge is kept, "" to remove
// it: rules 4 and 5.
func (p pod) judge(memcg uint64, resident bool) string {
	switch {
	case resident && p.sibling[memcg]:
		return KeptSibling
	case !resident && p.anyLive:
		return KeptUnknownWriter
	}
	return ""
}

// chargeReader returns what reads a candidate's charge: Options.Charge by
// path, else the page's own, from the file reached below the ShmDir's
// descriptor (and only while it is still the inode judged); and what to
// call when done.
func (r shmRoot) chargeReader(o Options) (func(ino uint64, f File) (uint64, bool, error), func(), error) {
	if o.Charge != nil {
		return func(_ uint64, f File) (uint64, bool, error) {
			return o.Charge(filepath.Join(r.dir, f.rel()))
		}, func() {}, nil
	}
	pg, err := openPager(o.Proc)
	if err != nil {
		return nil, nil, err
	}
	return func(ino uint64, f File) (uint64, bool, error) {
		fd, err := openFileAt(r.fd, r.dev, ino, f.rel())
		if err != nil {
			return 0, false, err
		}
		defer unix.Close(fd)
		return pg.charge(fd)
	}, pg.close, nil
}

// outsidePod rules out the processes a scan could not read (Held's
// *UnreadError) when none of them is in the pod's cgroup: a process of
// another pod or of the node cannot reach the pod's /dev/shm but through
// the node's path to it, which no runtime, kubelet or agent holds open
// (some sandboxes keep even root from their init's descriptors). Where one
// is the pod's own, or its cgroup cannot be read either, it returns the
// error: rule 6.
func outsidePod(o Options, s Start, unread *UnreadError) error {
	pc, err := parseCgroupsPath(s.CgroupsPath)
	if err != nil {
		return errors.Join(unread, err)
	}
	for _, pid := range unread.PIDs {
		path, err := memoryCgroupOf(filepath.Join(o.Proc, pid, "cgroup"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // exited meanwhile
		}
		if err != nil {
			return errors.Join(unread, err)
		}
		if rel := strings.TrimPrefix(path, "/"); rel == pc.pod || strings.HasPrefix(rel, pc.pod+"/") {
			return fmt.Errorf("%w: pid %s is in the pod's cgroup %s", unread, pid, path)
		}
	}
	return nil
}

// memoryCgroupOf returns the memory controller's path in a
// /proc/<pid>/cgroup file: cgroup v1's "N:memory:/path" line (a line may
// name several controllers: "N:cpu,memory:/path"), else v2's "0::/path".
func memoryCgroupOf(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	unified := ""
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" && parts[0] == "0" {
			unified = parts[2]
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c == "memory" {
				return parts[2], nil
			}
		}
	}
	if unified != "" {
		return unified, nil
	}
	return "", fmt.Errorf("%s: no memory cgroup", file)
}
