package install

import (
	"encoding/json"
	"fmt"
)

// The install sequence every engine's install follows, once the engine's
// editor has worked out its change (nothing is written before that):
//
//  1. verify: the engine, reading the result, sees gpurun as asked (the
//     engine's own check);
//  2. chain: the policy's runtime, when gpurun stands in for a default
//     that was another runtime (Options.chain);
//  3. dry run: the diff of every file, the policy's included, and stop
//     (Options.showPlan);
//  4. state: what an earlier install recorded; no change at all finishes
//     an install left half done, or says there is nothing to do
//     (Options.unchanged);
//  5. backup and record: the config copied aside before its first change,
//     the editor's change merged with the recorded one (newRecord);
//  6. commit: the record marked pending, the files, the policy, the record
//     (Options.commit); then a line that says what was done
//     (Options.report).
//
// Each engine's installer is these steps around its editor: Docker
// (daemon.json), Containerd (config.toml, in place or into a drop-in, or
// a k3s/RKE2 template), Hooks (hooks.d, whose change is a whole file).

// fileDiff is one file an install may change: what it holds, what it
// would hold.
type fileDiff struct {
	path          string
	before, after []byte
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

// unchanged is step 4 for an install that changes no file: it finishes
// an install an earlier run left half done (rec pending), else says
// there is nothing to do.
func (o Options) unchanged(st state, engine, path string, rec record, hadRecord bool) error {
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
		return record{}, err
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

// report is the line that says what an install did to path, and where
// the backup of its first change is.
func (o Options) report(path, what, backup string) {
	fmt.Fprintf(o.Out, "%s: %s", path, what)
	if backup != "" {
		fmt.Fprintf(o.Out, "; backup %s", backup)
	}
	fmt.Fprintln(o.Out)
}
