package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/observe/metrics"
	"github.com/gpurun/gpurun/observe/records"
	"github.com/gpurun/gpurun/observe/records/recordstest"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// fake returns the samples in turn, then the last one again.
type fake struct {
	samples [][]shmstats.Container
	err     error
	n       int
}

func (f *fake) collect(context.Context, shmstats.Options) ([]shmstats.Container, error) {
	s := f.samples[min(f.n, len(f.samples)-1)]
	f.n++
	return s, f.err
}

func podCtr(id, ns, pod, name string, size, used, peak int64) shmstats.Container {
	return shmstats.Container{Engine: shmstats.EngineContainerd, Namespace: "k8s.io", ID: id, Name: name, GPU: true,
		Pod:      &shmstats.Pod{Namespace: ns, Name: pod, UID: pod + "-uid", Container: name},
		Decision: shmstats.Decision{Action: "remount", Size: size, Reason: "GPU container", InEffect: true},
		Shm:      shmstats.Shm{Kind: "engine-host-tmpfs", Tmpfs: true, Size: size, Used: used, Peak: peak, Orphaned: -1}}
}

func dockerCtr(id, name string, size, used int64) shmstats.Container {
	return shmstats.Container{Engine: shmstats.EngineDocker, Namespace: "moby", ID: id, Name: name,
		Decision:   shmstats.Decision{Action: "none", Reason: "no GPU"},
		Shm:        shmstats.Shm{Kind: "private-tmpfs", Tmpfs: true, Size: size, Used: used, Peak: used, Orphaned: 4096},
		Suggestion: &shmstats.Suggestion{Size: 2 * size}}
}

// series returns name's series as "label=value,..." → value.
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[labelString(m)] = value(m)
		}
	}
	return out
}

func labelString(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		if l.GetValue() != "" && l.GetName() != "reason" && l.GetName() != "uid" && l.GetName() != "engine" {
			parts = append(parts, l.GetName()+"="+l.GetValue())
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// norm sorts a "label=value,..." key as labelString does.
func norm(k string) string {
	parts := strings.Split(k, ",")
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return m.GetUntyped().GetValue()
}

func TestSamplerMetrics(t *testing.T) {
	a := podCtr("a", "ml", "job-0", "trainer", 1<<30, 300<<20, 500<<20)
	b := podCtr("b", "ml", "job-0", "sidecar", 1<<30, 300<<20, 500<<20)
	d := dockerCtr("d", "web", 64<<20, 1<<20)
	tests := []struct {
		name   string
		sample []shmstats.Container
		metric string
		want   map[string]float64
	}{
		{"size", []shmstats.Container{a, d}, "gpurun_shm_size_bytes", map[string]float64{
			"id=a,namespace=ml,pod=job-0,container=trainer": float64(a.Shm.Size), "id=d,container=web": float64(d.Shm.Size)}},
		{"used", []shmstats.Container{a, b}, "gpurun_shm_used_bytes", map[string]float64{
			"id=a,namespace=ml,pod=job-0,container=trainer": float64(a.Shm.Used), "id=b,namespace=ml,pod=job-0,container=sidecar": float64(b.Shm.Used)}},
		{"peak", []shmstats.Container{a}, "gpurun_shm_peak_bytes", map[string]float64{"id=a,namespace=ml,pod=job-0,container=trainer": float64(a.Shm.Peak)}},
		{"orphaned only where computed", []shmstats.Container{a, d}, "gpurun_shm_orphaned_bytes", map[string]float64{"id=d,container=web": float64(d.Shm.Orphaned)}},
		{"suggested only where suggested", []shmstats.Container{a, d}, "gpurun_shm_suggested_size_bytes", map[string]float64{"id=d,container=web": float64(d.Suggestion.Size)}},
		{"plan", []shmstats.Container{a, d}, "gpurun_shm_plan_info", map[string]float64{
			"id=a,namespace=ml,pod=job-0,container=trainer,action=remount,gpu=true,in_effect=true": 1, "id=d,container=web,action=none,gpu=false,in_effect=false": 1}},
		{"no tmpfs: the plan only", []shmstats.Container{{Engine: "docker", ID: "h", Name: "hostipc", Decision: shmstats.Decision{Action: "none"}, Shm: shmstats.Shm{HostIPC: true}}},
			"gpurun_shm_size_bytes", map[string]float64{}},
		{"memory limit", []shmstats.Container{memCtr("m", 1, 7*gib, 15*gib, 16*gib, shmstats.LimitContainer, 0), a}, "gpurun_memory_limit_bytes",
			map[string]float64{"id=m,namespace=ml,pod=job-0,container=trainer": float64(16 * gib)}},
		{"memory usage", []shmstats.Container{memCtr("m", 1, 7*gib, 15*gib, 16*gib, shmstats.LimitContainer, 0)}, "gpurun_memory_usage_bytes",
			map[string]float64{"id=m,namespace=ml,pod=job-0,container=trainer": float64(15 * gib)}},
		{"memory working set", []shmstats.Container{memCtr("m", 1, 7*gib, 15*gib, 16*gib, shmstats.LimitContainer, 0)}, "gpurun_memory_working_set_bytes",
			map[string]float64{"id=m,namespace=ml,pod=job-0,container=trainer": float64(15 * gib)}},
		{"whose limit", []shmstats.Container{memCtr("m", 1, 7*gib, 15*gib, 16*gib, shmstats.LimitPod, 0), memCtr("h", 2, 0, gib, 64*gib, shmstats.LimitHost, 0)}, "gpurun_memory_limit_info",
			map[string]float64{"id=m,namespace=ml,pod=job-0,container=trainer,limit_of=pod": 1, "id=h,namespace=ml,pod=job-0,container=trainer,limit_of=host": 1}},
		{"memory not read: no memory series", []shmstats.Container{withMemoryErr(memCtr("m", 1, 7*gib, 15*gib, 16*gib, shmstats.LimitContainer, 0))}, "gpurun_memory_usage_bytes",
			map[string]float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s := metrics.NewSampler(reg, metrics.SamplerOptions{Collect: (&fake{samples: [][]shmstats.Container{tt.sample}}).collect})
			if err := s.Sample(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := series(t, reg, tt.metric)
			if len(got) != len(tt.want) {
				t.Fatalf("%s: %v, want %v", tt.metric, got, tt.want)
			}
			for k, v := range tt.want {
				if got[norm(k)] != v {
					t.Errorf("%s{%s} = %v, want %v (all: %v)", tt.metric, k, got[norm(k)], v, got)
				}
			}
		})
	}
}

// TestGoneContainersLeave: a container that is not in the latest sample
// has no series.
func TestGoneContainersLeave(t *testing.T) {
	a := podCtr("a", "ml", "job-0", "trainer", 1<<30, 1, 1)
	d := dockerCtr("d", "web", 64<<20, 1<<20)
	reg := prometheus.NewRegistry()
	s := metrics.NewSampler(reg, metrics.SamplerOptions{Collect: (&fake{samples: [][]shmstats.Container{{a, d}, {d}}}).collect})
	for i, want := range []int{2, 1} {
		if err := s.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := testutil.CollectAndCount(s, "gpurun_shm_used_bytes"); got != want {
			t.Errorf("sample %d: %d used series, want %d", i, got, want)
		}
	}
}

// TestGonePeaksForgotten: a sample without errors forgets the peaks of
// tmpfs (by device) no container has any more; one that missed an engine
// forgets none.
func TestGonePeaksForgotten(t *testing.T) {
	a := podCtr("a", "ml", "job-0", "trainer", 1<<30, 1, 1)
	a.Shm.Device = "0:50"
	for _, tc := range []struct {
		name     string
		err      error
		wantGone bool
	}{
		{"clean sample", nil, true},
		{"an engine missed", errors.New("dockerd: unreachable"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peaks := shmstats.NewPeaks()
			kept, gone := shmstats.PeakKey("a", "0:50"), shmstats.PeakKey("b", "0:51")
			peaks.Observe(kept, 1<<20)
			peaks.Observe(gone, 2<<20)
			s := metrics.NewSampler(prometheus.NewRegistry(), metrics.SamplerOptions{
				Stats:   shmstats.Options{Peaks: peaks},
				Collect: (&fake{samples: [][]shmstats.Container{{a}}, err: tc.err}).collect,
			})
			_ = s.Sample(context.Background())
			if _, ok := peaks.Get(kept); !ok {
				t.Errorf("the peak of a's tmpfs, still there, was forgotten")
			}
			if _, ok := peaks.Get(gone); ok == tc.wantGone {
				t.Errorf("the peak of the gone tmpfs: kept %v, want kept %v", ok, !tc.wantGone)
			}
		})
	}
}

// TestNearCeiling: a container is counted when it comes within 5 % of its
// size, once while it stays there, again when it comes back.
func TestNearCeiling(t *testing.T) {
	const size = 1000 << 20
	at := func(used int64) []shmstats.Container {
		return []shmstats.Container{podCtr("a", "ml", "job-0", "trainer", size, used, used), dockerCtr("d", "web", size, 1)}
	}
	f := &fake{samples: [][]shmstats.Container{at(10), at(size * 96 / 100), at(size), at(size / 2), at(size * 95 / 100)}}
	reg := prometheus.NewRegistry()
	s := metrics.NewSampler(reg, metrics.SamplerOptions{Collect: f.collect})
	for i, want := range []float64{0, 1, 1, 1, 2} {
		if err := s.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := series(t, reg, "gpurun_shm_near_ceiling_total")["namespace=ml"]; got != want {
			t.Errorf("sample %d: near_ceiling_total{namespace=ml} = %v, want %v", i, got, want)
		}
	}
}

// TestRemountCounters counts the records node/enforce itself makes.
func TestRemountCounters(t *testing.T) {
	_, rs := recordstest.Run(t,
		recordstest.Case{Fixture: recordstest.CRIGPU, Subject: enforce.Subject{ID: "c1"}},
		recordstest.Case{Fixture: recordstest.CRIGPU, Subject: enforce.Subject{ID: "c2"}},
		recordstest.Case{Fixture: recordstest.CRIGPU, Refuse: true, Subject: enforce.Subject{ID: "c3"}},
		recordstest.Case{Fixture: recordstest.CRIGPU, Fail: true, Subject: enforce.Subject{ID: "c4"}},
		recordstest.Case{Fixture: recordstest.CRIPlain, Subject: enforce.Subject{ID: "c5"}},
		recordstest.Case{Fixture: recordstest.DockerGPU, Subject: enforce.Subject{ID: "c6"}},
	)
	reg := prometheus.NewRegistry()
	c := metrics.NewCounters(reg)
	for _, r := range rs {
		c.Observe(r)
	}
	got := series(t, reg, "gpurun_shm_remounts_total")
	want := map[string]float64{
		"outcome=done": 2, "outcome=unchanged": 0,
		"outcome=refused,cause=unsafe": 1, "outcome=refused,cause=not-named": 0, "outcome=refused,cause=unknown-root": 0,
		"outcome=failed,cause=error": 1,
	}
	if len(got) != len(want) {
		t.Fatalf("remounts_total %v, want %v", got, want)
	}
	for k, v := range want {
		if got[norm(k)] != v {
			t.Errorf("remounts_total{%s} = %v, want %v", k, got[norm(k)], v)
		}
	}
}

func withMemoryErr(c shmstats.Container) shmstats.Container {
	c.Memory = &shmstats.Memory{Err: "memory cgroup: gone", OOMKills: -1}
	return c
}

// TestSweepCounters: the bytes and files the sweeps removed, from records
// with swept bytes, and the sweeps that failed.
func TestSweepCounters(t *testing.T) {
	swept := func(bytes int64, files int, err string) records.Record {
		return records.Record{Action: "remount", Sweep: records.Sweep{Path: "/run/x/shm", Bytes: bytes, Files: files, Err: err}}
	}
	reg := prometheus.NewRegistry()
	c := metrics.NewCounters(reg)
	for _, r := range []records.Record{swept(700<<20, 12, ""), swept(100<<20, 1, ""), swept(0, 0, ""), swept(4096, 1, "unlink /dev/shm/b: permission denied"), swept(0, 0, "open /run/x/shm: no such file or directory"), {}} {
		c.Observe(r)
	}
	for name, want := range map[string]float64{
		"gpurun_shm_swept_bytes_total":  800<<20 + 4096,
		"gpurun_shm_swept_files_total":  14,
		"gpurun_shm_sweep_errors_total": 2,
	} {
		if got := series(t, reg, name)[""]; got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// TestLint checks every metric's name and help with client_golang's
// linter (promlint).
func TestLint(t *testing.T) {
	reg := metrics.Registry()
	metrics.NewCounters(reg)
	s := metrics.NewSampler(reg, metrics.SamplerOptions{Collect: (&fake{samples: [][]shmstats.Container{{podCtr("a", "ml", "p", "c", 1<<30, 1<<30, 1<<30), dockerCtr("d", "web", 64<<20, 1<<20),
		memCtr("m", 1, 7*gib, 15*gib, 16*gib, shmstats.LimitContainer, 0)}}}).collect})
	if err := s.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	n := 0
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "gpurun_") {
			n++
		}
	}
	if n < 19 {
		t.Errorf("%d gpurun metrics linted; want every one of them (19)", n)
	}
}

func TestHandler(t *testing.T) {
	reg := metrics.Registry()
	metrics.NewCounters(reg)
	for _, tt := range []struct {
		health error
		code   int
	}{{nil, 200}, {errors.New("no sample yet"), 503}} {
		srv := httptest.NewServer(metrics.Handler(reg, func() error { return tt.health }))
		for path, want := range map[string]int{"/healthz": tt.code, "/metrics": 200} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s with health %v: %d, want %d", path, tt.health, resp.StatusCode, want)
			}
		}
		srv.Close()
	}
}

// TestDashboardNamesMetrics: every gpurun metric the Grafana dashboard
// (deploy/grafana/gpurun-shm.json) queries is one the exporter serves.
func TestDashboardNamesMetrics(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/gpurun-shm.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("gpurun-shm.json: %v", err)
	}
	reg := metrics.Registry()
	metrics.NewCounters(reg)
	s := metrics.NewSampler(reg, metrics.SamplerOptions{Collect: (&fake{samples: [][]shmstats.Container{{podCtr("a", "ml", "p", "c", 1<<30, 1<<30, 1<<30), dockerCtr("d", "web", 64<<20, 1<<20)}}}).collect})
	if err := s.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		served[mf.GetName()] = true
	}
	name := regexp.MustCompile(`\b(gpurun_[a-z_]+|process_[a-z_]+)`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				n++
				if !served[m] {
					t.Errorf("panel %q queries %s, which is not served", p.Title, m)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the dashboard queries no gpurun metric")
	}
}
