package install

import (
	"encoding/json"

	"github.com/gpurun/gpurun/engine/containerd"
	"github.com/gpurun/gpurun/engine/docker"
)

// mergeDocker folds a later install's change into the first one's, so that
// uninstall undoes both: what the first added stays recorded, and what the
// later one added (the default runtime, say) is added to it.
func mergeDocker(first, next docker.Change) docker.Change {
	m := first
	m.Changed = first.Changed || next.Changed
	if next.AddedRuntime && !first.AddedRuntime {
		m.AddedRuntime, m.PreviousRuntime = true, next.PreviousRuntime
	}
	m.CreatedRuntimes = first.CreatedRuntimes || next.CreatedRuntimes
	m.RuntimesWasNull = first.RuntimesWasNull || next.RuntimesWasNull
	if next.SetDefault {
		// The default an install replaced last is the one to give back:
		// where another tool made its runtime the default after gpurun's
		// first install (nvidia-ctk --set-as-default), gpurun's next
		// install replaced that tool's, not the first one's.
		m.SetDefault, m.PreviousDefault, m.PreviousDefaultSet = true, next.PreviousDefault, next.PreviousDefaultSet
	}
	if m.Chain == "" {
		m.Chain = next.Chain
	}
	return m
}

// mergeContainerd is mergeDocker for containerd's changes.
func mergeContainerd(first, next containerd.Change) containerd.Change {
	m := first
	m.Changed = first.Changed || next.Changed
	m.AddedRuntime = first.AddedRuntime || next.AddedRuntime
	if next.SetDefault && !first.SetDefault {
		m.SetDefault, m.PreviousDefault, m.HadDefaultKey = true, next.PreviousDefault, next.HadDefaultKey
	}
	if m.Chain == "" {
		m.Chain, m.CopiedFrom = next.Chain, next.CopiedFrom
	}
	return m
}

// mergeRecord returns the record to keep after an install that changed
// something: the first record's change merged with the new one, its backup
// and its policy change kept.
func mergeRecord[C any](old record, hadOld bool, next C, merge func(C, C) C, fresh record) (record, error) {
	if !hadOld {
		return fresh, nil
	}
	var first C
	if err := json.Unmarshal(old.Change, &first); err != nil {
		return record{}, err
	}
	raw, err := json.Marshal(merge(first, next))
	if err != nil {
		return record{}, err
	}
	fresh.Change = raw
	if old.Policy != nil {
		fresh.Policy = old.Policy
	}
	if old.Backup != "" {
		fresh.Backup = old.Backup
	}
	fresh.InstalledAt = old.InstalledAt
	return fresh, nil
}
