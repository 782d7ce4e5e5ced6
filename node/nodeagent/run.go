package nodeagent

import (
	"context"
	"strings"
	"time"
)

// DefaultInterval is how often Run checks the node.
const DefaultInterval = 30 * time.Second

// RunOptions configure [Agent.Run].
type RunOptions struct {
	// Interval between checks (0 means DefaultInterval).
	Interval time.Duration
	// UninstallOnExit uninstalls when ctx ends (the pod is stopped).
	UninstallOnExit bool
	// UninstallTimeout bounds that uninstall (0 means two minutes).
	UninstallTimeout time.Duration
	// Failed, when set, is told the error of an install that failed,
	// before Run returns it.
	Failed func(err error)
}

// Run installs, then keeps checking the node until ctx ends: it keeps the
// policy file in step with its source, logs the node's state whenever it
// changes, and records the containerd run that has read the
// configuration. When ctx ends it uninstalls if asked to. An install that
// fails is returned at once (the pod restarts and says why).
func (a *Agent) Run(ctx context.Context, o RunOptions) error {
	if err := a.Install(ctx); err != nil {
		if o.Failed != nil {
			o.Failed(err)
		}
		return err
	}
	interval := o.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := ""
	for {
		last = a.check1(last)
		select {
		case <-ctx.Done():
			if !o.UninstallOnExit {
				a.log().Info("stopping; gpurun stays installed on the node (uninstall with `gpurun node uninstall`)")
				return nil
			}
			timeout := o.UninstallTimeout
			if timeout <= 0 {
				timeout = 2 * time.Minute
			}
			uctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			a.log().Info("stopping: uninstalling gpurun from the node")
			return a.Uninstall(uctx)
		case <-tick.C:
		}
	}
}

// check1 does one round of Run's checks and returns the state it logged.
func (a *Agent) check1(last string) string {
	// The lock keeps another agent's uninstall or install (a rollout)
	// from interleaving with this round's record updates; a round that
	// cannot have it soon is skipped.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	unlock, err := a.lockNode(ctx)
	cancel()
	if err != nil {
		return last
	}
	defer unlock()
	statePath := a.host(a.statePath())
	rec, err := loadRecord(statePath)
	if err != nil || rec == nil {
		msg := "the node record is gone"
		if err != nil {
			msg = err.Error()
		}
		if msg != last {
			a.log().Error("cannot check the node", "err", msg)
		}
		return msg
	}
	if a.PolicySource != "" {
		if wrote, err := a.syncPolicy(rec); err != nil {
			a.log().Error("cannot keep the node's policy in step with its source", "err", err)
		} else if wrote {
			if err := rec.save(statePath); err != nil {
				a.log().Error("cannot save the node record", "err", err)
			}
		}
	}
	st, ctd := a.status(rec)
	if !st.Ready && st.Repairable {
		a.repair(context.Background(), rec, statePath, st)
		st, ctd = a.status(rec)
	}
	for _, w := range st.Warnings {
		if !strings.Contains(last, w) {
			a.log().Warn(w)
		}
	}
	if a.noteBinaries(rec) {
		if err := rec.save(statePath); err != nil {
			a.log().Error("cannot save the node record", "err", err)
		}
	}
	if st.Ready && ctd != nil && ctd.proc != nil {
		if err := a.noteLoaded(rec, *ctd, statePath); err != nil {
			a.log().Error("cannot save the node record", "err", err)
		}
	}
	summary := st.Reason + strings.Join(st.Warnings, "; ")
	if summary != last {
		if st.Ready {
			a.log().Info("ready: "+st.Reason, "default", st.Default)
		} else {
			a.log().Warn("not ready: "+strings.TrimSpace(st.Reason), "default", st.Default)
		}
	}
	return summary
}

// noteBinaries records, for each binary that holds what the agent copied,
// the FileStat that lets status tell it unchanged without reading it; it
// reports whether the record changed.
func (a *Agent) noteBinaries(rec *Record) bool {
	changed := false
	for i := range rec.Binaries {
		b := &rec.Binaries[i]
		old := b.Stat
		if verify(a.host(b.Path), b) && b.Stat != old {
			changed = true
		}
	}
	return changed
}
