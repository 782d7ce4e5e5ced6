package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpurun/gpurun/observe/shmstats"
)

// DefaultInterval is how often a Sampler samples by default.
const DefaultInterval = 15 * time.Second

// Sampler samples every container's /dev/shm and memory cgroup
// (shmstats.Collect) every interval, keeps the highest use seen of each
// tmpfs in memory, counts the containers that come near their ceiling,
// follows their memory from sample to sample (MemoryWatch), and is the
// prometheus.Collector of the per-container metrics, from its latest
// sample. It is safe for concurrent use.
type Sampler struct {
	opts     shmstats.Options
	interval time.Duration
	log      *slog.Logger
	collect  func(context.Context, shmstats.Options) ([]shmstats.Container, error)
	d        descs
	mem      *MemoryWatch
	alert    func(MemoryAlert)
	now      func() time.Time

	near     *prometheus.CounterVec
	samples  prometheus.Counter
	errs     prometheus.Counter
	duration prometheus.Gauge

	mu      sync.Mutex
	latest  []shmstats.Container
	lastErr error
	lastAt  time.Time
	isNear  map[string]bool // by container id: near its ceiling at the last sample
}

// SamplerOptions configure a Sampler.
type SamplerOptions struct {
	// Stats says where to look. A nil Peaks gets an in-memory store, a nil
	// Specs a cache of the containers' specs; its Orphans costs a walk of
	// every tmpfs and /proc per sample.
	Stats shmstats.Options
	// Interval between samples (0: DefaultInterval).
	Interval time.Duration
	// Log receives sampling errors (nil: discard).
	Log *slog.Logger
	// Collect replaces shmstats.Collect (tests).
	Collect func(context.Context, shmstats.Options) ([]shmstats.Container, error)
	// Exits tells how containers that left the samples ended, for the OOM
	// kills that end a container (nil: only those of a process of a
	// container that lives on are seen).
	Exits Exits
	// Alert gets what the samples show of the containers' memory (a
	// MemoryWatch's alerts), in the sampling goroutine (nil: counted only).
	Alert func(MemoryAlert)
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// NewSampler returns a Sampler registered with reg.
func NewSampler(reg prometheus.Registerer, o SamplerOptions) *Sampler {
	s := &Sampler{opts: o.Stats, interval: o.Interval, log: o.Log, collect: o.Collect, d: newDescs(), isNear: map[string]bool{},
		alert: o.Alert, now: o.Now}
	if s.opts.Peaks == nil {
		s.opts.Peaks = shmstats.NewPeaks()
	}
	if s.opts.Specs == nil {
		s.opts.Specs = shmstats.NewSpecs()
	}
	if s.interval <= 0 {
		s.interval = DefaultInterval
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.collect == nil {
		s.collect = shmstats.Collect
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.mem = NewMemoryWatch(reg, o.Exits, s.log)
	s.near = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "shm", Name: "near_ceiling_total",
		Help: "Containers whose /dev/shm use came within 5 % of its size, counted once each time it does, by Kubernetes namespace (empty outside a pod).",
	}, []string{"namespace"})
	s.samples = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "shm", Name: "samples_total", Help: "Samples of every container's /dev/shm taken."})
	s.errs = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "shm", Name: "sample_errors_total", Help: "Samples in which an engine could not be read."})
	s.duration = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "shm", Name: "sample_duration_seconds", Help: "How long the last sample took."})
	reg.MustRegister(s, s.near, s.samples, s.errs, s.duration)
	return s
}

// Sample takes one sample and makes it the latest, and hands what it shows
// of the containers' memory to SamplerOptions.Alert. An engine that could
// not be read is in the error; the others' containers are kept.
func (s *Sampler) Sample(ctx context.Context) error {
	start := time.Now()
	cs, err := s.collect(ctx, s.opts)
	s.duration.Set(time.Since(start).Seconds())
	for _, a := range s.mem.Step(ctx, cs, s.now()) {
		if s.alert != nil {
			s.alert(a)
		}
	}
	s.samples.Inc()
	if err != nil {
		s.errs.Inc()
	}
	if err == nil {
		// The peaks of tmpfs that no container has any more are forgotten
		// (a deleted pod's); after a sample that missed an engine none is.
		devs := make(map[string]bool, len(cs))
		for i := range cs {
			devs[cs[i].Shm.Device] = true
		}
		s.opts.Peaks.Forget(func(key string) bool {
			i := strings.LastIndexByte(key, '@')
			return i < 0 || devs[key[i+1:]]
		})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	near := make(map[string]bool, len(s.isNear))
	for i := range cs {
		c := &cs[i]
		if c.Shm.Size <= 0 || float64(c.Shm.Used) < NearCeiling*float64(c.Shm.Size) {
			continue
		}
		near[c.ID] = true
		if !s.isNear[c.ID] {
			ns := ""
			if c.Pod != nil {
				ns = c.Pod.Namespace
			}
			s.near.WithLabelValues(ns).Inc()
		}
	}
	s.latest, s.lastErr, s.lastAt, s.isNear = cs, err, time.Now(), near
	return err
}

// Run samples every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	last := ""
	for {
		err := s.Sample(ctx)
		// An error is logged when it changes, not every interval.
		if msg := errString(err); msg != last {
			if err != nil {
				s.log.Warn("cannot read every engine's containers", "err", msg)
			}
			last = msg
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Latest returns the latest sample (not to be changed).
func (s *Sampler) Latest() []shmstats.Container {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest
}

// Healthy says whether a sample was taken within three intervals.
func (s *Sampler) Healthy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastAt.IsZero() {
		return errors.New("no sample yet")
	}
	if age := time.Since(s.lastAt); age > 3*s.interval {
		return fmt.Errorf("the last sample is %s old", age.Round(time.Second))
	}
	return nil
}

// Describe is prometheus.Collector's.
func (s *Sampler) Describe(ch chan<- *prometheus.Desc) { s.d.describe(ch) }

// Collect is prometheus.Collector's: the latest sample's metrics.
func (s *Sampler) Collect(ch chan<- prometheus.Metric) { s.d.collect(s.Latest(), ch) }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
