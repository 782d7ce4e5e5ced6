package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpurun/gpurun/observe/metrics"
	"github.com/gpurun/gpurun/observe/shmstats"
)

const gib = int64(1) << 30

// memCtr is a pod's container whose /dev/shm holds shm bytes and whose
// working set is ws of a limit (whose: shmstats.LimitContainer, …), with
// its cgroup's oom_kill count.
func memCtr(id string, pid int, shm, ws, limit int64, whose string, oom int64) shmstats.Container {
	c := podCtr(id, "ml", "job-0", "trainer", limit/2, shm, shm)
	c.PID, c.Shm.Device = pid, "0:50"
	c.Memory = &shmstats.Memory{Version: 2, Limit: limit, LimitOf: whose, Usage: ws, WorkingSet: ws, OOMKills: oom}
	c.Memory.Share(shm, true)
	return c
}

// fakeExits answers Exit from a script: by container id, the answers of
// successive calls (the last one repeated).
type fakeExits struct {
	answers map[string][]exitAnswer
	calls   map[string]int
}

type exitAnswer struct {
	exit metrics.Exit
	err  error
}

func (f *fakeExits) Exit(_ context.Context, id string) (metrics.Exit, error) {
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	as := f.answers[id]
	if len(as) == 0 {
		return metrics.Exit{}, metrics.ErrNoSuchContainer
	}
	a := as[min(f.calls[id], len(as)-1)]
	f.calls[id]++
	return a.exit, a.err
}

// watched runs samples through a Sampler 15 s apart and returns the alerts
// of each sample, and the registry.
func watched(t *testing.T, exits metrics.Exits, log *slog.Logger, samples ...[]shmstats.Container) ([][]metrics.MemoryAlert, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var got [][]metrics.MemoryAlert
	var cur []metrics.MemoryAlert
	s := metrics.NewSampler(reg, metrics.SamplerOptions{
		Collect: (&fake{samples: samples}).collect, Exits: exits, Log: log,
		Alert: func(a metrics.MemoryAlert) { cur = append(cur, a) },
		Now:   func() time.Time { return now },
	})
	for range samples {
		cur = nil
		if err := s.Sample(context.Background()); err != nil {
			t.Fatal(err)
		}
		got = append(got, cur)
		now = now.Add(15 * time.Second)
	}
	return got, reg
}

// kinds counts the alerts of each sample, "near-limit" and "oom-killed".
func kinds(alerts [][]metrics.MemoryAlert, kind string) []int {
	out := make([]int, len(alerts))
	for i, as := range alerts {
		for _, a := range as {
			if a.Kind == kind {
				out[i]++
			}
		}
	}
	return out
}

// TestNearLimitEpisodes: an alert when the working set reaches 90 % of the
// limit while /dev/shm holds at least a quarter of it, once per episode:
// re-armed below 80 %, or by a restart (a new id, a new pid).
func TestNearLimitEpisodes(t *testing.T) {
	const limit = 16 * gib
	at := func(id string, pid int, frac float64) []shmstats.Container {
		return []shmstats.Container{memCtr(id, pid, 7*gib, int64(frac*float64(limit)), limit, shmstats.LimitContainer, 0)}
	}
	tests := []struct {
		name    string
		samples [][]shmstats.Container
		want    []int
	}{
		{"arm, fire once, stay quiet", [][]shmstats.Container{at("a", 1, 0.5), at("a", 1, 0.92), at("a", 1, 0.97), at("a", 1, 0.91)}, []int{0, 1, 0, 0}},
		{"hovering between 80 and 90 % is one episode", [][]shmstats.Container{at("a", 1, 0.92), at("a", 1, 0.85), at("a", 1, 0.93)}, []int{1, 0, 0}},
		{"re-armed below 80 %", [][]shmstats.Container{at("a", 1, 0.92), at("a", 1, 0.7), at("a", 1, 0.92)}, []int{1, 0, 1}},
		{"re-armed by a restart (new id)", [][]shmstats.Container{at("a", 1, 0.92), at("b", 2, 0.92)}, []int{1, 1}},
		{"re-armed by a restart under the same id (new pid)", [][]shmstats.Container{at("a", 1, 0.92), at("a", 2, 0.95)}, []int{1, 1}},
		{"/dev/shm a small part: none", [][]shmstats.Container{{memCtr("a", 1, gib, 15*gib, limit, shmstats.LimitContainer, 0)}}, []int{0}},
		{"the pod's limit counts", [][]shmstats.Container{{memCtr("a", 1, 7*gib, 15*gib, limit, shmstats.LimitPod, 0)}}, []int{1}},
		{"the host's memory is no limit: none", [][]shmstats.Container{{memCtr("a", 1, 7*gib, 15*gib, limit, shmstats.LimitHost, 0)}}, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := watched(t, nil, nil, tt.samples...)
			if k := kinds(got, metrics.AlertNearLimit); !equalInts(k, tt.want) {
				t.Errorf("near-limit alerts per sample %v, want %v", k, tt.want)
			}
			for _, as := range got {
				for _, a := range as {
					if a.Container.Memory == nil || a.Container.Memory.WorkingSet < 9*limit/10 {
						t.Errorf("alert about %+v", a.Container.Memory)
					}
				}
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOOMKills: a live container whose cgroup's oom_kill count grew, and a
// container that left the samples and that the CRI says was OOMKilled,
// each once per kill, with the sample before the kill; counted.
func TestOOMKills(t *testing.T) {
	const limit = 16 * gib
	live := func(oom int64) []shmstats.Container {
		return []shmstats.Container{memCtr("a", 1, 7*gib, 12*gib, limit, shmstats.LimitContainer, oom)}
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	oomKilled := metrics.Exit{Reason: "OOMKilled", ExitCode: 137, FinishedAt: t0.Add(12 * time.Second)}
	docker := live(0)
	docker[0].Engine, docker[0].Pod = shmstats.EngineDocker, nil
	tests := []struct {
		name    string
		samples [][]shmstats.Container
		exits   map[string][]exitAnswer
		want    []int
		// wantProcesses and wantAge are the last alert's; wantLog is in the log.
		wantProcesses int
		wantAge       time.Duration
		wantCount     map[string]float64 // killed=…,shm_over_quarter=… → count
		wantLog       string
	}{
		{"a process killed, the container lives", [][]shmstats.Container{live(0), live(0), live(2), live(2)}, nil,
			[]int{0, 0, 1, 0}, 2, 15 * time.Second, map[string]float64{"killed=process,shm_over_quarter=true": 2}, ""},
		{"kills before gpurun looked are not new", [][]shmstats.Container{live(3), live(3)}, nil, []int{0, 0}, 0, 0, nil, ""},
		{"the container ended OOMKilled", [][]shmstats.Container{live(0), nil}, map[string][]exitAnswer{"a": {{exit: oomKilled}}},
			[]int{0, 1}, 0, 12 * time.Second, map[string]float64{"killed=container,shm_over_quarter=true": 1}, ""},
		{"the CRI had not handled the exit yet", [][]shmstats.Container{live(0), nil, nil, nil}, map[string][]exitAnswer{"a": {{exit: metrics.Exit{Running: true}}, {exit: oomKilled}}},
			[]int{0, 0, 1, 0}, 0, 12 * time.Second, map[string]float64{"killed=container,shm_over_quarter=true": 1}, ""},
		{"ended otherwise", [][]shmstats.Container{live(0), nil}, map[string][]exitAnswer{"a": {{exit: metrics.Exit{Reason: "Error", ExitCode: 1}}}}, []int{0, 0}, 0, 0, nil, ""},
		{"removed already", [][]shmstats.Container{live(0), nil}, map[string][]exitAnswer{}, []int{0, 0}, 0, 0, nil, ""},
		{"the CRI cannot be reached", [][]shmstats.Container{live(0), nil}, map[string][]exitAnswer{"a": {{err: errors.New("dial unix /run/containerd/containerd.sock: connect: no such file or directory")}}},
			[]int{0, 0}, 0, 0, nil, "containerd.sock"},
		{"a kill reported from the count, then an ordinary exit: not another", [][]shmstats.Container{live(0), live(1), nil},
			map[string][]exitAnswer{"a": {{exit: metrics.Exit{Reason: "OOMKilled", ExitCode: 1}}}}, []int{0, 1, 0}, 1, 15 * time.Second,
			map[string]float64{"killed=process,shm_over_quarter=true": 1, "killed=container,shm_over_quarter=true": 0}, ""},
		{"a kill reported from the count, then the container killed", [][]shmstats.Container{live(0), live(1), nil},
			map[string][]exitAnswer{"a": {{exit: oomKilled}}}, []int{0, 1, 1}, 0, 15 * time.Second,
			map[string]float64{"killed=process,shm_over_quarter=true": 1, "killed=container,shm_over_quarter=true": 1}, ""},
		{"not a CRI container: the CRI is not asked", [][]shmstats.Container{docker, nil}, map[string][]exitAnswer{"a": {{exit: oomKilled}}}, []int{0, 0}, 0, 0, nil, ""},
		{"/dev/shm under a quarter", [][]shmstats.Container{{memCtr("a", 1, gib, 12*gib, limit, shmstats.LimitContainer, 0)}, {memCtr("a", 1, gib, 12*gib, limit, shmstats.LimitContainer, 1)}}, nil,
			[]int{0, 1}, 1, 15 * time.Second, map[string]float64{"killed=process,shm_over_quarter=false": 1, "killed=process,shm_over_quarter=true": 0}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logBuf bytes.Buffer
			var exits metrics.Exits
			if tt.exits != nil {
				exits = &fakeExits{answers: tt.exits}
			}
			got, reg := watched(t, exits, slog.New(slog.NewTextHandler(&logBuf, nil)), tt.samples...)
			if k := kinds(got, metrics.AlertOOMKilled); !equalInts(k, tt.want) {
				t.Fatalf("OOM alerts per sample %v, want %v", k, tt.want)
			}
			var last *metrics.MemoryAlert
			for _, as := range got {
				for i := range as {
					last = &as[i]
				}
			}
			if last != nil {
				if last.Processes != tt.wantProcesses || last.Age != tt.wantAge || last.Container.ID != "a" || last.Container.Shm.Used == 0 {
					t.Errorf("alert %+v: processes %d, age %s; want %d, %s", last, last.Processes, last.Age, tt.wantProcesses, tt.wantAge)
				}
			}
			kills := series(t, reg, "gpurun_shm_oom_kills_total")
			for k, v := range tt.wantCount {
				if kills[norm(k)] != v {
					t.Errorf("gpurun_shm_oom_kills_total{%s} = %v, want %v (all: %v)", k, kills[norm(k)], v, kills)
				}
			}
			if len(kills) != 4 {
				t.Errorf("%d series, want the 4 of every label pair from the start: %v", len(kills), kills)
			}
			if tt.wantLog != "" && !strings.Contains(logBuf.String(), tt.wantLog) {
				t.Errorf("log %q lacks %q", logBuf.String(), tt.wantLog)
			}
		})
	}
}
