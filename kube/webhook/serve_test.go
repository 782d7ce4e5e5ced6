package webhook

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gpurun/gpurun/internal/exitcode"
	"github.com/gpurun/gpurun/internal/nullwebhook"
	"github.com/gpurun/gpurun/policy"
)

// TestServeRefusals: options that do not go together, a policy or a
// serving pair that cannot be read: exit 2, before anything listens.
func TestServeRefusals(t *testing.T) {
	defaults := func() (*policy.Policy, error) { return policy.Default(), nil }
	missing := filepath.Join(t.TempDir(), "tls.crt")
	for _, tc := range []struct {
		name string
		o    ServeOptions
		want string
	}{
		{"--dry-run", ServeOptions{DryRun: true, SelfSigned: true}, "--dry-run does not apply"},
		{"both kinds of TLS", ServeOptions{SelfSigned: true, CertFile: "c", KeyFile: "k"}, "exclude each other"},
		{"a cert without its key", ServeOptions{CertFile: "c"}, "go together"},
		{"no TLS", ServeOptions{}, "give --tls-cert-file and --tls-key-file, or --self-signed"},
		{"a policy that cannot be read", ServeOptions{CertFile: missing, KeyFile: missing,
			LoadPolicy: func() (*policy.Policy, error) { return nil, errors.New("bad.toml") }}, "bad.toml"},
		{"a pair that cannot be read", ServeOptions{CertFile: missing, KeyFile: missing, LoadPolicy: defaults}, missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Listen, tc.o.Log = "127.0.0.1:0", &bytes.Buffer{}
			err := Serve(context.Background(), tc.o)
			if exitcode.Of(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Serve: %v (exit %d), want exit 2 with %q", err, exitcode.Of(err), tc.want)
			}
		})
	}
}

// helperEnv, when set, makes the test binary run Serve instead of the
// tests (TestServeSIGTERM starts it so): the value is the cert and key
// files and the shutdown delay, separated by commas.
const helperEnv = "GPURUN_WEBHOOK_TEST_SERVE"

func TestMain(m *testing.M) {
	if v := os.Getenv(helperEnv); v != "" {
		os.Exit(serveHelper(v))
	}
	os.Exit(m.Run())
}

// nullEnv, set beside helperEnv, makes the helper process serve the
// do-nothing webhook (internal/nullwebhook) with the same pair, instead of
// gpurun's: BenchmarkServeProcess's floor.
const nullEnv = "GPURUN_WEBHOOK_TEST_NULL"

// serveHelper is the webhook process of TestServeSIGTERM.
func serveHelper(v string) int {
	f := strings.Split(v, ",")
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want cert,key,delay\n", helperEnv, v)
		return 2
	}
	if os.Getenv(nullEnv) != "" {
		return serveNull(f[0], f[1])
	}
	delay, err := time.ParseDuration(f[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if f := os.Getenv(profileEnv); f != "" {
		stop, err := cpuProfile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer stop()
	}
	err = Serve(context.Background(), ServeOptions{
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", CertFile: f[0], KeyFile: f[1],
		// The manifests' --shutdown-timeout: net/http's Shutdown counts a
		// connection that has had no request yet (a client's transport
		// dials one while it waits for an idle one, and may keep it
		// unused) as busy for its first 5 s, so a shorter timeout fails
		// while clients are busy.
		ShutdownDelay: delay, ShutdownTimeout: 10 * time.Second,
		LoadPolicy: func() (*policy.Policy, error) { return policy.Default(), nil }, Log: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// serveNull serves the do-nothing webhook on a free port of 127.0.0.1,
// TLS with the pair in certFile and keyFile, and says where as Serve
// does, until it is killed.
func serveNull(certFile, keyFile string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	slog.New(slog.NewJSONHandler(os.Stderr, nil)).Info(nullServing, "listen", ln.Addr().String())
	fmt.Fprintln(os.Stderr, nullwebhook.Server("", MutatePath).ServeTLS(ln, certFile, keyFile))
	return 1
}

// nullServing is the do-nothing webhook's line when it serves.
const nullServing = "do-nothing webhook serving"

// profileEnv, when set for a benchmark that starts a webhook process
// (BenchmarkServeProcess), names the file for its CPU profile.
const profileEnv = "GPURUN_WEBHOOK_TEST_CPUPROFILE"

// cpuProfile starts a CPU profile into file; stop ends it.
func cpuProfile(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", profileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", profileEnv, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// webhookProcess is a webhook started by TestServeSIGTERM.
type webhookProcess struct {
	cmd           *exec.Cmd
	addr, metrics string
	mu            sync.Mutex
	log           bytes.Buffer
	done          chan error
}

func (p *webhookProcess) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startWebhook runs the test binary as a webhook (serveHelper), with env
// added to its environment, and waits until it serves.
func startWebhook(t testing.TB, certFile, keyFile string, delay time.Duration, env ...string) *webhookProcess {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &webhookProcess{cmd: exec.Command(exe), done: make(chan error, 1)}
	p.cmd.Env = append(append(os.Environ(), env...), helperEnv+"="+certFile+","+keyFile+","+delay.String())
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{ addr, metrics string }, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.Write(append(sc.Bytes(), '\n'))
			p.mu.Unlock()
			var l struct{ Msg, Listen, Metrics string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && (l.Msg == "gpurun webhook serving" || l.Msg == nullServing) {
				serving <- struct{ addr, metrics string }{l.Listen, l.Metrics}
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	select {
	case s := <-serving:
		p.addr, p.metrics = s.addr, s.metrics
	case err := <-p.done:
		t.Fatalf("the webhook exited (%v) before serving:\n%s", err, p.logText())
	case <-time.After(30 * time.Second):
		t.Fatalf("the webhook did not serve within 30 s:\n%s", p.logText())
	}
	return p
}

// TestServeSIGTERM: a webhook process gets SIGTERM while 8 clients post
// reviews to it over kept-alive HTTP/1.1 connections, as the API server
// does. The clients go on sending until they have seen it not ready plus
// an endpoint propagation lag (what the API server does: it drops the
// replica once the endpoints do). With a shutdown delay longer than that,
// no review is lost, a review whose body is still arriving when the delay
// ends is answered, and the process exits 0. With no delay — Serve as
// shipped before, which shut down at once — reviews are lost: the cause
// of the GPU pods admitted without their volume when a replica went away.
func TestServeSIGTERM(t *testing.T) {
	caPEM, certFile, keyFile, _ := servingPair(t, t.TempDir(), time.Now())
	body, err := json.Marshal(review(t, loadPod(t, "kubeflow-pytorchjob-worker.yaml"), admissionv1.Create))
	if err != nil {
		t.Fatal(err)
	}
	const propagation = 400 * time.Millisecond
	for _, tc := range []struct {
		name     string
		delay    time.Duration
		wantLost bool
	}{
		{"drain 2s", 2 * time.Second, false},
		{"no drain", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startWebhook(t, certFile, keyFile, tc.delay)
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(caPEM)
			// The API server's client: HTTP/1.1 only, kept-alive
			// connections (25 per host), 90 s idle.
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "gpurun-webhook.gpurun-system.svc"},
				TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
				MaxIdleConnsPerHost: 25, IdleConnTimeout: 90 * time.Second,
			}}
			defer client.CloseIdleConnections()
			post := func(c *http.Client, r io.Reader) error {
				req, _ := http.NewRequest("POST", "https://"+p.addr+MutatePath, r)
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				var out admissionv1.AdmissionReview
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.Response == nil || len(out.Response.Patch) == 0 {
					return fmt.Errorf("status %d, %v, %+v", resp.StatusCode, err, out.Response)
				}
				return nil
			}

			// The endpoints: the clients stop once readiness has failed
			// and the change has propagated.
			var stopped atomic.Bool
			var sigterm atomic.Int64
			go func() {
				for !stopped.Load() {
					resp, err := http.Get("http://" + p.metrics + "/readyz")
					if err == nil {
						resp.Body.Close()
					}
					if err != nil || resp.StatusCode != 200 {
						time.Sleep(propagation)
						stopped.Store(true)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			var wg sync.WaitGroup
			var sent, afterTERM, lost atomic.Int64
			var firstErr atomic.Value
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stopped.Load() {
						after := sigterm.Load() != 0
						err := post(client, bytes.NewReader(body))
						sent.Add(1)
						if after {
							afterTERM.Add(1)
						}
						if err != nil {
							lost.Add(1)
							firstErr.CompareAndSwap(nil, err.Error())
						}
					}
				}()
			}
			time.Sleep(500 * time.Millisecond)
			// Before SIGTERM, the clients' kept-alive connections are all
			// the review port has accepted: at least one, at most the
			// transport's 25 (it may dial while another connection is
			// being freed), far fewer than the reviews.
			if n, err := scrapeCounter("http://"+p.metrics+"/metrics", MetricsPrefix+"connections_total"); err != nil || n < 1 || n > 25 {
				t.Errorf("connections_total %v (%v) after %d reviews from 8 clients over kept-alive connections: want 1 to 25", n, err, sent.Load())
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			sigterm.Store(time.Now().UnixNano())

			// A review whose body is still arriving when the delay ends:
			// Shutdown waits for it.
			var slowErr error
			slowDone := make(chan struct{})
			if tc.delay > 0 {
				go func() {
					defer close(slowDone)
					pr, pw := io.Pipe()
					go func() {
						_, _ = pw.Write(body[:len(body)/2])
						time.Sleep(tc.delay + 500*time.Millisecond)
						_, _ = pw.Write(body[len(body)/2:])
						pw.Close()
					}()
					slowClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
						TLSClientConfig: client.Transport.(*http.Transport).TLSClientConfig,
						TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
					}}
					slowErr = post(slowClient, pr)
				}()
			} else {
				close(slowDone)
			}
			wg.Wait()
			<-slowDone
			select {
			case err := <-p.done:
				if err != nil {
					t.Errorf("the webhook exited with %v:\n%s", err, p.logText())
				}
			case <-time.After(tc.delay + 15*time.Second):
				t.Fatalf("the webhook did not exit after SIGTERM:\n%s", p.logText())
			}
			t.Logf("%d reviews, %d sent after SIGTERM, %d lost (first: %v)", sent.Load(), afterTERM.Load(), lost.Load(), firstErr.Load())
			if afterTERM.Load() < 8 {
				t.Fatalf("only %d reviews were sent after SIGTERM: the test tested nothing", afterTERM.Load())
			}
			if tc.wantLost {
				if lost.Load() == 0 {
					t.Errorf("no review lost without a drain: the test cannot tell a drain from none")
				}
				return
			}
			if lost.Load() != 0 {
				t.Errorf("%d of %d reviews lost across SIGTERM (first: %v)\n%s", lost.Load(), sent.Load(), firstErr.Load(), p.logText())
			}
			if slowErr != nil {
				t.Errorf("the review in flight when the delay ended: %v", slowErr)
			}
			if !strings.Contains(p.logText(), `"msg":"gpurun webhook stopped"`) {
				t.Errorf("no stop logged:\n%s", p.logText())
			}
		})
	}
}

// scrapeCounter reads one unlabelled sample from a Prometheus text
// endpoint.
func scrapeCounter(url, name string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}
