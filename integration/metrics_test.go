//go:build integration

package integration

import (
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpurun/gpurun/integration/harness"
)

// scraper runs `gpurun stats --listen` and scrapes it.
type scraper struct {
	url string
}

// startListen starts `gpurun stats --listen` on a free port of the host
// with args (the engines), sampling every 200ms, and stops it at the end.
func startListen(t *testing.T, config string, args ...string) *scraper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	full := append([]string{"stats", "--listen", addr, "--interval", "200ms", "--no-orphans", "--peaks-file", ""}, args...)
	cmd := exec.Command(bin(t, "gpurun"), full...)
	cmd.Env = append(cmd.Environ(), "GPURUN_CONFIG="+config)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("gpurun %s:\n%s", strings.Join(full, " "), out.String())
		}
	})
	s := &scraper{url: "http://" + addr}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpurun stats --listen %s: not healthy within 10s (%v)\n%s", addr, err, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scrape parses /metrics with the Prometheus text parser.
func (s *scraper) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return parseExposition(t, resp.Body)
}

// text returns the lines of /metrics that start with prefix, for the log
// (docs/observe.md quotes it).
func (s *scraper) text(t *testing.T, prefix string) string {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// parseExposition parses the text exposition format with the Prometheus
// text parser.
func parseExposition(t *testing.T, r io.Reader) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// value returns the value of name's series whose id label is id.
func seriesByID(mfs map[string]*dto.MetricFamily, name, id string) (v float64, labels map[string]string, ok bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, nil, false
	}
	for _, m := range mf.GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		if l["id"] == id {
			return m.GetGauge().GetValue(), l, true
		}
	}
	return 0, nil, false
}

// waitMetric scrapes until cond holds for the series of id (a sample is
// taken every 200ms), and returns the last scrape.
func (s *scraper) waitMetric(t *testing.T, what string, cond func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mfs := s.scrape(t)
		if cond(mfs) {
			return mfs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within 10s; last scrape: used %v peak %v", what, mfs["gpurun_shm_used_bytes"], mfs["gpurun_shm_peak_bytes"])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestMetricsDocker(t *testing.T) {
	e := newRunEnv(t)
	s := startListen(t, e.config, "--docker-host", e.d.Host, "--containerd-state", filepath.Join(e.d.Dir, "ctd", "state"),
		"--podman-root", filepath.Join(t.TempDir(), "no-podman"))
	run := func(name string, args ...string) string { return dockerRun(t, e.d, name, args...) }
	sh := func(cmd string) []string { return []string{e.img, "sh", "-c", cmd + " && exec sleep 3600"} }
	writer := run("writer", append([]string{"-e", "NVIDIA_VISIBLE_DEVICES=all"}, sh(writeMiB("w", 3))...)...)
	donor := run("donor", append([]string{"--ipc", "shareable"}, sh(writeMiB("d", 2))...)...)
	peer := run("peer", append([]string{"--ipc", "container:donor"}, sh(writeMiB("p", 1))...)...)
	waitWritten(t, e.d, map[string]string{"writer": "w", "donor": "d", "peer": "p"})

	mib := func(n int64) float64 { return float64(n << 20) }
	within := func(got, want float64) bool { return got >= want-page && got <= want+page }
	for _, tc := range []struct {
		name string
		id   string
		used float64
	}{
		{"a container", writer, mib(3)},
		{"IPC donor: its own and its peer's bytes", donor, mib(3)},
		{"IPC peer: the same tmpfs", peer, mib(3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mfs := s.waitMetric(t, tc.name, func(mfs map[string]*dto.MetricFamily) bool {
				v, _, ok := seriesByID(mfs, "gpurun_shm_used_bytes", tc.id)
				return ok && within(v, tc.used)
			})
			size, l, _ := seriesByID(mfs, "gpurun_shm_size_bytes", tc.id)
			peak, _, _ := seriesByID(mfs, "gpurun_shm_peak_bytes", tc.id)
			if size != mib(64) || !within(peak, tc.used) || l["engine"] != "docker" || l["container"] == "" {
				t.Errorf("size %v peak %v labels %v: want 64 MiB, the peak at the use, engine docker and a name", size, peak, l)
			}
			if _, _, ok := seriesByID(mfs, "gpurun_shm_plan_info", tc.id); !ok {
				t.Errorf("no plan_info for %s", tc.id)
			}
		})
	}

	t.Logf("the scrape (gpurun_shm_*):\n%s", s.text(t, "gpurun_shm_"))

	// The peak survives the data being deleted.
	if _, stderr, err := e.d.Docker("exec", "writer", "rm", "/dev/shm/w"); err != nil {
		t.Fatalf("rm: %v\n%s", err, stderr)
	}
	mfs := s.waitMetric(t, "writer emptied", func(mfs map[string]*dto.MetricFamily) bool {
		v, _, ok := seriesByID(mfs, "gpurun_shm_used_bytes", writer)
		return ok && v < page
	})
	if peak, _, _ := seriesByID(mfs, "gpurun_shm_peak_bytes", writer); !within(peak, mib(3)) {
		t.Errorf("peak after the data was deleted: %v, want 3 MiB ± a page", peak)
	}

	// A removed container leaves the metrics.
	if _, stderr, err := e.d.Docker("rm", "-f", "writer"); err != nil {
		t.Fatalf("docker rm: %v\n%s", err, stderr)
	}
	s.waitMetric(t, "writer gone", func(mfs map[string]*dto.MetricFamily) bool {
		for _, name := range []string{"gpurun_shm_used_bytes", "gpurun_shm_size_bytes", "gpurun_shm_peak_bytes", "gpurun_shm_plan_info"} {
			if _, _, ok := seriesByID(mfs, name, writer); ok {
				return false
			}
		}
		_, _, donorThere := seriesByID(mfs, "gpurun_shm_used_bytes", donor)
		return donorThere
	})
}

func TestMetricsCRI(t *testing.T) { onEachContainerd(t, testMetricsCRI) }

// testMetricsCRI scrapes `gpurun stats --listen` pointed at containerd c's
// state dir while a CRI pod of two containers writes known bytes to its
// one /dev/shm.
func testMetricsCRI(t *testing.T, c *harness.Containerd) {
	s := startListen(t, noLogConfig(t), criOnly(t, c)...)
	pod, trainer, side := writingPod(t, c)
	ids := map[string]string{trainer: "trainer", side: "sidecar"}
	// both waits until every container of the pod has a series of name
	// that cond accepts.
	both := func(name string, cond func(float64) bool) func(map[string]*dto.MetricFamily) bool {
		return func(mfs map[string]*dto.MetricFamily) bool {
			for id := range ids {
				if v, _, ok := seriesByID(mfs, name, id); !ok || !cond(v) {
					return false
				}
			}
			return true
		}
	}
	mfs := s.waitMetric(t, "the pod's 8 MiB", both("gpurun_shm_used_bytes", func(v float64) bool { return near(int64(v), 8<<20) }))
	for id, name := range ids {
		t.Run(name, func(t *testing.T) {
			used, l, _ := seriesByID(mfs, "gpurun_shm_used_bytes", id)
			size, _, _ := seriesByID(mfs, "gpurun_shm_size_bytes", id)
			peak, _, _ := seriesByID(mfs, "gpurun_shm_peak_bytes", id)
			if l["engine"] != "containerd" || l["namespace"] != "ml" || l["pod"] != "job" || l["uid"] == "" || l["container"] != name {
				t.Errorf("labels %v: want engine containerd, namespace ml, pod job, a uid, container %s", l, name)
			}
			// One tmpfs for the pod: the same bytes for both containers.
			if size != 64<<20 || !near(int64(used), 8<<20) || peak != used {
				t.Errorf("size %v used %v peak %v: want the pod's 64 MiB tmpfs holding 8 MiB, the peak at the use", size, used, peak)
			}
			if _, _, ok := seriesByID(mfs, "gpurun_shm_plan_info", id); !ok {
				t.Errorf("no plan_info for %s", name)
			}
		})
	}
	var uids []string
	for id := range ids {
		_, l, _ := seriesByID(mfs, "gpurun_shm_used_bytes", id)
		uids = append(uids, l["uid"])
	}
	if uids[0] != uids[1] {
		t.Errorf("uids %v: want the pod's one uid", uids)
	}

	// The peak survives the data being deleted, for both containers.
	if out, err := c.Exec(trainer, "rm", "/dev/shm/t"); err != nil {
		t.Fatalf("rm: %v\n%s", err, out)
	}
	mfs = s.waitMetric(t, "the trainer's file deleted", both("gpurun_shm_used_bytes", func(v float64) bool { return near(int64(v), 2<<20) }))
	for id, name := range ids {
		if peak, _, _ := seriesByID(mfs, "gpurun_shm_peak_bytes", id); !near(int64(peak), 8<<20) {
			t.Errorf("%s's peak after the deletion: %v, want 8 MiB ± a page", name, peak)
		}
	}

	// Removing the pod removes its series.
	c.RemovePod(pod)
	s.waitMetric(t, "the pod gone", func(mfs map[string]*dto.MetricFamily) bool {
		for _, name := range []string{"gpurun_shm_used_bytes", "gpurun_shm_size_bytes", "gpurun_shm_peak_bytes", "gpurun_shm_plan_info"} {
			for id := range ids {
				if _, _, ok := seriesByID(mfs, name, id); ok {
					return false
				}
			}
		}
		return true
	})
}
