// Package records reads the outcome of gpurun's /dev/shm plans, one Record
// per container start, from where node/enforce reports it: in-process
// from an Enforcer's Observe callback (FromResult: the NRI plugin), or from
// the JSON lines the per-start front doors (gpurun-runtime, the OCI hook)
// append to the policy's log_file (Parse, and Tail to follow that file).
// The node agent's metrics and Kubernetes Events are built from Records.
package records

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/oci"
)

// Record is one container's outcome: what was planned for its /dev/shm,
// and whether it was carried out.
type Record struct {
	// Time is when it was logged.
	Time time.Time
	// Component is the front door ("gpurun-runtime", "gpurun-hook",
	// "gpurun-nri"), as far as known.
	Component string
	// ID, Name and Bundle name the container as the front door knew it.
	ID, Name, Bundle string
	// Pod is the Kubernetes pod, zero outside one.
	Pod Pod
	// Action, Size and Reason are the plan (Action "" when the container
	// could not be read); GPU says whether it found GPU evidence.
	Action string
	Size   int64
	Reason string
	GPU    bool
	// Changed says a size was changed (a tmpfs grown, a mount resized).
	Changed bool
	// Skipped says why the front door left the plan undone on purpose.
	Skipped string
	// Failed says the plan failed; Err is why, Path the tmpfs it concerns,
	// Fix what makes it work, and Refused whether the safety rules or the
	// engine's named dirs refused the remount (rather than an error).
	Failed  bool
	Refused bool
	// Cause is enforce.Cause's short name of why it failed.
	Cause string
	Err   string
	Path  string
	Fix   string
	// Sweep is what the front door removed from the pod's /dev/shm when the
	// container restarted: the files its dead earlier instance left there.
	// Zero when nothing was swept (a first start, Docker, a door that does
	// not sweep).
	Sweep Sweep
}

// Sweep is one sweep of a pod's /dev/shm at a container's restart, as the
// record's sweep_* fields say.
type Sweep struct {
	// Path is the pod's /dev/shm tmpfs on the host.
	Path string
	// Bytes and Files are what was removed; Names name at most
	// enforce.MaxSweptNames of those files, sorted, as paths in the
	// container ("/dev/shm/nccl-shm-x"), and "…" after them when there were
	// more.
	Bytes int64
	Files int
	Names []string
	// KeptBytes and KeptFiles are the candidates left in place: held by a
	// live process, or a sibling container's.
	KeptBytes int64
	KeptFiles int
	// Err says what went wrong; what was removed before it is counted.
	Err string
}

// Swept reports whether the sweep removed anything.
func (s Sweep) Swept() bool { return s.Bytes > 0 }

// Pod names a Kubernetes pod and the container's name in it.
type Pod struct {
	Namespace, Name, UID, Container string
}

// Remount reports whether the record is an attempt to grow an engine-made
// host tmpfs (a remount plan, carried out or failed).
func (r Record) Remount() bool { return r.Action == string(oci.ActionRemount) }

// FromResult is the Record of one Enforcer.Run, as its Observe callback
// gets it; component names the front door. Its Sweep holds what the
// enforcer logs as the record's sweep_* fields.
func FromResult(component string, s enforce.Subject, res enforce.Result) Record {
	pl := res.Plan
	r := Record{
		Component: component, ID: s.ID, Name: s.Name, Bundle: s.Bundle,
		Pod:    Pod{Namespace: pl.Pod.Namespace, Name: pl.Pod.Name, UID: pl.Pod.UID, Container: pl.Pod.Container},
		Action: string(pl.Action), Size: pl.Size, Reason: pl.Reason, GPU: pl.GPU,
		Skipped: res.Done.Skipped,
	}
	r.Pod.fill(s.Pod, s.Name)
	switch {
	case res.Grown != nil:
		r.Changed, r.Path = res.Grown.Changed, pl.Shm.Source
	default:
		r.Changed, r.Path = res.Done.Changed, res.Done.Path
	}
	if sw := res.Sweep; sw != nil {
		r.Sweep = Sweep{Path: sw.Path, Bytes: sw.SweptBytes, Files: len(sw.Swept), Names: sw.Names(), KeptBytes: sw.KeptBytes, KeptFiles: len(sw.Kept)}
		if sw.Err != nil {
			r.Sweep.Err = sw.Err.Error()
		}
	}
	if res.Err != nil {
		r.Failed, r.Err, r.Cause = true, res.Err.Error(), enforce.Cause(res.Err)
		if ref, refused := enforce.Refused(res.Err); ref != nil {
			r.Refused, r.Path, r.Fix = refused, ref.Path, ref.Fix
		}
	}
	return r
}

// fill takes the pod's namespace and name from a subject's "namespace/name"
// and the container's name, where the spec's annotations did not say.
func (p *Pod) fill(nsName, ctr string) {
	if p.Name == "" && nsName != "" {
		if ns, name, ok := strings.Cut(nsName, "/"); ok {
			p.Namespace, p.Name = ns, name
		} else {
			p.Name = nsName
		}
	}
	if p.Container == "" && p.Name != "" {
		p.Container = ctr
	}
}

// line is the JSON form of an enforce record (see enforce.Run).
type line struct {
	Time         time.Time `json:"time"`
	Msg          string    `json:"msg"`
	Component    string    `json:"component"`
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	Pod          string    `json:"pod"`
	Bundle       string    `json:"bundle"`
	K8sNamespace string    `json:"k8s_namespace"`
	K8sPod       string    `json:"k8s_pod"`
	K8sUID       string    `json:"k8s_uid"`
	K8sContainer string    `json:"k8s_container"`
	Action       string    `json:"action"`
	Size         int64     `json:"size_bytes"`
	Reason       string    `json:"reason"`
	GPU          bool      `json:"gpu"`
	Changed      bool      `json:"changed"`
	Skipped      string    `json:"skipped"`
	Err          string    `json:"err"`
	Cause        string    `json:"cause"`
	Path         string    `json:"path"`
	Fix          string    `json:"fix"`
	Refused      bool      `json:"refused"`
	// The sweep of a restarted container's /dev/shm (Sweep).
	SweepPath  string   `json:"sweep_path"`
	SweptBytes int64    `json:"swept_bytes"`
	SweptFiles int      `json:"swept_files"`
	SweptNames []string `json:"swept_names"`
	KeptBytes  int64    `json:"kept_bytes"`
	KeptFiles  int      `json:"kept_files"`
	SweepErr   string   `json:"sweep_err"`
}

// Message reads the message and time of any JSON line of a log_file (a
// container's record or another, such as gpurun-runtime's record of being
// called back by the runtime it hands over to); a line that is not JSON is
// an error.
func Message(data []byte) (msg string, at time.Time, err error) {
	var l struct {
		Time time.Time `json:"time"`
		Msg  string    `json:"msg"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		return "", time.Time{}, fmt.Errorf("not a JSON record: %w", err)
	}
	return l.Msg, l.Time, nil
}

// Parse reads one JSON line of a log_file. ok is false for a line that is
// not a container's record (another message; those lines are skipped); a
// line that is not JSON is an error.
func Parse(data []byte) (r Record, ok bool, err error) {
	var l line
	if err := json.Unmarshal(data, &l); err != nil {
		return Record{}, false, fmt.Errorf("not a JSON record: %w", err)
	}
	if l.Msg != enforce.MsgPlanned && l.Msg != enforce.MsgFailed {
		return Record{}, false, nil
	}
	r = Record{
		Time: l.Time, Component: l.Component, ID: l.ID, Name: l.Name, Bundle: l.Bundle,
		Pod:    Pod{Namespace: l.K8sNamespace, Name: l.K8sPod, UID: l.K8sUID, Container: l.K8sContainer},
		Action: l.Action, Size: l.Size, Reason: l.Reason, GPU: l.GPU, Changed: l.Changed, Skipped: l.Skipped,
		Failed: l.Msg == enforce.MsgFailed, Refused: l.Refused, Cause: l.Cause, Err: l.Err, Path: l.Path, Fix: l.Fix,
		Sweep: Sweep{Path: l.SweepPath, Bytes: l.SweptBytes, Files: l.SweptFiles, Names: l.SweptNames,
			KeptBytes: l.KeptBytes, KeptFiles: l.KeptFiles, Err: l.SweepErr},
	}
	r.Pod.fill(l.Pod, l.Name)
	return r, true, nil
}
