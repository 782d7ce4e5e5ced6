package exporter_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpurun/gpurun/kube"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/observe/exporter"
	"github.com/gpurun/gpurun/observe/records/recordstest"
	"github.com/gpurun/gpurun/observe/shmstats"
)

// TestRecordsLogCounted: records node/enforce appends to the log_file
// after the exporter started are counted in the served metrics.
func TestRecordsLogCounted(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "gpurun.log")
	old, _ := recordstest.Run(t, recordstest.Case{Fixture: recordstest.CRIGPU, Refuse: true, Subject: enforce.Subject{ID: "before"}})
	if err := os.WriteFile(logFile, old, 0o644); err != nil {
		t.Fatal(err)
	}
	exp, err := exporter.New(exporter.Options{
		Address: "127.0.0.1:0", RecordsLog: logFile, Interval: 100 * time.Millisecond,
		Stats: shmstats.Options{Docker: "none", Containerd: []string{filepath.Join(dir, "none")}, Podman: []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- exp.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	log, _ := recordstest.Run(t,
		recordstest.Case{Fixture: recordstest.CRIGPU, Subject: enforce.Subject{ID: "a"}},
		recordstest.Case{Fixture: recordstest.CRIGPU, Refuse: true, Subject: enforce.Subject{ID: "b"}})
	f, err := os.OpenFile(logFile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(log); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want := map[string]float64{"done": 1, "refused": 1} // the record before the start is not read
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := remounts(t, "http://"+exp.Addr().String()+"/metrics")
		if got["done"] == want["done"] && got["refused"] == want["refused"] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("remounts by outcome %v, want %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func remounts(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range mfs["gpurun_shm_remounts_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    exporter.Options
		want string
	}{
		{"events without a node name", exporter.Options{Events: true, Kube: &kube.Kube{}}, "NODE_NAME"},
		{"a bad address", exporter.Options{Address: "127.0.0.1:notaport"}, "127.0.0.1:notaport"},
	} {
		_, err := exporter.New(tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// TestReadyz: /readyz says what SetReady was told last (ready until then);
// /metrics and /healthz are served beside it, /healthz ok once sampled.
func TestReadyz(t *testing.T) {
	dir := t.TempDir()
	exp, err := exporter.New(exporter.Options{
		Address: "127.0.0.1:0", Interval: time.Hour,
		Stats: shmstats.Options{Docker: "none", Containerd: []string{filepath.Join(dir, "none")}, Podman: []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- exp.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	get := func(path string) (int, string) {
		t.Helper()
		var resp *http.Response
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err = http.Get("http://" + exp.Addr().String() + path)
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	for _, step := range []struct {
		set      func()
		code     int
		contains string
	}{
		{func() {}, http.StatusOK, "ok"},
		{func() { exp.SetReady(false, "not registered with the runtime") }, http.StatusServiceUnavailable, "not registered with the runtime"},
		{func() { exp.SetReady(true, "") }, http.StatusOK, "ok"},
	} {
		step.set()
		if code, body := get("/readyz"); code != step.code || !strings.Contains(body, step.contains) {
			t.Errorf("/readyz: %d %q, want %d with %q", code, body, step.code, step.contains)
		}
	}
	if code, _ := get("/metrics"); code != http.StatusOK {
		t.Errorf("/metrics: %d", code)
	}
	// /healthz is 503 ("no sample yet") until Run's first sample, which
	// runs beside the server: wait for it, as a liveness probe would.
	code, body := get("/healthz")
	for deadline := time.Now().Add(5 * time.Second); code != http.StatusOK && strings.Contains(body, "no sample yet") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		code, body = get("/healthz")
	}
	if code != http.StatusOK {
		t.Errorf("/healthz: %d %q", code, body)
	}
}
