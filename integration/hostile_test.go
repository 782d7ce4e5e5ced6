//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gpurun/gpurun/integration/harness"
	"github.com/gpurun/gpurun/node/enforce"
	"github.com/gpurun/gpurun/node/nri"
	"github.com/gpurun/gpurun/oci"
	"github.com/gpurun/gpurun/policy"
)

// The hostile corpus (testdata/hostile) is what a pod spec, a compose file,
// a docker command line — or a broken engine — can put in front of the
// node-level front doors, each case with a one-line "what it tries".
// TestHostileCorpus runs every case through every front door that can take
// it, in a sandbox (runInSandbox) whose /dev/shm is a decoy:
//
//   - plan: `gpurun plan --spec config.json --json`;
//   - shim: the real gpurun-runtime on real runc (`run`, the container runs
//     df on its /dev/shm), the bundle where containerd puts it,
//     <state>/io.containerd.runtime.v2.task/k8s.io/<id>, next to the pod's
//     real sandbox tmpfs <state>/io.containerd.grpc.v1.cri/sandboxes/<pod>/shm,
//     and the same bundle under plain runc for comparison;
//   - hook: the `gpurun hook` binary with the OCI state on stdin, for a
//     container whose init is a real process in a mount namespace of its
//     own holding the container's own 64 MiB tmpfs at <rootfs>/dev/shm, as
//     runc has it before pivot_root;
//   - nri: the NRI plugin's CreateContainer in this process, with the
//     container as containerd describes it and the same real tmpfs.
//
// Each run under the default policy (fail-open) and with fail_closed. For
// each, the mount table is read before and after: any mount whose options
// (tmpfs size included) change, appear or go, other than the pod's own
// sandbox tmpfs the engine named, is a remount outside the engine's dirs;
// the decoy /dev/shm is one of them. The test prints, per front door, the
// cases tried and how many runs remounted outside, crashed (a panic, even
// one the enforcer recovered; a signal; a hang), failed a start that plain
// runc (or the engine) would have made under fail-open, failed under
// fail_closed without a clear fail_closed error (or started despite an
// error), shrank a /dev/shm, or missed a case's expected action — and fails
// unless all but the first are 0.

// hostileCase is one case of the corpus.
type hostileCase struct {
	// File and Name say where it is; What is its one-line "what it tries".
	File, Name, What string
	// Kind is the input: "config" (a config.json), "state" (a hook's OCI
	// state), "nri" (NRI's pod and container).
	Kind string
	// Bundle is where the engine put the bundle: "containerd" (default;
	// the engine names the pod's tmpfs) or "fallback" (a layout gpurun
	// does not know: the policy's engine_roots, here the state dir).
	Bundle string
	// Config is the config.json of a state case: "private" (the
	// container's own tmpfs, default) or "sandbox" (a bind of the pod's).
	Config string
	// Expect is the action the case must plan under the default policy
	// where a front door acts ("" for no expectation): the corpus's own
	// check that the front doors are really at work.
	Expect string
	// Open names a front door that still remounts outside the engine's
	// dirs on this case — a known defect, written "open: DOOR: why": the
	// report counts it apart, and fails once the door no longer does it
	// (so the line goes when the defect is fixed).
	Open string
	// Template is the input, a text/template (see caseEnv.funcs).
	Template string
}

// loadCorpus reads testdata/hostile/*.txtar. A file holds cases as
// "-- name --" sections (text before the first is a comment); a section
// starts with header lines "what: ..." (required), "bundle:", "config:",
// "expect:", "open:", then the template. The kind is the file's: state.txtar holds
// states, nri.txtar NRI requests, the others config.json files.
func loadCorpus(t *testing.T) []hostileCase {
	t.Helper()
	files, err := filepath.Glob("testdata/hostile/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus in testdata/hostile: %v", err)
	}
	var out []hostileCase
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		kind := "config"
		switch filepath.Base(f) {
		case "state.txtar":
			kind = "state"
		case "nri.txtar":
			kind = "nri"
		}
		cases, err := parseCorpus(filepath.Base(f), kind, string(data))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			if seen[c.Name] {
				t.Fatalf("%s: case %q defined twice", f, c.Name)
			}
			seen[c.Name] = true
		}
		out = append(out, cases...)
	}
	return out
}

// parseCorpus parses one corpus file (see loadCorpus).
func parseCorpus(file, kind, text string) ([]hostileCase, error) {
	var out []hostileCase
	var cur *hostileCase
	var body []string
	flush := func() error {
		if cur == nil {
			return nil
		}
		lines := body
		for len(lines) > 0 {
			key, val, ok := strings.Cut(lines[0], ": ")
			if !ok {
				break
			}
			switch key {
			case "what":
				cur.What = val
			case "bundle":
				cur.Bundle = val
			case "config":
				cur.Config = val
			case "expect":
				cur.Expect = val
			case "open":
				cur.Open = val
			default:
				ok = false
			}
			if !ok {
				break
			}
			lines = lines[1:]
		}
		if cur.What == "" {
			return fmt.Errorf("%s: case %q has no what: line", file, cur.Name)
		}
		cur.Template = strings.TrimSpace(strings.Join(lines, "\n"))
		if cur.Template == "" && kind != "state" {
			return fmt.Errorf("%s: case %q is empty", file, cur.Name)
		}
		out = append(out, *cur)
		return nil
	}
	for _, line := range strings.Split(text, "\n") {
		if name, ok := strings.CutPrefix(line, "-- "); ok && strings.HasSuffix(name, " --") {
			if err := flush(); err != nil {
				return nil, err
			}
			cur = &hostileCase{File: file, Name: strings.TrimSuffix(name, " --"), Kind: kind, Bundle: "containerd", Config: "private"}
			body = nil
			continue
		}
		if cur != nil {
			body = append(body, line)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// corpusInput is the corpus job's input.
type corpusInput struct {
	Rootfs string          `json:"rootfs"`
	Spec   json.RawMessage `json:"spec"` // runc spec's config.json
	Cases  []hostileCase   `json:"cases"`
}

// doorRun is one case through one front door under one policy.
type doorRun struct {
	Door, Policy, Case string
	// Outside lists the mounts that changed other than the pod's own
	// tmpfs; Fallback those under the engine_roots fallback (a "fallback"
	// bundle), which the policy allows.
	Outside, Fallback []string
	// Crash says what crashed; Failed why a start failed under fail-open
	// that the engine would have made; Unclear what fail_closed did
	// wrong; Shrunk which /dev/shm got smaller; Missed the expected action
	// not taken; Setup a case the harness could not set up.
	Crash, Failed, Unclear, Shrunk, Missed, Setup string
	// Action is the plan logged; Error what the front door logged as its
	// error.
	Action, Error string
	// NA says the front door cannot take the case (NRI and a config.json
	// that is no spec, which no engine would hand NRI).
	NA      bool
	Seconds float64
}

// corpusResult is the corpus job's result.
type corpusResult struct {
	Runs []doorRun
}

// corpusDoors are the front doors of the corpus, in the order they are
// printed.
func corpusDoors() []string { return []string{"plan", "shim", "hook", "nri"} }

func TestHostileCorpus(t *testing.T) {
	cases := loadCorpus(t)
	dir := t.TempDir()
	rootfs := harness.BusyboxRootfs(t, dir)
	specDir := filepath.Join(dir, "spec")
	if out, err := exec.Command("runc", "spec", "--bundle", mkdirAll(t, specDir)).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	spec, err := os.ReadFile(filepath.Join(specDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res corpusResult
	runInSandbox(t, "corpus", corpusInput{Rootfs: rootfs, Spec: spec, Cases: cases}, &res, 20*time.Minute)
	reportCorpus(t, cases, res)
}

func mkdirAll(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// reportCorpus prints the counts per front door and fails on any run that
// broke a rule.
func reportCorpus(t *testing.T, cases []hostileCase, res corpusResult) {
	t.Helper()
	type counts struct {
		cases                                                                  map[string]bool
		runs, outside, fallback, crash, failed, unclear, shrunk, missed, setup int
		seconds                                                                float64
	}
	by := map[string]*counts{}
	for _, d := range corpusDoors() {
		by[d] = &counts{cases: map[string]bool{}}
	}
	kinds := map[string]int{}
	for _, c := range cases {
		kinds[c.Kind]++
	}
	open := map[string]string{} // case -> the door it is open for
	for _, c := range cases {
		if c.Open != "" {
			door, _, _ := strings.Cut(c.Open, ":")
			open[c.Name] = strings.TrimSpace(door)
		}
	}
	knownOutside := map[string]int{}
	var bad []string
	for _, r := range res.Runs {
		if r.NA {
			continue
		}
		if open[r.Case] == r.Door {
			if len(r.Outside) == 0 {
				bad = append(bad, fmt.Sprintf("%s (%s) %s: marked open (a known remount outside the engine's dirs) but no longer does it: drop its open: line", r.Door, r.Policy, r.Case))
			} else {
				knownOutside[r.Door]++
				r.Outside = nil
			}
		}
		c := by[r.Door]
		if c == nil {
			t.Fatalf("run of unknown front door %q", r.Door)
		}
		c.cases[r.Case] = true
		c.runs++
		c.seconds += r.Seconds
		add := func(n *int, what, detail string) {
			if detail != "" {
				*n++
				bad = append(bad, fmt.Sprintf("%s (%s) %s: %s: %s", r.Door, r.Policy, r.Case, what, detail))
			}
		}
		if len(r.Outside) > 0 {
			c.outside++
			bad = append(bad, fmt.Sprintf("%s (%s) %s: remount outside the engine's dirs: %s", r.Door, r.Policy, r.Case, strings.Join(r.Outside, "; ")))
		}
		if len(r.Fallback) > 0 {
			c.fallback++
		}
		add(&c.crash, "crash", r.Crash)
		add(&c.failed, "failed start", r.Failed)
		add(&c.unclear, "fail_closed", r.Unclear)
		add(&c.shrunk, "shrunk", r.Shrunk)
		add(&c.missed, "expected action", r.Missed)
		add(&c.setup, "setup", r.Setup)
	}
	t.Logf("hostile corpus: %d cases (%d config.json, %d OCI states, %d NRI requests)", len(cases), kinds["config"], kinds["state"], kinds["nri"])
	for _, d := range corpusDoors() {
		c := by[d]
		known := ""
		if n := knownOutside[d]; n > 0 {
			known = fmt.Sprintf(" (and %d in cases marked open: known, not fixed)", n)
		}
		line := fmt.Sprintf("hostile corpus: %-4s %3d cases, %3d runs: remounts outside engine dirs %d%s, crashes %d, failed starts (fail-open) %d, unclear fail_closed %d, shrunk %d, missed actions %d (grown under engine_roots fallback %d; %.1fs)",
			d, len(c.cases), c.runs, c.outside, known, c.crash, c.failed, c.unclear, c.shrunk, c.missed, c.fallback, c.seconds)
		fmt.Println(line)
		t.Log(line)
		if c.setup > 0 {
			t.Errorf("%s: %d runs could not be set up", d, c.setup)
		}
		if c.runs == 0 {
			t.Errorf("%s: no case ran", d)
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// runCorpusJob runs the corpus in the sandbox.
func runCorpusJob(job sandboxJob) (any, error) {
	var in corpusInput
	if err := json.Unmarshal(job.Input, &in); err != nil {
		return nil, err
	}
	var base map[string]json.RawMessage
	if err := json.Unmarshal(in.Spec, &base); err != nil {
		return nil, fmt.Errorf("runc spec: %w", err)
	}
	r := &corpusRunner{job: job, in: in, base: base}
	var res corpusResult
	for i, c := range in.Cases {
		for _, door := range corpusDoors() {
			if !r.applies(door, c) {
				continue
			}
			pols := []string{"fail-open", "fail_closed"}
			if door == "plan" {
				pols = pols[:1] // plan has no start to fail
			}
			for _, pol := range pols {
				begin := time.Now()
				run := r.run(i, c, door, pol)
				run.Seconds = time.Since(begin).Seconds()
				res.Runs = append(res.Runs, run)
			}
		}
	}
	return res, nil
}

// corpusRunner runs cases in the sandbox.
type corpusRunner struct {
	job  sandboxJob
	in   corpusInput
	base map[string]json.RawMessage
	n    int
}

// applies says whether a front door takes a case: plan and the shim take
// config.json files, the hook config.json files and states, the NRI plugin
// NRI requests and those config.json files that are specs.
func (r *corpusRunner) applies(door string, c hostileCase) bool {
	switch c.Kind {
	case "state":
		return door == "hook"
	case "nri":
		return door == "nri"
	}
	return true
}

// caseEnv is one run's world: its directories, the engine's ids and the
// pod's real sandbox tmpfs; the template's data.
type caseEnv struct {
	Dir        string // the run's directory
	State      string // containerd's state dir
	SID, CID   string // the pod sandbox's and the container's ids
	OtherSID   string // another pod's sandbox id
	Bundle     string // the bundle directory
	Rootfs     string
	SandboxShm string // the pod's tmpfs: the one the engine names
	Pid        int    // the hook's container init
	OtherPid   int    // another container's init (otherInit)

	r       *corpusRunner
	c       hostileCase
	fail    bool
	holders []*holder
	policy  string // the policy file
	log     string // gpurun's log file
}

// newEnv makes a run's directories and the pod's sandbox tmpfs, as
// containerd mounts it (64 MiB, nosuid, nodev, noexec).
func (r *corpusRunner) newEnv(c hostileCase, door, pol string) (*caseEnv, error) {
	r.n++
	dir := filepath.Join(r.job.Dir, fmt.Sprintf("%04d-%s-%s", r.n, door, pol))
	e := &caseEnv{Dir: dir, State: filepath.Join(dir, "state"), SID: hexID(r.n, 1), CID: hexID(r.n, 2), OtherSID: hexID(r.n, 3),
		Rootfs: r.in.Rootfs, r: r, c: c, fail: pol == "fail_closed"}
	e.Bundle = filepath.Join(e.State, "io.containerd.runtime.v2.task", "k8s.io", e.CID)
	if c.Bundle == "fallback" {
		e.Bundle = filepath.Join(dir, "bundles", e.CID)
	}
	e.SandboxShm = filepath.Join(e.State, "io.containerd.grpc.v1.cri", "sandboxes", e.SID, "shm")
	if err := os.MkdirAll(e.Bundle, 0o755); err != nil {
		return nil, err
	}
	if err := mountShm(e.SandboxShm); err != nil {
		return nil, err
	}
	e.policy = filepath.Join(dir, "config.toml")
	e.log = filepath.Join(dir, "gpurun.log")
	text := fmt.Sprintf("log_file = %q\n", e.log)
	if c.Bundle == "fallback" {
		text += fmt.Sprintf("engine_roots = [%q]\n", e.State)
	}
	if e.fail {
		text += "fail_closed = true\n"
	}
	return e, os.WriteFile(e.policy, []byte(text), 0o644)
}

// hexID is a 64-digit id, distinct for each run and role, as containerd's.
func hexID(n, role int) string {
	return fmt.Sprintf("%08x%056x", n, role)
}

// mountShm mounts a 64 MiB tmpfs at path as engines do.
func mountShm(path string) error {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("mount tmpfs %s: %w", path, err)
	}
	return nil
}

// close stops the run's processes, unmounts everything of the run and
// removes its directory.
func (e *caseEnv) close() error {
	for _, h := range e.holders {
		h.stop()
	}
	err := harness.UnmountAll(e.Dir)
	return errors.Join(err, os.RemoveAll(e.Dir))
}

// render executes a template in the run's world (creating the tmpfs and
// links it asks for).
func (e *caseEnv) render(text string) ([]byte, error) {
	tmpl, err := template.New(e.c.Name).Funcs(e.funcs()).Parse(text)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, e); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// The size of a GPU container's /dev/shm in these runs: the containers ask
// for a GPU with NVIDIA_VISIBLE_DEVICES, as CUDA images do.
const hostileGPUEnv = "NVIDIA_VISIBLE_DEVICES=all"

// funcs are the templates' functions. JSON fragments:
//
//	std                   "ociVersion", "process" (GPU), "root", "hostname", "linux" members
//	stdResources RAW      std with RAW (JSON text) as linux.resources
//	process ENV...        "process" member running df on /dev/shm, GPU env plus ENV
//	processNoGPU ENV...   the same without the GPU env
//	root, linux           the members (linux: runc spec's, a cgroup of the run)
//	mounts                runc spec's mounts but /dev/shm, as list items
//	cri                   containerd's container-type and sandbox-id annotations (members)
//	shmBind SRC OPTS...   a /dev/shm bind mount of SRC (options rbind, rw, or OPTS)
//	shmTmpfs OPTS...      a /dev/shm tmpfs with OPTS
//	q S                   S as a JSON string
//
// effects (each returns the path):
//
//	tmpfs PATH            a 64 MiB tmpfs mounted at PATH
//	otherPod              another pod's sandbox tmpfs under the same state dir
//	symlink TARGET LINK   a symbolic link
//	otherInit             another container's init (its pid, also .OtherPid)
//	mkdir PATH            a directory
//
// and text: join A B..., repeat S N, nest OPEN INNER CLOSE N (INNER inside N
// OPEN...CLOSE pairs).
func (e *caseEnv) funcs() template.FuncMap {
	member := func(key string, v any) string {
		b, _ := json.Marshal(v)
		return fmt.Sprintf("%q: %s", key, b)
	}
	process := func(gpu bool, env []string) string {
		var p map[string]any
		_ = json.Unmarshal(e.r.base["process"], &p)
		p["terminal"] = false
		p["args"] = []string{"df", "-k", "/dev/shm"}
		list, _ := p["env"].([]any)
		if gpu {
			list = append(list, hostileGPUEnv)
		}
		for _, v := range env {
			list = append(list, v)
		}
		p["env"] = list
		return member("process", p)
	}
	root := func() string {
		return member("root", map[string]any{"path": e.Rootfs, "readonly": true})
	}
	linuxMap := func() map[string]any {
		var l map[string]any
		_ = json.Unmarshal(e.r.base["linux"], &l)
		l["cgroupsPath"] = e.r.job.CgroupParent + "/" + e.CID
		return l
	}
	linux := func() string { return member("linux", linuxMap()) }
	q := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}
	return template.FuncMap{
		"std": func() string {
			return strings.Join([]string{`"ociVersion": "1.0.2"`, process(true, nil), root(), `"hostname": "hostile"`, linux()}, ", ")
		},
		"stdResources": func(raw string) string {
			l := linuxMap()
			delete(l, "resources")
			b, _ := json.Marshal(l)
			withRaw := `"linux": {"resources": ` + raw + `, ` + strings.TrimPrefix(string(b), "{")
			return strings.Join([]string{`"ociVersion": "1.0.2"`, process(true, nil), root(), `"hostname": "hostile"`, withRaw}, ", ")
		},
		"process":      func(env ...string) string { return process(true, env) },
		"processNoGPU": func(env ...string) string { return process(false, env) },
		"root":         root,
		"linux":        linux,
		"mounts": func() string {
			var ms []json.RawMessage
			_ = json.Unmarshal(e.r.base["mounts"], &ms)
			var out []string
			for _, m := range ms {
				var d struct{ Destination string }
				_ = json.Unmarshal(m, &d)
				if d.Destination != "/dev/shm" {
					out = append(out, string(m))
				}
			}
			return strings.Join(out, ", ")
		},
		"cri": func() string {
			return fmt.Sprintf("%q: %q, %q: %q", oci.AnnotationCRIContainerType, "container", oci.AnnotationCRISandboxID, e.SID)
		},
		"shmBind": func(src string, opts ...string) string {
			if len(opts) == 0 {
				opts = []string{"rbind", "rw"}
			}
			b, _ := json.Marshal(map[string]any{"destination": "/dev/shm", "type": "bind", "source": src, "options": opts})
			return string(b)
		},
		"shmTmpfs": func(opts ...string) string {
			b, _ := json.Marshal(map[string]any{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": opts})
			return string(b)
		},
		"q": q,
		"tmpfs": func(path string) (string, error) {
			return path, mountShm(path)
		},
		"otherPod": func() (string, error) {
			p := filepath.Join(e.State, "io.containerd.grpc.v1.cri", "sandboxes", e.OtherSID, "shm")
			return p, mountShm(p)
		},
		"symlink": func(target, link string) (string, error) {
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				return "", err
			}
			return link, os.Symlink(target, link)
		},
		"otherInit": func() (int, error) {
			h, err := startHolder(filepath.Join(e.Dir, "other-rootfs", "dev", "shm"))
			if err != nil {
				return 0, err
			}
			e.holders = append(e.holders, h)
			e.OtherPid = h.cmd.Process.Pid
			return e.OtherPid, nil
		},
		"mkdir": func(path string) (string, error) {
			return path, os.MkdirAll(path, 0o755)
		},
		"join":   func(parts ...string) string { return filepath.Join(parts...) },
		"repeat": strings.Repeat,
		"nest": func(open, inner, close string, n int) string {
			return strings.Repeat(open, n) + inner + strings.Repeat(close, n)
		},
	}
}

// mountState is a mount table as the runs compare it: mount id ->
// mount point, type and every option.
type mountState map[int]string

func readMounts() (mountState, error) {
	ms, err := mountinfo.GetMounts(nil)
	if err != nil {
		return nil, err
	}
	out := mountState{}
	for _, m := range ms {
		out[m.ID] = fmt.Sprintf("%s %s %s %s", m.Mountpoint, m.FSType, m.Options, m.VFSOptions)
	}
	return out, nil
}

// diffMounts lists what changed between two mount tables, but for the
// mounts at allowed (the pod's own tmpfs), and apart from those under
// fallback (the engine_roots of a fallback bundle; "" for none).
func diffMounts(before, after mountState, allowed, fallback string) (outside, under []string) {
	at := func(line string) string { mp, _, _ := strings.Cut(line, " "); return mp }
	report := func(mp, what string) {
		switch {
		case mp == allowed:
		case fallback != "" && strings.HasPrefix(mp, fallback+"/"):
			under = append(under, what)
		default:
			outside = append(outside, what)
		}
	}
	for id, b := range before {
		a, ok := after[id]
		switch {
		case !ok:
			report(at(b), "gone: "+b)
		case a != b:
			report(at(b), fmt.Sprintf("%s -> %s", b, a))
		}
	}
	for id, a := range after {
		if _, ok := before[id]; !ok {
			report(at(a), "new: "+a)
		}
	}
	sort.Strings(outside)
	return outside, under
}

// logRecords reads gpurun's JSON log.
func logRecords(path string) []map[string]any {
	var out []map[string]any
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// logged sums up a run's records: the plan's action, the error, and a
// recovered panic.
type logged struct {
	action, err, panic string
	planned            bool
	after              int64
}

func readLogged(path string) logged {
	var l logged
	for _, rec := range logRecords(path) {
		switch rec["msg"] {
		case enforce.MsgPlanned:
			l.planned = true
			l.action, _ = rec["action"].(string)
			if a, ok := rec["after_bytes"].(float64); ok {
				l.after = int64(a)
			}
		case enforce.MsgFailed, enforce.MsgPolicyUnreadable:
			l.err, _ = rec["err"].(string)
			if a, ok := rec["action"].(string); ok {
				l.action = a
			}
			if s, ok := rec["stack"].(string); ok && s != "" {
				l.panic = l.err
			}
		}
	}
	return l
}

// goCrash returns the first line of a Go runtime crash in stderr, "" if
// none.
func goCrash(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "goroutine ") && strings.HasSuffix(line, ":") {
			return line
		}
	}
	return ""
}

// run runs case c through door under the policy pol, in a world of its own.
func (r *corpusRunner) run(i int, c hostileCase, door, pol string) doorRun {
	run := doorRun{Door: door, Policy: pol, Case: c.Name}
	e, err := r.newEnv(c, door, pol)
	if err != nil {
		run.Setup = err.Error()
		return run
	}
	defer func() {
		if err := e.close(); err != nil && run.Setup == "" {
			run.Setup = "cleanup: " + err.Error()
		}
	}()
	switch door {
	case "plan":
		r.runPlan(e, &run)
	case "shim":
		r.runShim(e, &run)
	case "hook":
		r.runHook(e, &run)
	case "nri":
		r.runNRI(e, &run)
	}
	return run
}

// input renders the case's config.json into the bundle (config and state
// cases) and returns it.
func (e *caseEnv) writeConfig(text string) ([]byte, error) {
	data, err := e.render(text)
	if err != nil {
		return nil, err
	}
	return data, os.WriteFile(filepath.Join(e.Bundle, "config.json"), data, 0o644)
}

// watch runs fn between two readings of the mount table and of the decoy
// /dev/shm and records what changed outside the pod's own tmpfs.
func (e *caseEnv) watch(run *doorRun, fn func()) {
	before, err := readMounts()
	if err != nil {
		run.Setup = err.Error()
		return
	}
	decoy := tmpfsBytes("/dev/shm")
	fn()
	after, err := readMounts()
	if err != nil {
		run.Setup = err.Error()
		return
	}
	fallback := ""
	if e.c.Bundle == "fallback" {
		fallback = e.State
	}
	run.Outside, run.Fallback = diffMounts(before, after, e.SandboxShm, fallback)
	if now := tmpfsBytes("/dev/shm"); now != decoy {
		run.Outside = append(run.Outside, fmt.Sprintf("the (decoy) host /dev/shm: %d -> %d bytes", decoy, now))
		// Put it back for the next run.
		_ = unix.Mount("", "/dev/shm", "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=65536k")
	}
	if now := tmpfsBytes(e.SandboxShm); now < 64<<20 {
		run.Shrunk = fmt.Sprintf("the pod's tmpfs %s: %d bytes", e.SandboxShm, now)
	}
}

// command runs a gpurun binary (or runc) with a deadline and returns what
// it printed and its error.
func command(timeout time.Duration, stdin []byte, env []string, argv ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("hung for %s: %w", timeout, err)
	}
	return out.String(), errb.String(), err
}

// runPlan: gpurun plan --spec. It must answer with a plan (exit 0, JSON)
// or refuse the input naming it (exit 2); anything else is a crash.
func (r *corpusRunner) runPlan(e *caseEnv, run *doorRun) {
	if _, err := e.writeConfig(e.c.Template); err != nil {
		run.Setup = err.Error()
		return
	}
	cfg := filepath.Join(e.Bundle, "config.json")
	var stdout, stderr string
	var err error
	e.watch(run, func() {
		stdout, stderr, err = command(2*time.Minute, nil, os.Environ(), filepath.Join(r.job.Bin, "gpurun"), "plan", "--spec", cfg, "--json")
	})
	var exit *exec.ExitError
	switch {
	case goCrash(stderr) != "":
		run.Crash = goCrash(stderr)
	case err == nil:
		var pl struct {
			Action string `json:"action"`
		}
		if jerr := json.Unmarshal([]byte(stdout), &pl); jerr != nil || pl.Action == "" {
			run.Failed = fmt.Sprintf("exit 0 without a JSON plan: %q", stdout)
		}
		run.Action = pl.Action
	case errors.As(err, &exit) && exit.ExitCode() == 2:
		run.Error = strings.TrimSpace(stderr)
		if !strings.Contains(stderr, cfg) {
			run.Failed = fmt.Sprintf("refused without naming the file: %q", stderr)
		}
	default:
		run.Crash = fmt.Sprintf("%v: %s", err, tail(stderr, 3))
	}
	if e.c.Expect != "" && run.Action != e.c.Expect {
		run.Missed = fmt.Sprintf("planned %q, want %q", run.Action, e.c.Expect)
	}
}

// dfBytes parses `df -k` output; -1 when there is none.
func dfBytes(out string) int64 {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return -1
	}
	fields := strings.Fields(strings.Join(lines[1:], " "))
	if len(fields) < 2 {
		return -1
	}
	n, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return -1
	}
	if n > math.MaxInt64/1024 {
		return math.MaxInt64 // an 8 EiB tmpfs, as asked for; no overflow
	}
	return n * 1024
}

// runShim: the bundle under plain runc, then under gpurun-runtime on runc.
func (r *corpusRunner) runShim(e *caseEnv, run *doorRun) {
	data, err := e.writeConfig(e.c.Template)
	if err != nil {
		run.Setup = err.Error()
		return
	}
	env := append(os.Environ(), policy.ConfigEnv+"="+e.policy)
	runc := func(rt, bundle, id string) (int64, string, error) {
		root := filepath.Join(e.Dir, "runc")
		argv := []string{rt, "--root", root, "--log", filepath.Join(e.Dir, "runc.log"), "--log-format", "json", "run", "--bundle", bundle, id}
		stdout, stderr, err := command(2*time.Minute, nil, env, argv...)
		_, _, _ = command(30*time.Second, nil, env, "runc", "--root", root, "delete", "--force", id)
		if err != nil {
			return -1, stderr, err
		}
		return dfBytes(stdout), stderr, nil
	}
	control := filepath.Join(e.Dir, "control")
	if err := os.MkdirAll(control, 0o755); err != nil {
		run.Setup = err.Error()
		return
	}
	if err := os.WriteFile(filepath.Join(control, "config.json"), data, 0o644); err != nil {
		run.Setup = err.Error()
		return
	}
	ctlSize, ctlStderr, ctlErr := runc("runc", control, e.CID+"-control")
	var size int64
	var stderr string
	e.watch(run, func() {
		size, stderr, err = runc(filepath.Join(r.job.Bin, "gpurun-runtime"), e.Bundle, e.CID)
	})
	l := readLogged(e.log)
	run.Action, run.Error = l.action, l.err
	started, ctlStarted := err == nil && size > 0, ctlErr == nil && ctlSize > 0
	switch {
	case goCrash(stderr) != "" && goCrash(stderr) != goCrash(ctlStderr):
		// runc's own panic on the same input (a config.json that is
		// null) is runc's, handed over to under fail-open.
		run.Crash = goCrash(stderr)
	case l.panic != "":
		run.Crash = "recovered: " + l.panic
	case strings.Contains(fmt.Sprint(err), "hung"):
		run.Crash = err.Error()
	}
	failedByGPURun := l.err != "" && e.fail
	switch {
	case failedByGPURun && started:
		run.Unclear = "fail_closed: started although gpurun logged " + l.err
	case failedByGPURun && !strings.Contains(stderr, "fail_closed is set in"):
		run.Unclear = fmt.Sprintf("fail_closed: failed without naming fail_closed: %v %s", err, tail(stderr, 3))
	case failedByGPURun:
	case ctlStarted && !started:
		run.Failed = fmt.Sprintf("plain runc starts it, gpurun-runtime does not: %v %s", err, tail(stderr, 3))
	}
	if started && ctlStarted && size < ctlSize {
		run.Shrunk = fmt.Sprintf("/dev/shm %d bytes under gpurun-runtime, %d under runc", size, ctlSize)
	}
	if e.c.Expect != "" && !e.fail {
		switch {
		case run.Action != e.c.Expect:
			run.Missed = fmt.Sprintf("planned %q, want %q (err %s)", run.Action, e.c.Expect, l.err)
		case !started || size <= 64<<20:
			run.Missed = fmt.Sprintf("planned %q, but the container saw %d bytes (started %v)", run.Action, size, started)
		}
	}
}

// holder is a container's init as a hook sees it: a process in a mount
// namespace of its own with the container's own tmpfs at <rootfs>/dev/shm
// (runc's mounts before pivot_root).
type holder struct {
	cmd *exec.Cmd
	shm string // <rootfs>/dev/shm as seen through /proc/<pid>/root
}

func startHolder(shm string) (*holder, error) {
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-ec",
		`mount -t tmpfs -o size=65536k,nosuid,nodev,noexec,mode=1777 shm "$0"; echo ready; exec sleep 600`, shm)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := os.MkdirAll(shm, 0o755); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line == "ready\n"
	}()
	select {
	case ok := <-ready:
		if ok {
			return &holder{cmd: cmd, shm: fmt.Sprintf("/proc/%d/root%s", cmd.Process.Pid, shm)}, nil
		}
	case <-time.After(10 * time.Second):
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, fmt.Errorf("holder: %s", stderr.String())
}

func (h *holder) stop() {
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// defaultState is the state a runtime hands the hook for a config case.
const defaultState = `{"ociVersion": "1.0.2", "id": {{q .CID}}, "status": "creating", "pid": {{.Pid}}, "bundle": {{q .Bundle}}}`

// The config.json of state cases: the container's own tmpfs, or a bind of
// the pod's.
const (
	privateConfig = `{ {{std}}, "mounts": [{{mounts}}, {{shmTmpfs "nosuid" "noexec" "nodev" "mode=1777" "size=65536k"}}], "annotations": { {{cri}} } }`
	sandboxConfig = `{ {{std}}, "mounts": [{{mounts}}, {{shmBind .SandboxShm}}], "annotations": { {{cri}} } }`
)

// runHook: gpurun hook --stage createRuntime with the state on stdin. It
// must print nothing on stdout and exit 0 (fail-open), or fail naming
// fail_closed when it logged an error under fail_closed.
func (r *corpusRunner) runHook(e *caseEnv, run *doorRun) {
	h, err := startHolder(filepath.Join(e.Rootfs, "dev", "shm"))
	if err != nil {
		run.Setup = err.Error()
		return
	}
	e.holders = append(e.holders, h)
	e.Pid = h.cmd.Process.Pid
	cfgText, stateText := e.c.Template, defaultState
	if e.c.Kind == "state" {
		cfgText, stateText = privateConfig, e.c.Template
		if e.c.Config == "sandbox" {
			cfgText = sandboxConfig
		}
	}
	if _, err := e.writeConfig(cfgText); err != nil {
		run.Setup = err.Error()
		return
	}
	state, err := e.render(stateText)
	if err != nil {
		run.Setup = err.Error()
		return
	}
	env := os.Environ()
	var stdout, stderr string
	e.watch(run, func() {
		stdout, stderr, err = command(time.Minute, state, env, filepath.Join(r.job.Bin, "gpurun"), "hook", "--config", e.policy, "--stage", "createRuntime")
	})
	l := readLogged(e.log)
	run.Action, run.Error = l.action, l.err
	switch {
	case goCrash(stderr) != "":
		run.Crash = goCrash(stderr)
	case l.panic != "":
		run.Crash = "recovered: " + l.panic
	case strings.Contains(fmt.Sprint(err), "hung"):
		run.Crash = err.Error()
	case !l.planned && l.err == "":
		run.Crash = fmt.Sprintf("no log record (exit %v): %s", err, tail(stderr, 3))
	}
	switch {
	case stdout != "":
		run.Failed = fmt.Sprintf("printed on stdout: %q", stdout)
	case l.err != "" && e.fail:
		if err == nil || !strings.Contains(stderr, "fail_closed is set in") {
			run.Unclear = fmt.Sprintf("fail_closed: %v %s", err, tail(stderr, 3))
		}
	case err != nil:
		run.Failed = fmt.Sprintf("exit %v: %s", err, tail(stderr, 3))
	}
	if n := tmpfsBytes(h.shm); n < 64<<20 {
		run.Shrunk = fmt.Sprintf("the container's own /dev/shm: %d bytes", n)
	}
	if e.c.Expect != "" && !e.fail {
		switch {
		case run.Action != e.c.Expect:
			run.Missed = fmt.Sprintf("planned %q, want %q (err %s)", run.Action, e.c.Expect, l.err)
		case run.Action == string(oci.ActionSetSize) && tmpfsBytes(h.shm) <= 64<<20:
			run.Missed = "set-size, but the container's own tmpfs did not grow"
		case run.Action == string(oci.ActionRemount) && tmpfsBytes(e.SandboxShm) <= 64<<20:
			run.Missed = "remount, but the pod's tmpfs did not grow"
		}
	}
}

// podSandbox starts a stand-in for a pod's sandbox (pause) process: in a
// mount namespace of its own, private, so that nothing reaches the host's
// mount table, with shm bound at /dev/shm as containerd binds a pod's
// tmpfs into its sandbox container. It returns the pid, which NRI gives a
// plugin as the pod's, and a function that ends the process.
func podSandbox(shm string) (int, func(), error) {
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`mount --bind "$1" /dev/shm && echo ready && exec sleep 600`, "sandbox", shm)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("start a pod sandbox stand-in: %w", err)
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		stop()
		return 0, nil, fmt.Errorf("pod sandbox stand-in with %s at /dev/shm: %q, %v: %s", shm, line, err, stderr.String())
	}
	return cmd.Process.Pid, stop, nil
}

// nriRequest is an NRI case's input.
type nriRequest struct {
	Pod       *api.PodSandbox `json:"pod"`
	Container *api.Container  `json:"container"`
}

// nriFromConfig describes a config.json as containerd describes the
// container to NRI, or says why it cannot (not a spec: the engine would
// never have made it).
func (e *caseEnv) nriFromConfig(data []byte) (*nriRequest, error) {
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	ctr := &api.Container{Id: e.CID, PodSandboxId: e.SID, Name: "hostile", Annotations: s.Annotations,
		Mounts: api.FromOCIMounts(s.Mounts), Hooks: api.FromOCIHooks(s.Hooks)}
	if s.Process != nil {
		ctr.Args, ctr.Env = s.Process.Args, s.Process.Env
	}
	if s.Linux != nil {
		ctr.Linux = &api.LinuxContainer{Namespaces: api.FromOCILinuxNamespaces(s.Linux.Namespaces),
			Devices: api.FromOCILinuxDevices(s.Linux.Devices), Resources: api.FromOCILinuxResources(s.Linux.Resources, nil)}
	}
	return &nriRequest{Pod: &api.PodSandbox{Id: e.SID, Name: "hostile", Namespace: "default", Uid: "uid-" + e.SID[:8]}, Container: ctr}, nil
}

// runNRI: the plugin's CreateContainer in this process. Under fail-open it
// must return no error; under fail_closed a *enforce.FailClosedError when
// it logged an error, else none.
func (r *corpusRunner) runNRI(e *caseEnv, run *doorRun) {
	data, err := e.render(e.c.Template)
	if err != nil {
		run.Setup = err.Error()
		return
	}
	var req *nriRequest
	if e.c.Kind == "nri" {
		req = &nriRequest{}
		if err := json.Unmarshal(data, req); err != nil {
			run.Setup = fmt.Sprintf("NRI case: %v", err)
			return
		}
	} else if req, err = e.nriFromConfig(data); err != nil {
		run.NA, run.Error = true, "not a spec, which no engine hands NRI: "+err.Error()
		return
	}
	if req.Pod != nil && req.Pod.Pid == 0 {
		// containerd gives NRI the pid of the pod's sandbox, whose /dev/shm
		// is the pod's tmpfs: a stand-in for it.
		pid, stop, err := podSandbox(e.SandboxShm)
		if err != nil {
			run.Setup = err.Error()
			return
		}
		defer stop()
		req.Pod.Pid = uint32(pid)
	}
	text, err := os.ReadFile(e.policy)
	if err != nil {
		run.Setup = err.Error()
		return
	}
	pol, err := policy.Parse(e.policy, text)
	if err != nil {
		run.Setup = err.Error()
		return
	}
	logf, err := os.Create(e.log)
	if err != nil {
		run.Setup = err.Error()
		return
	}
	defer logf.Close()
	p := nri.New(nri.Config{Policy: pol, Logger: slog.New(slog.NewJSONHandler(logf, nil))})
	type answer struct {
		adj   *api.ContainerAdjustment
		err   error
		panic any
	}
	var ans answer
	e.watch(run, func() {
		done := make(chan answer, 1)
		go func() {
			defer func() {
				if v := recover(); v != nil {
					done <- answer{panic: v}
				}
			}()
			adj, _, err := p.CreateContainer(context.Background(), req.Pod, req.Container)
			done <- answer{adj: adj, err: err}
		}()
		select {
		case ans = <-done:
		case <-time.After(time.Minute):
			ans = answer{panic: "hung for a minute"}
		}
	})
	l := readLogged(e.log)
	run.Action, run.Error = l.action, l.err
	switch {
	case ans.panic != nil:
		run.Crash = fmt.Sprint(ans.panic)
		return
	case l.panic != "":
		run.Crash = "recovered: " + l.panic
	}
	var fc *enforce.FailClosedError
	switch {
	case l.err != "" && e.fail:
		if !errors.As(ans.err, &fc) || !strings.Contains(ans.err.Error(), "fail_closed is set in") {
			run.Unclear = fmt.Sprintf("fail_closed: CreateContainer returned %v", ans.err)
		}
	case ans.err != nil:
		run.Failed = "CreateContainer failed: " + ans.err.Error()
	}
	if ans.adj != nil {
		if s := adjustedShmBytes(ans.adj); s >= 0 && s < 64<<20 {
			run.Shrunk = fmt.Sprintf("the adjustment sizes /dev/shm %d bytes", s)
		}
	}
	if e.c.Expect != "" && !e.fail {
		switch {
		case run.Action != e.c.Expect:
			run.Missed = fmt.Sprintf("planned %q, want %q (err %s)", run.Action, e.c.Expect, l.err)
		case run.Action == string(oci.ActionSetSize) && adjustedShmBytes(ans.adj) <= 64<<20:
			run.Missed = "set-size, but no adjustment grows /dev/shm"
		case run.Action == string(oci.ActionRemount) && tmpfsBytes(e.SandboxShm) <= 64<<20:
			run.Missed = "remount, but the pod's tmpfs did not grow"
		}
	}
}

// adjustedShmBytes returns the size an adjustment's /dev/shm mount asks
// for, -1 for none.
func adjustedShmBytes(adj *api.ContainerAdjustment) int64 {
	if adj == nil {
		return -1
	}
	for _, m := range adj.GetMounts() {
		if m.GetDestination() != "/dev/shm" {
			continue
		}
		if v, _ := oci.SizeOption(m.GetOptions()); v != "" {
			n, err := policy.ParseMountSize(v, 0)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
