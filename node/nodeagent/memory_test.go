package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The memory test's child processes: the test binary run again as an agent
// (install, then its run loop) or as `gpurun node status`, printing its
// peak RSS when done.
const (
	childEnv     = "GPURUN_TEST_NODE_CHILD" // "agent" or "status"
	childRootEnv = "GPURUN_TEST_NODE_ROOT"
	childFromEnv = "GPURUN_TEST_NODE_FROM"
)

// The DaemonSet's memory limit (deploy/kubernetes: 128Mi), and what the
// test allows of it: an agent and three `gpurun node status` at once (the
// readiness probe and two kubectl exec) must stay well under the limit.
const (
	daemonSetLimit = 128 << 20
	statusBudget   = 24 << 20
	totalBudget    = daemonSetLimit / 2
)

// The binaries' sizes: gpurun, gpurun-full and gpurun-runtime as make
// image builds them (stripped, static) are about 12, 31 and 3 MiB; a little
// more here.
const (
	cliSize     = 14 << 20
	fullCLISize = 34 << 20
	runtimeSize = 4 << 20
)

// runChild is TestMain's part for the children.
func runChild(mode string) int {
	a := &Agent{HostRoot: os.Getenv(childRootEnv), SourceDir: os.Getenv(childFromEnv)}
	switch mode {
	case "status":
		for i := 0; i < 5; i++ {
			_ = a.Status()
		}
	case "agent":
		if err := a.Install(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		rec, _ := loadRecord(a.host(a.statePath()))
		last := ""
		for i := 0; i < 10; i++ {
			last = a.check1(last)
			if rec == nil {
				return 1
			}
			time.Sleep(20 * time.Millisecond)
		}
	default:
		return 2
	}
	hwm, err := peakRSS("self")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("VmHWM %d\n", hwm)
	return 0
}

// peakRSS reads VmHWM, the peak resident set size, of a process (pid or
// "self") in bytes.
func peakRSS(pid string) (int64, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%s/status: no VmHWM", pid)
}

// bigNode is a node whose image holds binaries of realistic sizes.
func bigNode(t testing.TB) *node {
	t.Helper()
	n := newNode(t, "containerd-1.6.20-config-default.toml")
	for name, size := range map[string]int{CLIBinary: cliSize, FullCLIBinary: fullCLISize, RuntimeBinary: runtimeSize} {
		data := make([]byte, size)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.image, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// startChild runs the test binary as a child of the mode.
func startChild(t *testing.T, n *node, mode string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childRootEnv+"="+n.root, childFromEnv+"="+n.image)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

// childPeak waits for a child and returns the peak RSS it printed.
func childPeak(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer) int64 {
	t.Helper()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	var hwm int64
	if _, err := fmt.Sscanf(strings.TrimSpace(out.String()), "VmHWM %d", &hwm); err != nil {
		t.Fatalf("child printed %q", out)
	}
	return hwm
}

// TestStatusMemory runs an agent and, next to it, three concurrent
// `gpurun node status` (the readiness probe and two kubectl exec), each a
// process of its own as in the pod, and checks their peak memory: each
// status well under the DaemonSet's limit, and all four together under
// half of it. Reading the binaries whole to hash them (as status did)
// costs their size in every one of those processes.
func TestStatusMemory(t *testing.T) {
	n := bigNode(t)
	agent, agentOut := startChild(t, n, "agent")
	agentPeak := childPeak(t, agent, agentOut)
	// The agent installed; now it runs its loop while status is asked.
	agent, agentOut = startChild(t, n, "agent")
	type child struct {
		cmd *exec.Cmd
		out *bytes.Buffer
	}
	var status []child
	for i := 0; i < 3; i++ {
		cmd, out := startChild(t, n, "status")
		status = append(status, child{cmd, out})
	}
	var worst int64
	for i, c := range status {
		p := childPeak(t, c.cmd, c.out)
		t.Logf("status %d: peak RSS %.1f MiB", i, float64(p)/(1<<20))
		worst = max(worst, p)
	}
	agentPeak = max(agentPeak, childPeak(t, agent, agentOut))
	total := agentPeak + 3*worst
	t.Logf("agent: peak RSS %.1f MiB; agent and three status at once: at most %.1f MiB (limit %d MiB)", float64(agentPeak)/(1<<20), float64(total)/(1<<20), daemonSetLimit>>20)
	if worst > statusBudget {
		t.Errorf("gpurun node status peaked at %.1f MiB, over %d MiB", float64(worst)/(1<<20), statusBudget>>20)
	}
	if total > totalBudget {
		t.Errorf("an agent and three status calls peak at %.1f MiB together, over %d MiB (half the DaemonSet's limit)", float64(total)/(1<<20), totalBudget>>20)
	}
}

// BenchmarkStatus measures one status call on a node with binaries of
// realistic sizes; -benchmem shows what it allocates. "fresh": the
// binaries were just copied, so status hashes them; "settled": the agent
// has recorded that they have not changed since, so status only stats
// them.
func BenchmarkStatus(b *testing.B) {
	for _, settled := range []bool{false, true} {
		name := "fresh"
		if settled {
			name = "settled"
		}
		b.Run(name, func(b *testing.B) {
			n := bigNode(b)
			a := n.agent(false)
			if err := a.Install(context.Background()); err != nil {
				b.Fatal(err)
			}
			if settled {
				time.Sleep(settleTime + 100*time.Millisecond)
				rec, err := loadRecord(n.path(DefaultStatePath))
				if err != nil || !a.noteBinaries(rec) {
					b.Fatalf("no stat recorded: %v", err)
				}
				if err := rec.save(n.path(DefaultStatePath)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if st := a.Status(); st.Reason == "" || len(st.Problems) > 0 {
					b.Fatalf("status %+v", st)
				}
			}
		})
	}
}
