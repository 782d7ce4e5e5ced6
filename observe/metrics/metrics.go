// Package metrics exposes what gpurun sees of /dev/shm in the Prometheus
// exposition format (prometheus/client_golang), for the node agent
// (`gpurun node run`, `gpurun nri`) and `gpurun stats --listen`:
//
//   - per container, from the Sampler's latest shmstats sample (so a
//     container that is gone leaves the metrics with the next sample):
//     gpurun_shm_size_bytes, gpurun_shm_used_bytes, gpurun_shm_peak_bytes
//     (the highest use seen since the sampler started), the orphaned
//     bytes where computed, the size the measured peak calls for, and the
//     plan as an info metric (action, reason);
//   - per container too, its memory cgroup: gpurun_memory_limit_bytes
//     (with gpurun_memory_limit_info saying whose), usage_bytes and
//     working_set_bytes;
//   - counters: gpurun_shm_remounts_total by outcome (done, unchanged,
//     refused, failed) and cause, and the bytes and files the sweeps of
//     restarted containers' /dev/shm removed, from the enforce records
//     (Counters); gpurun_shm_near_ceiling_total, the containers that came
//     within 5 % of their /dev/shm size (counted once per approach); and
//     gpurun_shm_oom_kills_total, the OOM kills seen (MemoryWatch);
//   - the sampler's own cost: samples, errors, the last sample's duration.
//
// Series of one container carry the labels engine, id, namespace, pod,
// uid and container: namespace, pod and uid are the Kubernetes pod's
// (empty outside one) and container its name in the pod spec, else the
// engine's name for it.
//
// Only node-side commands import this package (and so client_golang).
package metrics

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// Namespace is the metric names' prefix.
const Namespace = "gpurun"

// NearCeiling is the fraction of its size at which a container's /dev/shm
// counts as near its ceiling.
const NearCeiling = 0.95

// containerLabels are the labels of every per-container series.
func containerLabels() []string {
	return []string{"engine", "id", "namespace", "pod", "uid", "container"}
}

// The outcomes of gpurun_shm_remounts_total.
const (
	OutcomeDone      = "done"      // the tmpfs was grown
	OutcomeUnchanged = "unchanged" // already the planned size (another container of the pod grew it)
	OutcomeRefused   = "refused"   // refused by the safety rules or the engine's named dirs
	OutcomeFailed    = "failed"    // any other failure
)

// Counters count what the enforce records say: the remounts done and
// refused, and what the sweeps of restarted containers' /dev/shm removed.
// Feed it with Observe, from an Enforcer's Observe callback or a log tail.
// It is safe for concurrent use.
type Counters struct {
	remounts    *prometheus.CounterVec
	sweptBytes  prometheus.Counter
	sweptFiles  prometheus.Counter
	sweepErrors prometheus.Counter
}

// NewCounters returns Counters registered with reg.
func NewCounters(reg prometheus.Registerer) *Counters {
	c := &Counters{remounts: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "shm", Name: "remounts_total",
		Help: "Remounts of engine-made /dev/shm tmpfs (a pod's sandbox shm) gpurun attempted, by outcome (done, unchanged, refused, failed) and cause of a failure.",
	}, []string{"outcome", "cause"})}
	// Every outcome is exposed from the start, at 0: a rate over a
	// counter that appears only with its first increment misses it.
	for _, o := range []string{OutcomeDone, OutcomeUnchanged} {
		c.remounts.WithLabelValues(o, "")
	}
	for _, cause := range []string{enforce.CauseNotNamed, enforce.CauseUnknownRoot, enforce.CauseUnsafe} {
		c.remounts.WithLabelValues(OutcomeRefused, cause)
	}
	c.remounts.WithLabelValues(OutcomeFailed, enforce.CauseError)
	c.sweptBytes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "shm", Name: "swept_bytes_total",
		Help: "Bytes of the files a restarted container's earlier instance left in its pod's /dev/shm that a gpurun front door removed at the restart."})
	c.sweptFiles = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "shm", Name: "swept_files_total",
		Help: "Files a restarted container's earlier instance left in its pod's /dev/shm that a gpurun front door removed at the restart."})
	c.sweepErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "shm", Name: "sweep_errors_total",
		Help: "Sweeps of a restarted container's /dev/shm that failed (in part: what was removed before is counted)."})
	reg.MustRegister(c.remounts, c.sweptBytes, c.sweptFiles, c.sweepErrors)
	return c
}

// Observe counts one record: its remount (records of other plans have
// none) and its sweep.
func (c *Counters) Observe(r records.Record) {
	if r.Sweep.Swept() {
		c.sweptBytes.Add(float64(r.Sweep.Bytes))
		c.sweptFiles.Add(float64(r.Sweep.Files))
	}
	if r.Sweep.Err != "" {
		c.sweepErrors.Inc()
	}
	if !r.Remount() {
		return
	}
	switch {
	case r.Failed && r.Refused:
		c.remounts.WithLabelValues(OutcomeRefused, r.Cause).Inc()
	case r.Failed:
		c.remounts.WithLabelValues(OutcomeFailed, r.Cause).Inc()
	case r.Changed:
		c.remounts.WithLabelValues(OutcomeDone, "").Inc()
	default:
		c.remounts.WithLabelValues(OutcomeUnchanged, "").Inc()
	}
}

// Registry returns a registry with the Go runtime's and the process's own
// metrics (memory, CPU seconds): the agent's cost shows with the rest.
func Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves /metrics (reg's metrics) and /healthz (ok while healthy
// returns nil).
func Handler(reg *prometheus.Registry, healthy func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if healthy != nil {
			if err := healthy(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// descs describe the per-container metrics.
type descs struct {
	size, used, peak, orphaned, suggested, plan *prometheus.Desc
	// The container's memory cgroup beside its /dev/shm.
	memLimit, memUsage, memWorkingSet, memLimitInfo *prometheus.Desc
}

func newDescs() descs {
	desc := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "shm", name), help, append(containerLabels(), extra...), nil)
	}
	mem := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "memory", name), help, append(containerLabels(), extra...), nil)
	}
	return descs{
		size:          desc("size_bytes", "Size of the container's /dev/shm tmpfs."),
		used:          desc("used_bytes", "Bytes in use in the container's /dev/shm tmpfs."),
		peak:          desc("peak_bytes", "Highest use of the container's /dev/shm tmpfs seen since the sampler started."),
		orphaned:      desc("orphaned_bytes", "Bytes of files in the container's /dev/shm that no live process has open or mapped."),
		suggested:     desc("suggested_size_bytes", "The /dev/shm size that holds the measured peak with headroom, where the size does not fit it."),
		plan:          desc("plan_info", "What gpurun decides for the container's /dev/shm as its engine made it: the action, why, and whether its /dev/shm now is what the plan gives (in_effect) (always 1).", "action", "gpu", "reason", "in_effect"),
		memLimit:      mem("limit_bytes", "The memory limit that bounds the container: the smallest of its cgroup's and those above it (the pod's), else the host's memory (gpurun_memory_limit_info says whose). tmpfs pages, /dev/shm's, count against it."),
		memUsage:      mem("usage_bytes", "The container's memory cgroup's usage (v1 memory.usage_in_bytes, v2 memory.current), page cache included."),
		memWorkingSet: mem("working_set_bytes", "The container's memory usage less its inactive file cache (what kubectl top shows); the tmpfs pages its processes wrote first, /dev/shm's, are in it."),
		memLimitInfo:  mem("limit_info", "Whose limit gpurun_memory_limit_bytes is: limit_of is container, pod, parent, ancestor (a cgroup higher up, kubepods) or host (always 1).", "limit_of"),
	}
}

func (d descs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.size, d.used, d.peak, d.orphaned, d.suggested, d.plan, d.memLimit, d.memUsage, d.memWorkingSet, d.memLimitInfo} {
		ch <- x
	}
}

// labels are a container's label values, in containerLabels' order.
func labels(c *shmstats.Container) []string {
	ns, pod, uid, name := "", "", "", c.Name
	if c.Pod != nil {
		ns, pod, uid = c.Pod.Namespace, c.Pod.Name, c.Pod.UID
		if c.Pod.Container != "" {
			name = c.Pod.Container
		}
	}
	return []string{c.Engine, c.ID, ns, pod, uid, name}
}

// collectContainers sends the per-container metrics of a sample.
func (d descs) collect(cs []shmstats.Container, ch chan<- prometheus.Metric) {
	for i := range cs {
		c := &cs[i]
		l := labels(c)
		ch <- prometheus.MustNewConstMetric(d.plan, prometheus.GaugeValue, 1, append(l, c.Decision.Action, strconv.FormatBool(c.GPU), c.Decision.Reason, strconv.FormatBool(c.Decision.InEffect))...)
		d.collectMemory(c, l, ch)
		if !c.Shm.Tmpfs || c.Err != "" && c.Shm.Size == 0 {
			continue // no tmpfs read: no sizes to report
		}
		ch <- prometheus.MustNewConstMetric(d.size, prometheus.GaugeValue, float64(c.Shm.Size), l...)
		ch <- prometheus.MustNewConstMetric(d.used, prometheus.GaugeValue, float64(c.Shm.Used), l...)
		ch <- prometheus.MustNewConstMetric(d.peak, prometheus.GaugeValue, float64(max(c.Shm.Peak, c.Shm.Used)), l...)
		if c.Shm.Orphaned >= 0 {
			ch <- prometheus.MustNewConstMetric(d.orphaned, prometheus.GaugeValue, float64(c.Shm.Orphaned), l...)
		}
		if c.Suggestion != nil {
			ch <- prometheus.MustNewConstMetric(d.suggested, prometheus.GaugeValue, float64(c.Suggestion.Size), l...)
		}
	}
}

// collectMemory sends a container's memory metrics, where its cgroup was
// read.
func (d descs) collectMemory(c *shmstats.Container, l []string, ch chan<- prometheus.Metric) {
	m := c.Memory
	if m == nil || m.Err != "" {
		return
	}
	ch <- prometheus.MustNewConstMetric(d.memUsage, prometheus.GaugeValue, float64(m.Usage), l...)
	ch <- prometheus.MustNewConstMetric(d.memWorkingSet, prometheus.GaugeValue, float64(m.WorkingSet), l...)
	if m.Limit > 0 {
		ch <- prometheus.MustNewConstMetric(d.memLimit, prometheus.GaugeValue, float64(m.Limit), l...)
		ch <- prometheus.MustNewConstMetric(d.memLimitInfo, prometheus.GaugeValue, 1, append(l, m.LimitOf)...)
	}
}
