package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/gpurun/gpurun/internal/atomicfile"
)

// The install sequence every engine's install follows (install, below),
// over what the engine says of its change (an engine):
//
//  1. edit: the engine reads its configuration and works out the change
//     (nothing is written), verified as the engine itself would read the
//     result (engine.edit);
//  2. chain: the policy's runtime, when gpurun stands in for a default
//     that was another runtime (Options.chainPolicy);
//  3. dry run: the diff of every file, the policy's included, and stop
//     (Options.showPlan);
//  4. no change: an install that writes nothing finishes one left half
//     done, or says there is nothing to do (engine.unchanged, most often
//     Options.nothingToDo);
//  5. backup and record: the config copied aside before its first change,
//     the engine's change merged with the recorded one (engine.keep,
//     most often newRecord);
//  6. commit: the record marked pending, the files, the policy, the record
//     (Options.commit); then the lines that say what was done
//     (engine.report), and the engine made to read its configuration, or
//     told how (engine.apply).
//
// The engines are Docker (daemon.json), Containerd in place or into a
// drop-in (containerdConfig) or into a k3s/RKE2 template
// (containerdTemplate), and Hooks (hooks.d, whose change is a whole
// file). Each is its editor under engine/ and these few methods; the
// steps are written once, here. The interface and its implementations
// live in this package, not under engine/: what they add to an editor is
// install's own (the state file and its records, the policy, the host
// root), and engine/, a layer below the doors (docs/architecture.md),
// cannot import it; the editors stay functions of bytes, tested as such.
//
// Uninstall is the same for the engines that edit one config
// (uninstall, over an undoer): Docker, and Containerd in place, into a
// drop-in or a template. Hooks' uninstall takes out entries of several
// directories, shared between engines, and stays its own.

// engine is one engine's side of an install, for the install sequence.
// C is the engine's own part of a change: its editor's record of it
// (docker.Change, containerd.Change, HookChange) and what it needs to
// record and report it.
type engine[C any] interface {
	// key names the engine in the state file: "docker", "containerd",
	// "podman", "crio".
	key() string
	// edit is step 1: it reads the engine's configuration (and, in st,
	// what an earlier install recorded) and works the install out — the
	// files before and after, the runtime gpurun stands in for, the
	// engine's part — checked with the engine's own check. It writes
	// nothing.
	edit(st state) (change[C], error)
	// unchanged is step 4: an install that writes no file (ch.changed
	// false).
	unchanged(st state, ch change[C]) error
	// keep is step 5: the record to keep of ch, merged with the earlier
	// one (ch.old), its backups taken.
	keep(ch change[C]) (record, error)
	// report is the end of step 6: what the committed install did (rec,
	// as recorded), and what must follow it in the state or the policy.
	report(st state, ch change[C], rec record) error
	// apply makes the engine read its configuration (a reload, a restart)
	// or says how, after an install, a dry run (dryRun) or none needed.
	apply(ch change[C], dryRun bool) error
}

// change is an install worked out: what an engine's edit says, and what
// the sequence adds as it goes.
type change[C any] struct {
	// path is the file the state records the install under (here, under
	// HostRoot).
	path string
	// files are the files the install writes, as the dry run shows them;
	// those whose after differs are written, last first (the config that
	// imports a drop-in after it).
	files []fileDiff
	// chain is the runtime gpurun stands in for, "" when none.
	chain string
	// changed says the install writes something; false goes to step 4.
	changed bool
	// own is the engine's part.
	own C
	// pol is the policy's part (step 2); old the earlier record, when
	// hadOld.
	pol    policyPlan
	old    record
	hadOld bool
}

// writes are the files of ch that change, last first.
func (ch change[C]) writes() []fileWrite {
	var w []fileWrite
	for i := len(ch.files) - 1; i >= 0; i-- {
		if f := ch.files[i]; !bytes.Equal(f.before, f.after) {
			w = append(w, fileWrite{f.path, f.after})
		}
	}
	return w
}

// install runs the install sequence over e.
func install[C any](o Options, e engine[C]) error {
	st, err := loadState(o.statePath())
	if err != nil {
		return err
	}
	ch, err := e.edit(st)
	if err != nil {
		return err
	}
	if ch.pol, err = o.chainPolicy(ch.chain); err != nil {
		return err
	}
	if o.DryRun {
		o.showPlan(ch.files, ch.pol)
		return e.apply(ch, true)
	}
	ch.old, ch.hadOld = st[e.key()][ch.path]
	if !ch.changed {
		if err := e.unchanged(st, ch); err != nil {
			return err
		}
		return e.apply(ch, false)
	}
	rec, err := e.keep(ch)
	if err != nil {
		return err
	}
	if err := o.commit(st, e.key(), ch.path, rec, ch.writes()); err != nil {
		return err
	}
	if err := e.report(st, ch, rec); err != nil {
		return err
	}
	return e.apply(ch, false)
}

// undoer is one engine's side of an uninstall that undoes what an install
// recorded for one config.
type undoer[C any] interface {
	// key is engine.key.
	key() string
	// undo reads the engine's configuration and the record of it, and
	// works the uninstall out; nil (having said why) when there is
	// nothing to undo. It writes nothing.
	undo() (*undoPlan[C], error)
	// undone follows an uninstall carried out: the engine's check that
	// gpurun is gone, the engine made to read its configuration.
	undone(u *undoPlan[C]) error
}

// undoPlan is an uninstall worked out.
type undoPlan[C any] struct {
	// st is the state, path the file its record is under, rec the record
	// (recorded: there was one).
	st       state
	path     string
	rec      record
	recorded bool
	// files are what the uninstall does, in order.
	files []fileUndo
	// own is the engine's own, for undone.
	own C
}

// fileUndo is one file an uninstall writes back (after) or removes.
type fileUndo struct {
	path          string
	before, after []byte
	// write says after is written; remove that the file is removed.
	write, remove bool
	// done is the line once done ("" none; when neither written nor
	// removed, the line that says so); would is a removal's line in a dry
	// run (a written file shows its diff).
	done, would string
}

// uninstall undoes what an install recorded, over u: the dry run's diffs,
// or the files written back and removed, the policy unchained, the record
// dropped, and the engine's own check and reload.
func uninstall[C any](o Options, u undoer[C]) error {
	un, err := u.undo()
	if err != nil || un == nil {
		return err
	}
	if o.DryRun {
		for _, f := range un.files {
			if f.remove {
				fmt.Fprintln(o.Out, f.would)
			} else {
				o.showDiff(f.path, f.before, f.after)
			}
		}
		return nil
	}
	for _, f := range un.files {
		if err := f.carryOut(); err != nil {
			return err
		}
		if f.done != "" {
			fmt.Fprintln(o.Out, f.done)
		}
	}
	if err := o.forget(un.st, u.key(), un.path, un.rec, un.recorded); err != nil {
		return err
	}
	return u.undone(un)
}

// carryOut writes or removes f (a file already gone is removed).
func (f fileUndo) carryOut() error {
	switch {
	case f.remove:
		if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", f.path, err)
		}
	case f.write:
		return atomicfile.Write(f.path, f.after, 0o644)
	}
	return nil
}

// fileDiff is one file an install may change: what it holds (existed:
// it is there), what it would hold.
type fileDiff struct {
	path          string
	before, after []byte
	existed       bool
}

// policyPlan is the policy's part of an install: its change (nil when
// none) and the file before and after it.
type policyPlan struct {
	change        *policyChange
	before, after []byte
}

// chainPolicy is step 2: the policy's change when the editor says gpurun
// stands in for another runtime (runtime), none when runtime is "".
func (o Options) chainPolicy(runtime string) (policyPlan, error) {
	if runtime == "" {
		return policyPlan{}, nil
	}
	pc, before, after, err := o.chain(runtime)
	return policyPlan{pc, before, after}, err
}

// showPlan is step 3: the diff of each file, and of the policy when it
// changes.
func (o Options) showPlan(files []fileDiff, pol policyPlan) {
	for _, f := range files {
		o.showDiff(f.path, f.before, f.after)
	}
	if pol.change != nil {
		o.showDiff(o.policyPath(), pol.before, pol.after)
	}
}

// nothingToDo is step 4 for an install that changes no file: it finishes
// an install an earlier run left half done (rec pending), else says
// there is nothing to do.
func (o Options) nothingToDo(st state, engine, path string, rec record, hadRecord bool) error {
	if hadRecord && rec.Pending {
		if err := o.finish(st, engine, path, rec); err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "%s: finished the install an earlier run left half done\n", path)
		return nil
	}
	fmt.Fprintf(o.Out, "%s: gpurun runtime already registered; nothing to do\n", path)
	return nil
}

// newRecord is step 5: the backup of path (before, as it is now) before its
// first change, and the record to keep: fresh, with the editor's change,
// the policy's and the backup, merged with an earlier record (old, when
// hadOld) by merge — or replacing it, when merge is nil.
func newRecord[C any](o Options, path string, before []byte, existed bool, old record, hadOld bool, change C, merge func(C, C) C, fresh record) (record, error) {
	backup, err := o.backup(path, before, existed, old.Backup)
	if err != nil {
		return record{}, err
	}
	raw, err := json.Marshal(change)
	if err != nil {
		return record{}, fmt.Errorf("record %s: %w", path, err)
	}
	fresh.Change, fresh.Backup, fresh.InstalledAt = raw, backup, o.now().UTC()
	if merge == nil {
		return fresh, nil
	}
	rec, err := mergeRecord(old, hadOld, change, merge, fresh)
	if err != nil {
		return record{}, fmt.Errorf("install state %s: %w", o.statePath(), err)
	}
	return rec, nil
}

// reportLine is the line that says what an install did to path, and where
// the backup of its first change is.
func (o Options) reportLine(path, what, backup string) {
	fmt.Fprintf(o.Out, "%s: %s", path, what)
	if backup != "" {
		fmt.Fprintf(o.Out, "; backup %s", backup)
	}
	fmt.Fprintln(o.Out)
}
