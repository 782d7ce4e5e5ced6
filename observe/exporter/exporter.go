// Package exporter runs what gpurun shows of /dev/shm from a node (the node
// agent, the NRI plugin) or a Docker host (`gpurun stats --listen`): the
// metrics sampler (observe/metrics) behind an HTTP server (/metrics,
// /healthz), the remount and sweep counters and Kubernetes Events
// (observe/events) fed with enforce records — in-process (Observe, from an
// Enforcer's callback) or from the log_file the per-start front doors write
// (a Tail) — and the memory alerts of the samples (a container near its
// memory limit with /dev/shm a large part of it, an OOM kill), logged and
// posted as Events; containerd's CRI (its socket in each state dir) says
// how containers that left the samples ended.
package exporter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/observe/events"
	"github.com/gpurun/gpurun/observe/metrics"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// DefaultAddress is where the metrics are served by default: every
// interface, port 9469.
const DefaultAddress = ":9469"

// TailInterval is how often the records log is read.
const TailInterval = 2 * time.Second

// Options configure an Exporter.
type Options struct {
	// Address is where /metrics and /healthz are served ("" serves
	// nothing: the records still make Events).
	Address string
	// Stats says where the sampler looks.
	Stats shmstats.Options
	// Interval between samples (0: metrics.DefaultInterval).
	Interval time.Duration
	// CRIEndpoints are the CRI sockets (as this process reaches them) to
	// ask how a container that left the samples ended; nil: the socket in
	// each containerd state dir of Stats (criExits).
	CRIEndpoints []string
	// RecordsLog is a log_file (as this process sees it) to follow for
	// enforce records; "" for none (an in-process Enforcer feeds Observe).
	RecordsLog string
	// Events posts Kubernetes Events through Kube (kube.InCluster when
	// nil), as node Node.
	Events bool
	Kube   *kube.Kube
	Node   string
	// Log receives what goes wrong, and the OOM kills and memory pressure
	// the samples show (nil: discard).
	Log *slog.Logger
	// Exits tells how containers that left the samples ended (nil: the
	// containerd CRI sockets in the state dirs Stats names, under its
	// HostRoot).
	Exits metrics.Exits
}

// Exporter is a running set of the above. Observe is safe for concurrent
// use.
type Exporter struct {
	o        Options
	ln       net.Listener
	counters *metrics.Counters
	sampler  *metrics.Sampler
	poster   *events.Poster
	handler  http.Handler
	tailer   *records.Tail
	cri      *criExits // the default Exits, closed by Run
	// ready is what /readyz says (SetReady); nil: ready.
	ready atomic.Pointer[readiness]
}

// readiness is what SetReady was told.
type readiness struct {
	ok  bool
	why string
}

// New sets an Exporter up: it listens on Address now, so that a bad
// address or a port in use is an error before anything runs, and marks the
// end of RecordsLog, where Run starts reading.
func New(o Options) (*Exporter, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	e := &Exporter{o: o}
	reg := metrics.Registry()
	e.counters = metrics.NewCounters(reg)
	exits := o.Exits
	if exits == nil {
		e.cri = newCRIExits(o.Stats, o.CRIEndpoints)
		exits = e.cri
	}
	e.sampler = metrics.NewSampler(reg, metrics.SamplerOptions{Stats: o.Stats, Interval: o.Interval, Log: o.Log, Exits: exits, Alert: e.memoryAlert})
	mux := http.NewServeMux()
	mux.Handle("/", metrics.Handler(reg, e.sampler.Healthy))
	mux.HandleFunc("/readyz", e.serveReady)
	e.handler = mux
	if o.Events {
		k := o.Kube
		if k == nil {
			var err error
			if k, err = kube.InCluster(); err != nil {
				return nil, fmt.Errorf("events: %w", err)
			}
		}
		if o.Node == "" {
			return nil, errors.New("events: the node's name is not known (set NODE_NAME from the pod's spec.nodeName)")
		}
		e.poster = &events.Poster{Kube: k, Node: o.Node, Log: o.Log}
	}
	if o.RecordsLog != "" {
		// From the end as it is now: records written before are not
		// counted again (the node agent restarts with its pod).
		e.tailer = records.NewTail(o.RecordsLog, nil)
	}
	if o.Address != "" {
		ln, err := net.Listen("tcp", o.Address)
		if err != nil {
			return nil, fmt.Errorf("metrics address %s: %w", o.Address, err)
		}
		e.ln = ln
	}
	return e, nil
}

// Addr is the address the metrics are served at (nil when none).
func (e *Exporter) Addr() net.Addr {
	if e.ln == nil {
		return nil
	}
	return e.ln.Addr()
}

// SetReady sets what /readyz answers: 200 when ok, else 503 with why. It
// is for what runs beside the exporter (the NRI plugin: registered with
// the runtime or not); until it is called, /readyz answers 200.
func (e *Exporter) SetReady(ok bool, why string) {
	e.ready.Store(&readiness{ok: ok, why: why})
}

// serveReady answers /readyz.
func (e *Exporter) serveReady(w http.ResponseWriter, _ *http.Request) {
	if r := e.ready.Load(); r != nil && !r.ok {
		http.Error(w, "not ready: "+r.why, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// WarnNode posts (or counts) a Warning Event on the node when events are
// on (events.Poster.WarnNode); without them it does nothing.
func (e *Exporter) WarnNode(ctx context.Context, reason, msg string) error {
	if e == nil || e.poster == nil {
		return nil
	}
	return e.poster.WarnNode(ctx, reason, msg)
}

// Observe counts a record and posts the Events it calls for (queued: it
// does not block). A sweep that failed is logged and counted, not posted.
func (e *Exporter) Observe(r records.Record) {
	e.counters.Observe(r)
	if r.Sweep.Err != "" {
		e.o.Log.Warn("could not sweep the /dev/shm of a restarted container", "pod", r.Pod.Namespace+"/"+r.Pod.Name, "container", r.Pod.Container,
			"id", r.ID, "path", r.Sweep.Path, "err", r.Sweep.Err, "swept_bytes", r.Sweep.Bytes, "swept_files", r.Sweep.Files)
	}
	if e.poster != nil {
		e.poster.Observe(r)
	}
}

// memoryAlert logs what the samples show of a container's memory and
// posts it as an Event on its pod (queued) when events are on.
func (e *Exporter) memoryAlert(a metrics.MemoryAlert) {
	var ev events.PodEvent
	switch a.Kind {
	case metrics.AlertNearLimit:
		ev = events.NearMemoryLimit(a.Container)
	case metrics.AlertOOMKilled:
		ev = events.OOMKilled(a.Container, a.Processes, a.Age)
	default:
		return
	}
	c := a.Container
	attrs := []any{"reason", ev.Reason, "namespace", ev.Pod.Namespace, "pod", ev.Pod.Name, "container", cmp.Or(ev.Pod.Container, c.Name),
		"id", c.ID, "shm_used_bytes", c.Shm.Used}
	if m := c.Memory; m != nil {
		attrs = append(attrs, "limit_bytes", m.Limit, "limit_of", m.LimitOf, "working_set_bytes", m.WorkingSet)
	}
	if a.Kind == metrics.AlertOOMKilled {
		attrs = append(attrs, "processes", a.Processes, "sample_age", a.Age.Round(time.Second).String())
	}
	e.o.Log.Warn(ev.Message, attrs...)
	if e.poster != nil {
		e.poster.Emit(ev)
	}
}

// ObserveFor returns an enforce.Config.Observe that hands component's
// records to Observe.
func (e *Exporter) ObserveFor(component string) func(enforce.Subject, enforce.Result) {
	return func(s enforce.Subject, r enforce.Result) { e.Observe(records.FromResult(component, s, r)) }
}

// Run samples, follows the records log and serves until ctx ends.
func (e *Exporter) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); e.sampler.Run(ctx) }()
	if e.tailer != nil {
		go e.tail(ctx)
	}
	var err error
	if e.ln != nil {
		srv := &http.Server{Handler: e.handler, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			<-ctx.Done()
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			defer c()
			_ = srv.Shutdown(sctx)
		}()
		e.o.Log.Info("serving metrics", "address", e.ln.Addr().String())
		if serr := srv.Serve(e.ln); !errors.Is(serr, http.ErrServerClosed) {
			err = fmt.Errorf("serve metrics on %s: %w", e.ln.Addr(), serr)
			cancel()
		}
	}
	<-ctx.Done()
	<-done
	if e.cri != nil {
		e.cri.Close()
	}
	if e.poster != nil {
		e.poster.Flush()
	}
	return err
}

// tail follows the records log from where New found its end.
func (e *Exporter) tail(ctx context.Context) {
	t := e.tailer
	defer t.Close()
	tick := time.NewTicker(TailInterval)
	defer tick.Stop()
	last := ""
	for {
		err := t.Read(e.Observe)
		if msg := fmt.Sprint(err); err != nil && msg != last {
			e.o.Log.Warn("reading the records log", "err", msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
